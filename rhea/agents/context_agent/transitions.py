"""Where a new user message goes: topic attribution, then branch management (paper §3.3,
as the authors' released code carries it out; docs/reports/fidelity.md, section Context-Agent).

1. Topic. ``topic_mode="per-path"`` (the reference): every leaf path (root -> leaf summaries)
   is asked in turn, the current tree's first and then the others oldest first, "does the
   message continue this topic? yes/no"; the first yes picks the tree, all no opens a new one.
   ``topic_mode="batched"`` (ours, cheaper): one call lists the candidate paths and asks for a
   number. A reply that cannot be read falls back to the embedding: the path's best node
   similarity against `topic_threshold` (per path), or the most similar path (batched); with
   no generator the embedding decides alone.
2. Branch (inside the chosen tree), gated as the reference gates it: the k = `top_k` nodes
   most similar to the message are retrieved; the LLM is consulted only when the best one's
   similarity exceeds `branch_threshold` (0.6) AND it lies on another branch than the current
   node, or is an ancestor of the current node other than its parent. Otherwise CONTINUE
   without a call. The LLM names only the action: the fork node of CREATE_BRANCH is the top
   retrieved node and the target of SWITCH_BRANCH is that node's branch (the reference
   overrides any id the LLM writes the same way). A reply that cannot be read gives CONTINUE
   (``branch_fallback="continue"``, the reference) or the embedding's suggestion
   (``"embedding"``); the record says why.

Nothing here mutates the forest: `decide` returns a `Placement`, `apply_placement` carries it out
when the turn is stored.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from rhea.agents.context_agent.errors import DecisionParseError, ForestStateError
from rhea.agents.context_agent.forest import Forest, Node, TopicTree
from rhea.agents.context_agent.parsing import parse_branch_decision, parse_topic_choice, parse_yes_no
from rhea.agents.context_agent.prompts import branch_messages, topic_messages, topic_path_messages
from rhea.agents.context_agent.similarity import top_k_nodes
from rhea.backends.llm import TextGenerator
from rhea.context.budget import fit_inner
from rhea.errors import RheaConfigError

BRANCH_FALLBACKS = ("continue", "embedding")
TOPIC_MODES = ("per-path", "batched")


@dataclass
class Placement:
    """Where the next turn attaches: a tree (None: a new one) and the action inside it."""

    tree_id: str | None
    action: str = "CONTINUE"
    fork_node_id: str | None = None
    target_branch_id: str | None = None

    def parent_id(self, forest: Forest) -> str | None:
        """The node the next turn will hang under (None for a new tree)."""
        if self.tree_id is None:
            return None
        tree = forest.tree(self.tree_id)
        if self.action == "CREATE_BRANCH":
            return self.fork_node_id
        if self.action == "SWITCH_BRANCH":
            return tree.branch_tip(self.target_branch_id)
        return tree.current_node_id

    def to_dict(self) -> dict:
        return asdict(self)


def apply_placement(forest: Forest, placement: Placement) -> TopicTree:
    """Carry out a placement on the forest; returns the tree the next node goes into."""
    if placement.tree_id is None:
        return forest.new_tree()
    if placement.action == "CREATE_BRANCH":
        forest.create_branch(placement.tree_id, placement.fork_node_id)
    elif placement.action == "SWITCH_BRANCH":
        forest.switch_branch(placement.tree_id, placement.target_branch_id)
    elif placement.action == "CONTINUE":
        forest.activate(placement.tree_id)
    else:
        raise ForestStateError(f"placement action={placement.action!r} must be CONTINUE, CREATE_BRANCH or SWITCH_BRANCH")
    return forest.tree(placement.tree_id)


@dataclass
class NavigatorConfig:
    """Defaults are the reference's: k = 3 retrieved nodes, a 0.6 similarity gate, every leaf path
    asked, whole-path summaries, CONTINUE when a branch reply cannot be read. `topic_threshold`
    (0.2) is ours: the reference has no embedding fallback for topics (an unreadable reply is "no");
    0.2 is where MiniLM-only decisions switch topic as often as TopiOCQA's gold segments (docs/reports/fidelity.md)."""

    top_k: int = 3
    topic_threshold: float = 0.2
    branch_threshold: float = 0.6
    max_topic_candidates: int | None = None
    summaries_per_topic: int | None = None
    decision_max_new_tokens: int = 64
    branch_fallback: str = "continue"
    topic_mode: str = "per-path"

    def __post_init__(self) -> None:
        for name in ("top_k", "max_topic_candidates", "summaries_per_topic", "decision_max_new_tokens"):
            value = getattr(self, name)
            if value is None and name in ("max_topic_candidates", "summaries_per_topic"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RheaConfigError(f"{name}={value!r} must be an int >= 1" + (" or None (no limit)" if name in (
                    "max_topic_candidates", "summaries_per_topic") else ""))
        for name in ("topic_threshold", "branch_threshold"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not -1.0 <= value <= 1.0:
                raise RheaConfigError(f"{name}={value!r} must be a cosine similarity in [-1, 1]")
        if self.branch_fallback not in BRANCH_FALLBACKS:
            raise RheaConfigError(f"branch_fallback={self.branch_fallback!r} must be one of {BRANCH_FALLBACKS}")
        if self.topic_mode not in TOPIC_MODES:
            raise RheaConfigError(f"topic_mode={self.topic_mode!r} must be one of {TOPIC_MODES}")


def node_label(node: Node) -> str:
    return node.summary or node.user


class Navigator:
    """Decides the `Placement` of a message; appends one record per step to `records`."""

    def __init__(self, generator: TextGenerator | None, config: NavigatorConfig):
        if generator is not None and not isinstance(generator, TextGenerator):
            raise RheaConfigError(f"generator={generator!r} must implement TextGenerator.generate(messages, ...) or be None")
        self.generator = generator
        self.config = config
        self.llm_calls = 0
        self._records: list[dict] | None = None

    def decide(self, forest: Forest, query: str, query_vec: np.ndarray, records: list[dict]) -> Placement:
        self._records = records  # where `_ask` records the cuts that fit its prompts to the window
        tree_id = self._topic(forest, query, query_vec, records)
        if tree_id is None:
            return Placement(None)
        return self._branch(forest, forest.tree(tree_id), query, query_vec, records)

    # ------------------------------------------------------------------ topic attribution
    def _leaf_paths(self, forest: Forest, query_vec: np.ndarray) -> list[dict]:
        """Leaf paths, the current tree's first, then the other trees oldest first (the reference's order)."""
        paths = []
        for tree in forest.trees.values():
            for leaf in tree.leaves():
                nodes = tree.path_to(leaf.id)
                best = top_k_nodes(query_vec, nodes, 1)[0][1]
                current = tree.id == forest.active_tree_id and tree.current_node_id in {n.id for n in nodes}
                paths.append({"tree_id": tree.id, "leaf_id": leaf.id, "nodes": nodes, "similarity": best, "current": current,
                              "active_tree": tree.id == forest.active_tree_id})
        paths.sort(key=lambda p: (not p["active_tree"], not p["current"]))  # stable: creation order otherwise
        cap = self.config.max_topic_candidates
        return paths if cap is None else paths[:cap]

    def _summaries(self, path: dict) -> list[str]:
        keep = self.config.summaries_per_topic
        nodes = path["nodes"] if keep is None else path["nodes"][-keep:]
        return [node_label(n) for n in nodes]

    def _topic(self, forest: Forest, query: str, query_vec: np.ndarray, records: list[dict]) -> str | None:
        if len(forest) == 0:
            records.append({"event": "topic", "choice": "new", "source": "rule", "reason": "first message"})
            return None
        paths = self._leaf_paths(forest, query_vec)
        record = {"event": "topic", "mode": self.config.topic_mode, "candidates": [
            {"number": i + 1, "tree_id": p["tree_id"], "leaf_id": p["leaf_id"], "similarity": round(p["similarity"], 4)}
            for i, p in enumerate(paths)]}
        if self.generator is None:
            best = max(paths, key=lambda p: p["similarity"])
            chosen = best["tree_id"] if best["similarity"] >= self.config.topic_threshold else "new"
            record.update(source="embedding", reason=f"best path similarity {best['similarity']:.3f} vs "
                                                      f"topic_threshold={self.config.topic_threshold}")
        elif self.config.topic_mode == "per-path":
            chosen = self._topic_per_path(paths, query, record)
        else:
            chosen = self._topic_batched(paths, query, record)
        record["choice"] = chosen
        records.append(record)
        return None if chosen == "new" else chosen

    def _topic_per_path(self, paths: list[dict], query: str, record: dict) -> str:
        """Ask each leaf path in order; the first yes wins, all no opens a new topic."""
        record["asked"] = []
        for p in paths:
            reply = self._ask(topic_path_messages(" ".join(self._summaries(p)), query), max_new_tokens=8,
                              call="context_agent.topic_path")
            asked = {"leaf_id": p["leaf_id"], "raw_reply": reply}
            try:
                same, asked["source"] = parse_yes_no(reply), "llm"
            except DecisionParseError as exc:
                same = p["similarity"] >= self.config.topic_threshold
                asked.update(source="fallback:embedding", fallback_reason=str(exc),
                             reason=f"path similarity {p['similarity']:.3f} vs topic_threshold={self.config.topic_threshold}")
            asked["same_topic"] = same
            record["asked"].append(asked)
            if same:
                record.update(source=asked["source"], reason=f"leaf path {p['leaf_id']} continues this topic")
                return p["tree_id"]
        record.update(source="llm" if all(a["source"] == "llm" for a in record["asked"]) else "mixed",
                      reason="no leaf path continues this topic")
        return "new"

    def _topic_batched(self, paths: list[dict], query: str, record: dict) -> str:
        listing = [(i + 1, "current" if p["current"] else "", self._summaries(p)) for i, p in enumerate(paths)]
        reply = self._ask(topic_messages(listing, query), call="context_agent.topic")
        record["raw_reply"] = reply
        try:
            number, reason = parse_topic_choice(reply, len(paths))
            record.update(source="llm", reason=reason)
            return "new" if number == 0 else paths[number - 1]["tree_id"]
        except DecisionParseError as exc:
            best = max(paths, key=lambda p: p["similarity"])
            record.update(fallback_reason=str(exc), source="fallback:embedding",
                          reason=f"best path similarity {best['similarity']:.3f} vs topic_threshold={self.config.topic_threshold}")
            return best["tree_id"] if best["similarity"] >= self.config.topic_threshold else "new"

    # ------------------------------------------------------------------ branch management
    @staticmethod
    def _gate(tree: TopicTree, best: Node) -> str | None:
        """Why the reference would consult the LLM about `best` (None: it would not)."""
        current = tree.node(tree.current_node_id)
        if best.branch_id != current.branch_id:
            return f"{best.id} is on another branch ({best.branch_id}) than the current node {current.id}"
        ancestors = {n.id for n in tree.path_to(current.parent_id)}
        if best.id in ancestors and best.id != current.parent_id:
            return f"{best.id} is an ancestor of the current node {current.id}, not its parent"
        return None

    def _branch(self, forest: Forest, tree: TopicTree, query: str, query_vec: np.ndarray, records: list[dict]) -> Placement:
        similar = top_k_nodes(query_vec, list(tree.nodes.values()), self.config.top_k)
        path = tree.path_to(tree.current_node_id)
        on_path = {n.id for n in path}
        record = {"event": "branch", "tree_id": tree.id, "current_node_id": tree.current_node_id,
                  "similar": [{"node_id": n.id, "branch_id": n.branch_id, "similarity": round(s, 4)} for n, s in similar]}
        best, score = similar[0]
        gate = self._gate(tree, best) if score > self.config.branch_threshold else None
        if gate is None:
            why = (f"top similarity {score:.3f} <= branch_threshold={self.config.branch_threshold}"
                   if score <= self.config.branch_threshold else
                   f"most similar node {best.id} is the current node, its parent or a later node of its branch")
            record.update(action="CONTINUE", source="rule", reason=why)
            records.append(record)
            return Placement(tree.id)
        record["gate"] = gate
        decision = None
        if self.generator is not None:
            others = [(b.id, " ; ".join(node_label(tree.node(n)) for n in b.node_ids[-3:]) or f"(empty, forks at {b.fork_node_id})")
                      for b in tree.branches.values() if b.id != tree.active_branch_id]
            reply = self._ask(branch_messages([(n.id, node_label(n)) for n in path],
                                              [(n.id, n.branch_id, node_label(n), s) for n, s in similar], others, query),
                              call="context_agent.branch")
            record["raw_reply"] = reply
            try:
                decision = parse_branch_decision(reply)
                record.update(source="llm", reason=decision.pop("reason"))
            except DecisionParseError as exc:
                record["fallback_reason"] = str(exc)
        if decision is None:
            embedding = self.generator is None or self.config.branch_fallback == "embedding"
            decision = self._suggest(tree, best, on_path) if embedding else {"action": "CONTINUE"}
            record.update(source=f"fallback:{self.config.branch_fallback}" if self.generator is not None else "embedding",
                          reason=f"{best.id} (similarity {score:.3f}) {'is on' if best.id in on_path else 'is off'} the current path")
        action = decision["action"]
        # The ids come from retrieval, never from the LLM's text (as the reference overrides them).
        if action == "CREATE_BRANCH":
            decision["fork_node_id"] = best.id
        elif action == "SWITCH_BRANCH":
            decision["target_branch_id"] = best.branch_id
            if best.branch_id == tree.active_branch_id:
                action = decision["action"] = "CONTINUE"
                record["note"] = f"SWITCH_BRANCH to the active branch {best.branch_id} is CONTINUE"
        record.update({k: v for k, v in decision.items() if k in ("action", "fork_node_id", "target_branch_id",
                                                                  "llm_fork_node_id", "llm_target_branch_id")})
        records.append(record)
        return Placement(tree.id, action, decision.get("fork_node_id"),
                         decision.get("target_branch_id") if action == "SWITCH_BRANCH" else None)

    @staticmethod
    def _suggest(tree: TopicTree, best: Node, on_path: set[str]) -> dict:
        """What the embedding alone suggests when the best match is not the current node."""
        if best.id not in on_path and tree.branch_tip(best.branch_id) == best.id:
            return {"action": "SWITCH_BRANCH", "target_branch_id": best.branch_id}
        return {"action": "CREATE_BRANCH", "fork_node_id": best.id}

    def _ask(self, messages: list[dict], max_new_tokens: int | None = None, *, call: str = "context_agent") -> str:
        """One decision call, its prompt fitted to the generator's window (`rhea.context.budget.fit_inner`)."""
        self.llm_calls += 1
        max_new_tokens = max_new_tokens or self.config.decision_max_new_tokens
        messages = fit_inner(self.generator, messages, max_new_tokens, call=call, record=self._records)
        return self.generator.generate(messages, max_new_tokens=max_new_tokens, temperature=0.0)
