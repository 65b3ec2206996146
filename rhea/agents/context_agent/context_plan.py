"""The forest as a `ContextPlan`: the active path verbatim (or, with Rhea, older replies as
latents), every other topic and inactive branch as one summary line in the system block.

The summary lines go inside the one leading system message, which every chat template
accepts (extra system messages mid-conversation are refused by several templates).
"""
from __future__ import annotations

from typing import Any

from rhea.agents.context_agent.forest import Forest, Node, TopicTree
from rhea.context import Conversation, ContextPlan, Latent, TurnDecision
from rhea.policies.assemble import SystemSource, assemble_plan

OTHER_TOPICS_HEADER = "Other topics of this conversation (one line each, oldest first):"
OTHER_BRANCHES_HEADER = "Earlier alternatives in the current topic, not followed now:"


def _line(nodes: list[Node]) -> str:
    return " ; ".join(n.summary or n.user for n in sorted(nodes, key=lambda n: n.turn))


def summary_block(forest: Forest, active_tree_id: str | None, path_ids: set[str]) -> tuple[str, dict[int, str]]:
    """(system-block text, note per summarised turn) for everything off the active path."""
    notes: dict[int, str] = {}
    topic_lines, branch_lines = [], []
    for tree in forest.trees.values():
        if not tree.nodes:
            continue
        if tree.id != active_tree_id:
            topic_lines.append(f"- Topic {tree.id}: {_line(list(tree.nodes.values()))}")
            notes.update({n.turn: f"other topic {tree.id}: one summary line in the system block" for n in tree.nodes.values()})
            continue
        for branch in tree.branches.values():
            off = [tree.node(i) for i in branch.node_ids if i not in path_ids]
            if off:
                fork = f" (from {branch.fork_node_id})" if branch.fork_node_id else ""
                branch_lines.append(f"- Branch {branch.id}{fork}: {_line(off)}")
                notes.update({n.turn: f"inactive branch {branch.id} of {tree.id}: summary line in the system block" for n in off})
    parts = []
    if topic_lines:
        parts.append("\n".join([OTHER_TOPICS_HEADER, *topic_lines]))
    if branch_lines:
        parts.append("\n".join([OTHER_BRANCHES_HEADER, *branch_lines]))
    return "\n\n".join(parts), notes


def forest_plan(
    policy: str,
    conversation: Conversation,
    query: str,
    forest: Forest,
    tree: TopicTree | None,
    parent_id: str | None,
    *,
    latents: dict[int, Latent] | None = None,
    records: list[dict] = (),
    system_source: SystemSource = None,
    tokenizer: Any = None,
) -> ContextPlan:
    """The plan for `query` placed under `parent_id` in `tree` (None: a new topic)."""
    path = tree.path_to(parent_id) if tree is not None else []
    path_ids = {n.id for n in path}
    block, notes = summary_block(forest, tree.id if tree is not None else None, path_ids)
    latents = latents or {}
    decisions = []
    for node in path:
        if node.turn in latents:
            decisions.append(TurnDecision(node.turn, "latent", None, f"active path {node.id}, reply compressed"))
        else:
            decisions.append(TurnDecision(node.turn, "raw", None, f"active path {node.id}"))
    decisions += [TurnDecision(turn, "drop", None, note) for turn, note in notes.items()]
    # A turn on no path and in no summary would be lost without trace: name it instead.
    placed = {d.turn for d in decisions}
    decisions += [TurnDecision(i, "drop", None, "not in the forest") for i in range(len(conversation)) if i not in placed]
    return assemble_plan(policy, conversation, query, decisions, system_source=system_source,
                         extra_system=[block] if block else [], latents=latents, records=list(records), tokenizer=tokenizer)
