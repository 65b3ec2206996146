"""The dialogue as a forest of topic trees: `Node`, `Branch`, `TopicTree`, `Forest`.

Each turn is a `Node` (user text, reply, embedding, parent, branch, one-line summary).
A `TopicTree` holds one topic; its `Branch`es are lines of refinement that fork from an
earlier node. The `Forest` knows which tree is active; each tree knows its active branch
and current node, so returning to a topic resumes where it was left.

>>> f = Forest()
>>> n1 = f.add_node(f.new_tree(), "Plan a trip to Rome", "Sure.", turn=0, embedding=[1.0, 0.0])
>>> n2 = f.add_node(f.active_tree, "Budget 800 EUR", "Noted.", turn=1, embedding=[0.9, 0.1])
>>> [n.turn for n in f.active_path()]
[0, 1]
>>> Forest.from_dict(f.to_dict()).to_dict() == f.to_dict()
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from rhea.agents.context_agent.errors import ForestStateError

SUMMARY_SOURCES = ("llm", "truncation", "")


@dataclass
class Node:
    """One exchange placed in a tree. `summary_source` says who wrote the summary:
    "llm", "truncation" (the deterministic fallback) or "" (not written yet)."""

    id: str
    tree_id: str
    branch_id: str
    parent_id: str | None
    turn: int
    user: str
    assistant: str
    embedding: list[float]
    summary: str = ""
    summary_source: str = ""
    children: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.summary_source not in SUMMARY_SOURCES:
            raise ForestStateError(f"Node.summary_source={self.summary_source!r} must be one of {SUMMARY_SOURCES}")
        # float32 values held as Python floats: exact through a JSON round trip.
        self.embedding = [float(x) for x in np.asarray(self.embedding, dtype=np.float32).reshape(-1)]

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()}


@dataclass
class Branch:
    """A line of nodes in a tree. The main branch starts at the tree's first node
    (`fork_node_id` None); others start right after `fork_node_id`."""

    id: str
    tree_id: str
    fork_node_id: str | None
    node_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"id": self.id, "tree_id": self.tree_id, "fork_node_id": self.fork_node_id, "node_ids": list(self.node_ids)}


@dataclass
class TopicTree:
    """One topic: nodes, branches, and where the conversation stands in it."""

    id: str
    nodes: dict[str, Node] = field(default_factory=dict)
    branches: dict[str, Branch] = field(default_factory=dict)
    active_branch_id: str | None = None
    current_node_id: str | None = None

    def path_to(self, node_id: str | None) -> list[Node]:
        """Nodes from the tree's first node down to `node_id` (empty for None)."""
        path = []
        while node_id is not None:
            node = self.node(node_id)
            path.append(node)
            node_id = node.parent_id
        return path[::-1]

    def node(self, node_id: str) -> Node:
        if node_id not in self.nodes:
            raise ForestStateError(f"node {node_id!r} is not in tree {self.id!r}; nodes: {sorted(self.nodes)}")
        return self.nodes[node_id]

    def branch_tip(self, branch_id: str) -> str | None:
        """The newest node of a branch, or its fork node while it is still empty."""
        if branch_id not in self.branches:
            raise ForestStateError(f"branch {branch_id!r} is not in tree {self.id!r}; branches: {sorted(self.branches)}")
        branch = self.branches[branch_id]
        return branch.node_ids[-1] if branch.node_ids else branch.fork_node_id

    def leaves(self) -> list[Node]:
        return [n for n in self.nodes.values() if not n.children]

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "nodes": [n.to_dict() for n in self.nodes.values()],
            "branches": [b.to_dict() for b in self.branches.values()],
            "active_branch_id": self.active_branch_id,
            "current_node_id": self.current_node_id,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "TopicTree":
        tree = cls(data["id"], active_branch_id=data["active_branch_id"], current_node_id=data["current_node_id"])
        tree.nodes = {n["id"]: Node(**n) for n in data["nodes"]}
        tree.branches = {b["id"]: Branch(**b) for b in data["branches"]}
        return tree


