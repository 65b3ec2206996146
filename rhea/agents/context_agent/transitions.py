"""Where a new user message goes: topic attribution, then branch management.

1. Topic: same tree, another tree, or a new one. One batched LLM call over the leaf paths
   most similar to the message (embedding top-k); without a usable reply, the most similar
   path's tree if its similarity reaches `topic_threshold`, else a new tree.
2. Branch (inside the chosen tree): if the most similar node (similarity >= `branch_threshold`)
   is neither the current node nor absent, the LLM picks CONTINUE / CREATE_BRANCH / SWITCH_BRANCH;
   otherwise CONTINUE without a call. A bad reply falls back to the embedding's suggestion
   (`branch_fallback="embedding"`) or to CONTINUE (`"continue"`), and the record says why.

Nothing here mutates the forest: `decide` returns a `Placement`, `apply_placement` carries it out
when the turn is stored.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from rhea.agents.context_agent.errors import DecisionParseError, ForestStateError
from rhea.agents.context_agent.forest import Forest, Node, TopicTree
from rhea.agents.context_agent.parsing import parse_branch_decision, parse_topic_choice
from rhea.agents.context_agent.prompts import branch_messages, topic_messages
from rhea.agents.context_agent.similarity import top_k_nodes
from rhea.backends.llm import TextGenerator
from rhea.errors import RheaConfigError

BRANCH_FALLBACKS = ("embedding", "continue")


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
    top_k: int = 3
    topic_threshold: float = 0.4
    branch_threshold: float = 0.6
    max_topic_candidates: int = 6
    summaries_per_topic: int = 6
    decision_max_new_tokens: int = 64
    branch_fallback: str = "embedding"

    def __post_init__(self) -> None:
        for name in ("top_k", "max_topic_candidates", "summaries_per_topic", "decision_max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RheaConfigError(f"{name}={value!r} must be an int >= 1")
        for name in ("topic_threshold", "branch_threshold"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not -1.0 <= value <= 1.0:
                raise RheaConfigError(f"{name}={value!r} must be a cosine similarity in [-1, 1]")
        if self.branch_fallback not in BRANCH_FALLBACKS:
            raise RheaConfigError(f"branch_fallback={self.branch_fallback!r} must be one of {BRANCH_FALLBACKS}")


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

    def decide(self, forest: Forest, query: str, query_vec: np.ndarray, records: list[dict]) -> Placement:
        tree_id = self._topic(forest, query, query_vec, records)
        if tree_id is None:
            return Placement(None)
        return self._branch(forest, forest.tree(tree_id), query, query_vec, records)

    # ------------------------------------------------------------------ topic attribution
    def _leaf_paths(self, forest: Forest, query_vec: np.ndarray) -> list[dict]:
        paths = []
        for tree in forest.trees.values():
            for leaf in tree.leaves():
                nodes = tree.path_to(leaf.id)
                best = top_k_nodes(query_vec, nodes, 1)[0][1]
                current = tree.id == forest.active_tree_id and tree.current_node_id in {n.id for n in nodes}
                paths.append({"tree_id": tree.id, "leaf_id": leaf.id, "nodes": nodes, "similarity": best, "current": current})
        paths.sort(key=lambda p: (not p["current"], -p["similarity"]))
        return paths[: self.config.max_topic_candidates]

    def _topic(self, forest: Forest, query: str, query_vec: np.ndarray, records: list[dict]) -> str | None:
        if len(forest) == 0:
            records.append({"event": "topic", "choice": "new", "source": "rule", "reason": "first message"})
            return None
        paths = self._leaf_paths(forest, query_vec)
        record = {"event": "topic", "candidates": [
            {"number": i + 1, "tree_id": p["tree_id"], "leaf_id": p["leaf_id"], "similarity": round(p["similarity"], 4)}
            for i, p in enumerate(paths)]}
        chosen = None
        if self.generator is not None:
            listing = [(i + 1, "current" if p["current"] else "",
                        [node_label(n) for n in p["nodes"][-self.config.summaries_per_topic:]]) for i, p in enumerate(paths)]
            reply = self._ask(topic_messages(listing, query))
            record["raw_reply"] = reply
            try:
                number, reason = parse_topic_choice(reply, len(paths))
                chosen = "new" if number == 0 else paths[number - 1]["tree_id"]
                record.update(source="llm", reason=reason)
            except DecisionParseError as exc:
                record.update(fallback_reason=str(exc))
        if chosen is None:
            best = max(paths, key=lambda p: p["similarity"])
            chosen = best["tree_id"] if best["similarity"] >= self.config.topic_threshold else "new"
            record.update(source="fallback:embedding" if self.generator is not None else "embedding",
                          reason=f"best path similarity {best['similarity']:.3f} vs topic_threshold={self.config.topic_threshold}")
        record["choice"] = chosen
        records.append(record)
        return None if chosen == "new" else chosen

    # ------------------------------------------------------------------ branch management
    def _branch(self, forest: Forest, tree: TopicTree, query: str, query_vec: np.ndarray, records: list[dict]) -> Placement:
        similar = top_k_nodes(query_vec, list(tree.nodes.values()), self.config.top_k)
        path = tree.path_to(tree.current_node_id)
        on_path = {n.id for n in path}
        record = {"event": "branch", "tree_id": tree.id, "current_node_id": tree.current_node_id,
                  "similar": [{"node_id": n.id, "branch_id": n.branch_id, "similarity": round(s, 4)} for n, s in similar]}
        best, score = similar[0]
        suggestion = self._suggest(tree, best, on_path)
        if score < self.config.branch_threshold or best.id == tree.current_node_id:
            why = (f"top similarity {score:.3f} < branch_threshold={self.config.branch_threshold}"
                   if score < self.config.branch_threshold else "most similar node is the current node")
            record.update(action="CONTINUE", source="rule", reason=why)
            records.append(record)
            return Placement(tree.id)
        decision = None
        if self.generator is not None:
            others = [(b.id, " ; ".join(node_label(tree.node(n)) for n in b.node_ids[-3:]) or f"(empty, forks at {b.fork_node_id})")
                      for b in tree.branches.values() if b.id != tree.active_branch_id]
            reply = self._ask(branch_messages([(n.id, node_label(n)) for n in path],
                                              [(n.id, n.branch_id, node_label(n), s) for n, s in similar], others, query))
            record["raw_reply"] = reply
            try:
                decision = parse_branch_decision(reply, set(tree.nodes), {b for b, _ in others})
                record.update(source="llm", reason=decision["reason"])
            except DecisionParseError as exc:
                record["fallback_reason"] = str(exc)
        if decision is None:
            decision = suggestion if self.config.branch_fallback == "embedding" else {"action": "CONTINUE"}
            record.update(source=f"fallback:{self.config.branch_fallback}" if self.generator is not None else "embedding",
                          reason=f"{best.id} (similarity {score:.3f}) {'is on' if best.id in on_path else 'is off'} the current path")
        record.update({k: v for k, v in decision.items() if k != "reason"})
        records.append(record)
        return Placement(tree.id, decision["action"], decision.get("fork_node_id"), decision.get("target_branch_id"))

    @staticmethod
    def _suggest(tree: TopicTree, best: Node, on_path: set[str]) -> dict:
        """What the embedding alone suggests when the best match is not the current node."""
        if best.id not in on_path and tree.branch_tip(best.branch_id) == best.id:
            return {"action": "SWITCH_BRANCH", "target_branch_id": best.branch_id}
        return {"action": "CREATE_BRANCH", "fork_node_id": best.id}

    def _ask(self, messages: list[dict]) -> str:
        self.llm_calls += 1
        return self.generator.generate(messages, max_new_tokens=self.config.decision_max_new_tokens, temperature=0.0)
