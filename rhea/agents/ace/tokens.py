"""Token accounting per round and role (the paper's Table 2): voting, query formulation,
thinking, answering; prompt and completion tokens kept apart.

Counts come from the generator's own counters when it keeps them (`HFGenerator`,
`OpenAICompatibleGenerator`: exact, chat template included); otherwise message text is
counted with the tokenizer given, or approximated (`counter` says which).

>>> u = RoundTokens()
>>> u.add("voting", 120, 2); u.add("thinking", 80, 10)
>>> u.total, round(think_token_share([u]), 3)
(212, 0.425)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rhea.errors import RheaConfigError

ROLES = ("voting", "query", "thinking", "answering")


@dataclass
class RoundTokens:
    """Prompt/completion tokens of one round, by role."""

    prompt: dict = field(default_factory=lambda: {r: 0 for r in ROLES})
    completion: dict = field(default_factory=lambda: {r: 0 for r in ROLES})

    def add(self, role: str, prompt: int, completion: int) -> None:
        if role not in ROLES:
            raise RheaConfigError(f"role={role!r} must be one of {ROLES}")
        self.prompt[role] += int(prompt)
        self.completion[role] += int(completion)

    def of(self, role: str) -> int:
        return self.prompt[role] + self.completion[role]

    @property
    def total(self) -> int:
        return sum(self.of(r) for r in ROLES)

    def to_dict(self) -> dict:
        return {"prompt": dict(self.prompt), "completion": dict(self.completion), "total": self.total}


def sum_tokens(rounds: list[RoundTokens]) -> RoundTokens:
    out = RoundTokens()
    for r in rounds:
        for role in ROLES:
            out.add(role, r.prompt[role], r.completion[role])
    return out


def think_token_share(rounds: list[RoundTokens]) -> float:
    """Share of all tokens spent on THINK steps (0.0 when nothing was spent).

    Not the paper's "Think (%)", which is a share of actions (`Trace.think_share`)."""
    total = sum_tokens(rounds)
    return total.of("thinking") / total.total if total.total else 0.0


class TokenMeter:
    """Measures one generator call: `start()` before, `stop(messages, reply)` after."""

    def __init__(self, llm, tokenizer=None):
        self.exact = hasattr(llm, "prompt_tokens") and hasattr(llm, "completion_tokens")
        self.llm, self.tokenizer = llm, tokenizer
        self.counter = "generator" if self.exact else ("tokenizer" if tokenizer is not None else "regex-approx")

    def start(self) -> tuple[int, int]:
        return (self.llm.prompt_tokens, self.llm.completion_tokens) if self.exact else (0, 0)

    def stop(self, before: tuple[int, int], messages: list[dict], reply: str) -> tuple[int, int]:
        if self.exact:
            return self.llm.prompt_tokens - before[0], self.llm.completion_tokens - before[1]
        from rhea.policies.assemble import count_tokens

        prompt = sum(count_tokens(m["content"], self.tokenizer) for m in messages)
        return prompt, count_tokens(reply, self.tokenizer)


class MeteredLLM:
    """A `TextGenerator` whose every call is charged to a role in a `RoundTokens`.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> llm, tokens = MeteredLLM(ScriptedGenerator(["Paris"])), RoundTokens()
    >>> llm("answering", [{"role": "user", "content": "Capital of France?"}], tokens, max_new_tokens=4)
    'Paris'
    >>> tokens.prompt["answering"], tokens.completion["answering"], llm.meter.counter
    (4, 1, 'regex-approx')
    """

    def __init__(self, llm, tokenizer=None):
        from rhea.backends.llm import TextGenerator

        if not isinstance(llm, TextGenerator):
            raise RheaConfigError(f"llm={llm!r} must implement TextGenerator.generate(messages, ...) (see rhea.backends.llm)")
        self.llm = llm
        self.meter = TokenMeter(llm, tokenizer)
        self.tokenizer = tokenizer
        #: ``inner_budget`` records of the prompts `fit` cut to the generator's window
        self.budget_records: list[dict] = []

    def fit(self, role: str, messages: list[dict], max_new_tokens: int) -> list[dict]:
        """`messages` fitted to what the generator's window leaves for `max_new_tokens`
        (`rhea.context.budget.fit_inner`); a cut is recorded in `budget_records`."""
        from rhea.context.budget import fit_inner

        return fit_inner(self.llm, messages, max_new_tokens, call=f"ace.{role}", record=self.budget_records,
                         tokenizer=self.tokenizer)

    def __call__(self, role: str, messages: list[dict], tokens: RoundTokens, *, max_new_tokens: int,
                 temperature: float = 0.0) -> str:
        return self._call(role, self.fit(role, messages, max_new_tokens), tokens, max_new_tokens, temperature)

    def _call(self, role: str, messages: list[dict], tokens: RoundTokens, max_new_tokens: int, temperature: float) -> str:
        before = self.meter.start()
        reply = self.llm.generate(messages, max_new_tokens=max_new_tokens, temperature=temperature)
        reply = reply if isinstance(reply, str) else ""
        tokens.add(role, *self.meter.stop(before, messages, reply))
        return reply

    def sample(self, role: str, messages: list[dict], tokens: RoundTokens, n: int, *, max_new_tokens: int,
               temperature: float) -> list[str]:
        """`n` independent sampled replies to one prompt (k agents voting), charged as `n` calls.

        A generator with ``generate_many`` (a local `HFGenerator`) decodes them as one batch
        from one prefill; any other generator is called `n` times. At temperature 0 the
        replies would be identical, so the generator is called `n` times as before.

        >>> from rhea.backends.llm import ScriptedGenerator
        >>> llm, tokens = MeteredLLM(ScriptedGenerator(["THINK", "RETRIEVE"])), RoundTokens()
        >>> llm.sample("voting", [{"role": "user", "content": "Decide."}], tokens, 2, max_new_tokens=4, temperature=0.7)
        ['THINK', 'RETRIEVE']
        """
        messages = self.fit(role, messages, max_new_tokens)
        many = getattr(self.llm, "generate_many", None)
        if many is None or not temperature or temperature <= 0 or n == 1 or not self.meter.exact:
            return [self._call(role, messages, tokens, max_new_tokens, temperature) for _ in range(n)]
        before = self.meter.start()
        replies = [r if isinstance(r, str) else "" for r in many(messages, n, max_new_tokens=max_new_tokens,
                                                                  temperature=temperature)]
        tokens.add(role, *self.meter.stop(before, messages, ""))
        return replies
