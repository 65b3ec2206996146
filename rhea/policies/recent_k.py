"""Recent-k: only the last k turns."""
from __future__ import annotations

from typing import Any

from rhea.context.conversation import Conversation
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.policies.assemble import SystemSource, assemble_plan
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy
from rhea.policies.validation import positive_int


@register_policy("recent-k")
class RecentK(ContextPolicy):
    """The k most recent turns verbatim; older ones dropped (and recorded as such).

    >>> from rhea.context import Conversation, Turn
    >>> conv = Conversation([Turn(f"q{i}", f"a{i}") for i in range(4)])
    >>> [d.tier for d in RecentK(k=2).build(conv, "next").decisions.turns]
    ['drop', 'drop', 'raw', 'raw']
    """

    def __init__(self, k: int = 5, *, system_prompt: SystemSource = None, tokenizer: Any = None):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        self.k = positive_int(k, "k")

    def config(self) -> dict:
        return {"k": self.k}

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        first_kept = max(0, len(conversation) - self.k)
        decisions = [
            TurnDecision(i, "raw") if i >= first_kept else TurnDecision(i, "drop", None, f"older than the last k={self.k}")
            for i in range(len(conversation))
        ]
        return assemble_plan(self.name, conversation, query, decisions, system_source=self.system_prompt, tokenizer=self.tokenizer)
