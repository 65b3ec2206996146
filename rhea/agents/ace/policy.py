"""ACE as a chat policy: the conversation's past turns are the corpus.

For each query, ACE evolves a working memory over the turns; the turns it retrieved are
kept verbatim ("raw", in chronological order), the others dropped with the reason, and its
thoughts go into the system block. The full ACE trace is in `plan.decisions.records`.

>>> from rhea.context import Conversation, Turn
>>> from rhea.backends.llm import ScriptedGenerator
>>> conv = Conversation([Turn("My cat is called Tom.", "Nice!"), Turn("Sort a list in Python?", "Use sorted().")])
>>> policy = AcePolicy(ScriptedGenerator([]), n_agents=1, rounds=1, passages_per_retrieval=1)  # round 1: no vote
>>> plan = policy.build(conv, "What is my cat called?")
>>> [d.tier for d in plan.decisions.turns], plan.decisions.records[0]["rounds"][0]["action"]
(['raw', 'drop'], 'RETRIEVE')
"""
from __future__ import annotations

from typing import Any

from rhea.agents.ace.orchestrator import ACE
from rhea.agents.ace.retrievers import make_retriever
from rhea.backends.embedding import Embedder
from rhea.context.conversation import Conversation, turn_text
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.policies.assemble import SystemSource, assemble_plan
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy

THOUGHTS_HEADER = "Working notes on the current question:"


@register_policy("ace")
class AcePolicy(ContextPolicy):
    """`get_policy("ace", llm=..., retriever="bm25" | "dense" | Embedder, n_agents=5, rounds=3)`.

    Other keyword arguments go to `ACE` (passages_per_retrieval, vote_temperature, ...).
    With an empty history there is nothing to retrieve or think over, so no ACE round runs.
    """

    controller_arg = "llm"

    def __init__(self, llm, *, retriever: str | Embedder = "bm25", n_agents: int = 5, rounds: int = 3,
                 system_prompt: SystemSource = None, tokenizer: Any = None, **ace_kwargs):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        self.llm, self.retriever_kind = llm, retriever
        self.ace_kwargs = dict(n_agents=n_agents, rounds=rounds, tokenizer=tokenizer, **ace_kwargs)
        self._texts: list[str] | None = None
        self._retriever = None

    def config(self) -> dict:
        kind = self.retriever_kind if isinstance(self.retriever_kind, str) else type(self.retriever_kind).__name__
        return {"retriever": kind, **{k: v for k, v in self.ace_kwargs.items() if k != "tokenizer"}}

    def reset(self) -> None:
        self._texts, self._retriever = None, None

    def _retriever_for(self, conversation: Conversation):
        texts = [turn_text(t) for t in conversation]
        if self._retriever is None or texts != self._texts:  # re-index only when the history changed
            self._texts, self._retriever = texts, make_retriever(self.retriever_kind, texts)
        return self._retriever

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        if len(conversation) == 0:
            return assemble_plan(self.name, conversation, query, [], system_source=self.system_prompt,
                                 records=[{"event": "ace", "rounds": [], "note": "empty history: no round run"}],
                                 tokenizer=self.tokenizer)
        ace = ACE(self.llm, self._retriever_for(conversation), **self.ace_kwargs)
        memory, trace = ace.evolve(query)
        found = {}
        for record in trace.rounds:
            for index, score in record.retrieved:
                found[index] = (record.round, score, record.query)
        decisions = [
            TurnDecision(i, "raw", found[i][1], f"retrieved in round {found[i][0]} by query {found[i][2]!r}") if i in found
            else TurnDecision(i, "drop", None, "not retrieved by ACE")
            for i in range(len(conversation))
        ]
        thoughts = memory.render_thoughts()
        extra = [f"{THOUGHTS_HEADER}\n{thoughts}"] if thoughts else []
        record = {"event": "ace", "config": ace.config(), **trace.to_dict(), "memory": memory.to_dict()}
        return assemble_plan(self.name, conversation, query, decisions, system_source=self.system_prompt,
                             extra_system=extra, records=[record, *ace.llm.budget_records], tokenizer=self.tokenizer)
