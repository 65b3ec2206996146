"""Vanilla: the full history, cut from the oldest turn only when it overflows the budget."""
from __future__ import annotations

import warnings
from typing import Any

from rhea.context.conversation import Conversation
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.context.rendering import render
from rhea.errors import ContextOverflowError, RheaConfigError
from rhea.policies.assemble import SystemSource, assemble_plan
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy
from rhea.policies.validation import positive_int


@register_policy("vanilla")
class Vanilla(ContextPolicy):
    """Every past turn verbatim.

    With `max_context_tokens` (needs `tokenizer`), the oldest turns are dropped until the
    rendered prompt fits; each dropped turn is recorded and a warning is issued.

    >>> from rhea.context import Conversation, Turn
    >>> plan = Vanilla().build(Conversation([Turn("hi", "hello")]), "bye")
    >>> [m["role"] for m in plan.messages]
    ['user', 'assistant', 'user']
    """

    def __init__(self, *, max_context_tokens: int | None = None, system_prompt: SystemSource = None, tokenizer: Any = None):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        if max_context_tokens is not None:
            positive_int(max_context_tokens, "max_context_tokens")
            if tokenizer is None:
                raise RheaConfigError(f"max_context_tokens={max_context_tokens} needs tokenizer= to measure the rendered prompt")
        self.max_context_tokens = max_context_tokens

    def config(self) -> dict:
        return {"max_context_tokens": self.max_context_tokens}

    def _plan(self, conversation: Conversation, query: str, n_dropped: int) -> ContextPlan:
        decisions = [
            TurnDecision(i, "drop", None, f"oldest turn cut to fit max_context_tokens={self.max_context_tokens}")
            if i < n_dropped else TurnDecision(i, "raw")
            for i in range(len(conversation))
        ]
        records = [{"event": "truncate", "dropped_oldest": n_dropped, "max_context_tokens": self.max_context_tokens}] if n_dropped else []
        return assemble_plan(self.name, conversation, query, decisions, system_source=self.system_prompt,
                             records=records, tokenizer=self.tokenizer)

    def _length(self, plan: ContextPlan) -> int:
        return render(plan, self.tokenizer).input_ids.shape[1]

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        plan = self._plan(conversation, query, 0)
        if self.max_context_tokens is None or self._length(plan) <= self.max_context_tokens:
            return plan
        # Rendered length falls as more oldest turns go: binary-search the fewest to drop.
        lo, hi = 1, len(conversation)
        floor = self._length(self._plan(conversation, query, hi))
        if floor > self.max_context_tokens:
            raise ContextOverflowError(
                f"system block and query alone render to {floor} tokens, "
                f"over max_context_tokens={self.max_context_tokens}; raise the budget or shorten the instructions"
            )
        while lo < hi:
            mid = (lo + hi) // 2
            if self._length(self._plan(conversation, query, mid)) <= self.max_context_tokens:
                hi = mid
            else:
                lo = mid + 1
        warnings.warn(
            f"vanilla: dropped the {lo} oldest of {len(conversation)} turns to fit max_context_tokens={self.max_context_tokens}",
            stacklevel=2,
        )
        return self._plan(conversation, query, lo)
