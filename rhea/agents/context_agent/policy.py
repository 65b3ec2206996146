"""`ContextAgent`: the Context-Agent forest as a `ContextPolicy` ("context-agent").

`build(conversation, query)` places the query (topic, then branch) and returns the plan;
`observe(turn)` stores the turn as a node where the query was placed and writes its
summary. Turns it was not shown are caught up in `build`, so a harness may call either.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from rhea.agents.context_agent.context_plan import forest_plan
from rhea.agents.context_agent.errors import DecisionParseError, ForestStateError
from rhea.agents.context_agent.forest import Forest, Node
from rhea.agents.context_agent.parsing import parse_summary, truncation_summary
from rhea.agents.context_agent.prompts import summary_messages
from rhea.agents.context_agent.similarity import EmbeddingCache
from rhea.agents.context_agent.transitions import Navigator, NavigatorConfig, Placement, apply_placement
from rhea.backends.embedding import Embedder
from rhea.backends.llm import TextGenerator
from rhea.context import Conversation, ContextPlan, Latent, Turn
from rhea.context.budget import fit_inner
from rhea.errors import RheaConfigError
from rhea.policies import ContextPolicy, register_policy
from rhea.policies.assemble import SystemSource
from rhea.policies.validation import positive_int

CompressFn = Callable[[list], torch.Tensor]


@register_policy("context-agent")
class ContextAgent(ContextPolicy):
    """Dialogue as a forest of topic trees; the context is the active path plus summaries.

    generator: any `TextGenerator` for the topic/branch decisions and node summaries, or
    None (embedding-only decisions, truncation summaries). embedder: any `Embedder`
    (default: the offline `MiniLMEmbedder`). compress_fn + keep_raw_last: with Rhea
    (`compress_fn=model.compress`), replies on the active path older than the last
    `keep_raw_last` path turns become `Latent`s.

    >>> from rhea.context import Conversation, Turn
    >>> from rhea.backends.embedding import HashingEmbedder
    >>> agent = ContextAgent(None, HashingEmbedder(256))
    >>> conv = Conversation()
    >>> for user in ["Plan a trip to Rome in May", "Recipe for banana bread please"]:
    ...     plan = agent.build(conv, user)
    ...     conv.append(Turn(user, "ok")); agent.observe(conv[-1])
    >>> plan = agent.build(conv, "For the Rome trip in May, which hotel?")
    >>> [r["choice"] for r in plan.decisions.records if r["event"] == "topic"]
    ['t1']
    >>> [d.tier for d in plan.decisions.turns]
    ['raw', 'drop']
    """

    controller_arg = "generator"

    def __init__(
        self,
        generator: TextGenerator | None = None,
        embedder: Embedder | None = None,
        *,
        top_k: int = 3,
        topic_threshold: float = 0.2,
        branch_threshold: float = 0.6,
        max_topic_candidates: int | None = None,
        summaries_per_topic: int | None = None,
        topic_mode: str = "per-path",
        decision_max_new_tokens: int = 64,
        summary_max_new_tokens: int = 48,
        branch_fallback: str = "continue",
        embed_replies: bool = True,
        compress_fn: CompressFn | None = None,
        keep_raw_last: int | None = None,
        system_prompt: SystemSource = None,
        tokenizer: Any = None,
    ):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        if embedder is None:
            from rhea.backends.embedding import MiniLMEmbedder

            embedder = MiniLMEmbedder()
        self.embeddings = EmbeddingCache(embedder)
        self.navigator = Navigator(generator, NavigatorConfig(
            top_k=top_k, topic_threshold=topic_threshold, branch_threshold=branch_threshold,
            max_topic_candidates=max_topic_candidates, summaries_per_topic=summaries_per_topic,
            decision_max_new_tokens=decision_max_new_tokens, branch_fallback=branch_fallback, topic_mode=topic_mode))
        self.summary_max_new_tokens = positive_int(summary_max_new_tokens, "summary_max_new_tokens")
        self.embed_replies = bool(embed_replies)
        if compress_fn is not None and not callable(compress_fn):
            raise RheaConfigError(f"compress_fn={compress_fn!r} must be callable: texts -> Tensor[B, n, hidden] (e.g. model.compress)")
        if (compress_fn is None) != (keep_raw_last is None):
            raise RheaConfigError(f"compress_fn and keep_raw_last={keep_raw_last!r} go together: pass both (Rhea) or neither")
        self.compress_fn = compress_fn
        self.keep_raw_last = None if keep_raw_last is None else positive_int(keep_raw_last, "keep_raw_last", minimum=0)
        self.reset()

    @property
    def generator(self) -> TextGenerator | None:
        return self.navigator.generator

    def config(self) -> dict:
        c = self.navigator.config
        return {"top_k": c.top_k, "topic_threshold": c.topic_threshold, "branch_threshold": c.branch_threshold,
                "max_topic_candidates": c.max_topic_candidates, "summaries_per_topic": c.summaries_per_topic,
                "topic_mode": c.topic_mode, "decision_max_new_tokens": c.decision_max_new_tokens,
                "summary_max_new_tokens": self.summary_max_new_tokens, "branch_fallback": c.branch_fallback,
                "embed_replies": self.embed_replies, "keep_raw_last": self.keep_raw_last}

    def reset(self) -> None:
        self.forest = Forest()
        self.pending: tuple[str, Placement] | None = None  # (query text, where it goes)
        self._log: list[dict] = []  # records since the last plan
        self._latents: dict[str, Latent] = {}  # node id -> compressed reply (recomputed after a load)

    @property
    def observed(self) -> int:
        return len(self.forest)

    # ------------------------------------------------------------------ per turn
    def _placement(self, query: str) -> Placement:
        if self.pending is not None and self.pending[0] == query:
            return self.pending[1]
        placement = self.navigator.decide(self.forest, query, self.embeddings.encode(query), self._log)
        self.pending = (query, placement)
        return placement

    def observe(self, turn: Turn) -> None:
        super().observe(turn)
        placement = self._placement(turn.user)
        self.pending = None
        tree = apply_placement(self.forest, placement)
        text = f"{turn.user}\n{turn.assistant}" if self.embed_replies and turn.assistant.strip() else turn.user
        node = self.forest.add_node(tree, turn.user, turn.assistant, turn=self.observed, embedding=self.embeddings.encode(text))
        self._summarize(node)
        self._log.append({"event": "store", "node_id": node.id, "tree_id": tree.id, "branch_id": node.branch_id,
                          "parent_id": node.parent_id, "turn": node.turn})

    def _summarize(self, node: Node) -> None:
        record = {"event": "summary", "node_id": node.id}
        if self.generator is not None:
            messages = fit_inner(self.generator, summary_messages(node.user, node.assistant), self.summary_max_new_tokens,
                                 call="context_agent.summary", record=self._log)
            reply = self.generator.generate(messages, max_new_tokens=self.summary_max_new_tokens, temperature=0.0)
            try:
                node.summary, node.summary_source = parse_summary(reply), "llm"
            except DecisionParseError as exc:
                record["fallback_reason"] = str(exc)
        else:
            record["fallback_reason"] = "no generator"
        if not node.summary:
            node.summary, node.summary_source = truncation_summary(node.user, node.assistant), "truncation"
        record.update(source=node.summary_source, summary=node.summary)
        self._log.append(record)

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        self._sync(conversation)
        placement = self._placement(query)
        tree = self.forest.tree(placement.tree_id) if placement.tree_id is not None else None
        parent_id = placement.parent_id(self.forest)
        records = self._log + [{"event": "placement", **placement.to_dict(), "parent_id": parent_id}]
        self._log = []
        latents = self._path_latents(tree, parent_id)
        return forest_plan(self.name, conversation, query, self.forest, tree, parent_id, latents=latents,
                           records=records, system_source=self.system_prompt, tokenizer=self.tokenizer)

    def _sync(self, conversation: Conversation) -> None:
        if len(conversation) < self.observed:
            raise ForestStateError(
                f"context-agent has stored {self.observed} turns but the conversation has {len(conversation)}; "
                "call reset() before starting another conversation")
        for node in self.forest.nodes():
            if conversation[node.turn].user != node.user:
                raise ForestStateError(
                    f"turn {node.turn} of the conversation differs from node {node.id} the policy stored; call reset()")
        for turn in conversation.turns[self.observed:]:
            self.observe(turn)

    # ------------------------------------------------------------------ Rhea combination
    def _path_latents(self, tree, parent_id) -> dict[int, Latent]:
        if self.compress_fn is None or tree is None:
            return {}
        path = tree.path_to(parent_id)
        older = path[: max(0, len(path) - self.keep_raw_last)]
        older = [n for n in older if n.assistant.strip()]  # an empty reply has nothing to compress
        todo = [n for n in older if n.id not in self._latents]
        if todo:
            with torch.no_grad():
                vectors = self.compress_fn([n.assistant for n in todo])
            if not isinstance(vectors, torch.Tensor) or vectors.dim() != 3 or vectors.shape[0] != len(todo):
                shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
                raise RheaConfigError(f"compress_fn returned {shape} for {len(todo)} texts; it must return Tensor[B, n, hidden]")
            for node, v in zip(todo, vectors):
                self._latents[node.id] = Latent(v.detach(), source_turn=node.turn)
        return {n.turn: self._latents[n.id] for n in older}

    # ------------------------------------------------------------------ saving
    def _state(self) -> dict:
        pending = None if self.pending is None else {"query": self.pending[0], "placement": self.pending[1].to_dict()}
        return {"forest": self.forest.to_dict(), "pending": pending, "log": [dict(r) for r in self._log]}

    def _load_state(self, state: dict) -> None:
        try:
            self.forest = Forest.from_dict(state["forest"])
            pending = state.get("pending")
            self.pending = None if pending is None else (pending["query"], Placement(**pending["placement"]))
            self._log = [dict(r) for r in state.get("log", [])]
        except KeyError as exc:
            raise ForestStateError(f"context-agent state lacks {exc}; pass what state_dict() returned") from exc
        self._latents = {}