class Forest:
    """Every topic tree of a conversation, and which one is active.

    Ids are short and stable ("t1", "b2", "n7") so an LLM can name them in a decision.
    """

    def __init__(self) -> None:
        self.trees: dict[str, TopicTree] = {}
        self.active_tree_id: str | None = None
        self._counters = {"t": 0, "b": 0, "n": 0}

    # ------------------------------------------------------------------ state
    @property
    def active_tree(self) -> TopicTree | None:
        return self.trees[self.active_tree_id] if self.active_tree_id is not None else None

    @property
    def active_branch_id(self) -> str | None:
        tree = self.active_tree
        return tree.active_branch_id if tree else None

    @property
    def current_node(self) -> Node | None:
        tree = self.active_tree
        return tree.node(tree.current_node_id) if tree and tree.current_node_id else None

    def tree(self, tree_id: str) -> TopicTree:
        if tree_id not in self.trees:
            raise ForestStateError(f"tree {tree_id!r} does not exist; trees: {list(self.trees)}")
        return self.trees[tree_id]

    def nodes(self) -> Iterator[Node]:
        for tree in self.trees.values():
            yield from tree.nodes.values()

    def node(self, node_id: str) -> Node:
        for tree in self.trees.values():
            if node_id in tree.nodes:
                return tree.nodes[node_id]
        raise ForestStateError(f"node {node_id!r} is in no tree of the forest")

    def __len__(self) -> int:
        return sum(len(t.nodes) for t in self.trees.values())

    def active_path(self) -> list[Node]:
        """The active tree's nodes from its first node to the current node."""
        tree = self.active_tree
        return tree.path_to(tree.current_node_id) if tree else []

    # ------------------------------------------------------------------ transitions
    def _next_id(self, kind: str) -> str:
        self._counters[kind] += 1
        return f"{kind}{self._counters[kind]}"

    def new_tree(self) -> TopicTree:
        """Open a new topic with an empty main branch and make it active."""
        tree = TopicTree(self._next_id("t"))
        branch = Branch(self._next_id("b"), tree.id, None)
        tree.branches[branch.id] = branch
        tree.active_branch_id = branch.id
        self.trees[tree.id] = tree
        self.active_tree_id = tree.id
        return tree

    def activate(self, tree_id: str) -> TopicTree:
        """Return to a topic: its active branch and current node are kept."""
        self.active_tree_id = self.tree(tree_id).id
        return self.trees[tree_id]

    def create_branch(self, tree_id: str, fork_node_id: str) -> Branch:
        """Open a branch that continues from `fork_node_id`, and move there."""
        tree = self.activate(tree_id)
        tree.node(fork_node_id)
        branch = Branch(self._next_id("b"), tree.id, fork_node_id)
        tree.branches[branch.id] = branch
        tree.active_branch_id, tree.current_node_id = branch.id, fork_node_id
        return branch

    def switch_branch(self, tree_id: str, branch_id: str) -> None:
        """Move to the tip of an existing branch."""
        tree = self.activate(tree_id)
        tip = tree.branch_tip(branch_id)
        tree.active_branch_id, tree.current_node_id = branch_id, tip

    def add_node(self, tree: TopicTree, user: str, assistant: str, *, turn: int, embedding) -> Node:
        """Append a turn under the tree's current node on its active branch; it becomes current."""
        if tree.id not in self.trees:
            raise ForestStateError(f"tree {tree.id!r} does not belong to this forest")
        node = Node(self._next_id("n"), tree.id, tree.active_branch_id, tree.current_node_id, turn, user, assistant,
                    list(np.asarray(embedding, dtype=np.float32).reshape(-1)))
        if node.parent_id is not None:
            tree.node(node.parent_id).children.append(node.id)
        tree.nodes[node.id] = node
        tree.branches[tree.active_branch_id].node_ids.append(node.id)
        tree.current_node_id = node.id
        self.active_tree_id = tree.id
        return node

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        return {
            "trees": [t.to_dict() for t in self.trees.values()],
            "active_tree_id": self.active_tree_id,
            "counters": dict(self._counters),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Forest":
        """Rebuild a forest from `to_dict()`; raises ForestStateError on a dict of another shape."""
        try:
            forest = cls()
            forest.trees = {t["id"]: TopicTree.from_dict(t) for t in data["trees"]}
            forest.active_tree_id = data["active_tree_id"]
            forest._counters = {k: int(data["counters"][k]) for k in ("t", "b", "n")}
        except (KeyError, TypeError) as exc:
            raise ForestStateError(f"forest dict lacks or mistypes {exc}; pass what Forest.to_dict() returned") from exc
        if forest.active_tree_id is not None:
            forest.tree(forest.active_tree_id)
        return forest

    # ------------------------------------------------------------------ display
    def trace(self) -> str:
        """An indented picture of every tree: branches, summaries, and the current node.

        >>> f = Forest(); _ = f.add_node(f.new_tree(), "hi", "hello", turn=0, embedding=[1.0])
        >>> print(f.trace())
        * t1 (active branch b1)
            n1 [b1] turn 0: hi  <- current
        """
        lines = []
        for tree in self.trees.values():
            mark = "*" if tree.id == self.active_tree_id else "-"
            lines.append(f"{mark} {tree.id} (active branch {tree.active_branch_id})")
            roots = [n for n in tree.nodes.values() if n.parent_id is None]
            stack = [(n, 1) for n in reversed(roots)]
            while stack:
                node, depth = stack.pop()
                current = "  <- current" if tree.id == self.active_tree_id and node.id == tree.current_node_id else ""
                text = node.summary or node.user
                lines.append(f"{'    ' * depth}{node.id} [{node.branch_id}] turn {node.turn}: {_one_line(text)}{current}")
                stack.extend((tree.node(c), depth + 1) for c in reversed(node.children))
        return "\n".join(lines)


def _one_line(text: str, limit: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
