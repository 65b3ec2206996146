"""BM25: the k past turns most relevant to the query, kept in chronological order."""
from __future__ import annotations

from typing import Any

from rhea.backends.retrieval import BM25Retriever
from rhea.context.conversation import Conversation, turn_text
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.policies.assemble import SystemSource, assemble_plan
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy
from rhea.policies.validation import positive_int


@register_policy("bm25")
class BM25(ContextPolicy):
    """Retrieve the k turns with the highest BM25 score for the query (score > 0).

    Every turn's score is recorded; the index is rebuilt only when the conversation changed.

    >>> from rhea.context import Conversation, Turn
    >>> conv = Conversation([Turn("my cat is called Tom", "nice"), Turn("python lists?", "use sort")])
    >>> [d.tier for d in BM25(k=1).build(conv, "what is my cat called?").decisions.turns]
    ['raw', 'drop']
    """

    def __init__(self, k: int = 5, *, system_prompt: SystemSource = None, tokenizer: Any = None):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        self.k = positive_int(k, "k")
        self._texts: list[str] = []
        self._retriever: BM25Retriever | None = None

    def config(self) -> dict:
        return {"k": self.k}

    def reset(self) -> None:
        self._texts, self._retriever = [], None

    def _retriever_for(self, conversation: Conversation) -> BM25Retriever:
        texts = [turn_text(t) for t in conversation]
        if self._retriever is None or texts != self._texts:
            self._texts, self._retriever = texts, BM25Retriever(texts)
        return self._retriever

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        retriever = self._retriever_for(conversation)
        scores = retriever.scores(query)
        kept = {i for i, _ in retriever.search(query, self.k)} if len(conversation) else set()
        decisions = [
            TurnDecision(i, "raw", s) if i in kept
            else TurnDecision(i, "drop", s, "no word shared with the query" if s == 0 else f"not in the top k={self.k}")
            for i, s in enumerate(scores)
        ]
        return assemble_plan(self.name, conversation, query, decisions, system_source=self.system_prompt, tokenizer=self.tokenizer)
