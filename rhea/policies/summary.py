"""RollingSummary: an LLM-written running summary replaces turns once they are folded in."""
from __future__ import annotations

import warnings
from typing import Any, Sequence

from rhea.backends.llm import TextGenerator, generate_rows
from rhea.context.conversation import Conversation, Turn
from rhea.context.plan import ContextPlan, TurnDecision
from rhea.errors import RheaConfigError
from rhea.policies.assemble import SystemSource, assemble_plan
from rhea.policies.base import ContextPolicy
from rhea.policies.registry import register_policy
from rhea.policies.validation import positive_int

SUMMARY_HEADER = "Summary of the conversation so far:"

SUMMARIZER_SYSTEM = (
    "You maintain a running summary of a conversation between a user and an assistant. "
    "Keep every fact, name, number, decision and open question the assistant may need later; "
    "drop pleasantries. Write plain prose, no preamble."
)


def summarizer_messages(summary: str, turns: list[Turn]) -> list[dict]:
    """The prompt that folds `turns` into `summary`."""
    exchanges = "\n\n".join(f"User: {t.user}\nAssistant: {t.assistant}" for t in turns)
    current = summary if summary else "(empty: this is the start of the conversation)"
    return [
        {"role": "system", "content": SUMMARIZER_SYSTEM},
        {"role": "user", "content": f"Current summary:\n{current}\n\nNew exchanges:\n{exchanges}\n\nWrite the updated summary."},
    ]


def fitted_summarizer_messages(generator: TextGenerator, summary: str, turns: list[Turn],
                               max_new_tokens: int) -> list[dict]:
    """`summarizer_messages`, fitted to the generator's window (`HFGenerator.prompt_room`): when the prompt
    would overrun it, the longest texts (the summary, users' messages, replies) are cut first, each keeping
    its start and end around a visible ``[… N tokens cut …]`` marker (`rhea.context.budget.cut_text`), so
    a fold never fails on long turns. A generator that declares no window gets the prompt as is.
    A window too small for even the prompt's frame is a `ContextWindowError`, before any model work."""
    import dataclasses

    from rhea.context.budget import count_text_tokens, cut_text, even_cap
    from rhea.errors import ContextWindowError

    messages = summarizer_messages(summary, turns)
    room_of = getattr(generator, "prompt_room", None)
    room = room_of(max_new_tokens) if callable(room_of) else None
    tokenizer = getattr(generator, "tokenizer", None)
    if room is None or tokenizer is None:
        return messages
    count = generator.count_prompt_tokens
    over = count(messages) - room
    if over <= 0:
        return messages
    texts = [summary] + [x for t in turns for x in (t.user, t.assistant)]
    lengths = [count_text_tokens(x, tokenizer) for x in texts]
    frame = count(summarizer_messages("", [dataclasses.replace(t, user=".", assistant="") for t in turns]))
    for _ in range(4):  # cut to an even share (the longest texts give way first); re-measure, tighten by the rest
        avail = room - frame - 16 * len(texts)  # each cut text carries its marker
        if avail < 8 * len(texts):
            raise ContextWindowError(
                f"the summarizer's prompt for {len(turns)} turns needs {frame} tokens of frame, more than the "
                f"{room} the model's window leaves with max_summary_tokens={max_new_tokens}; lower every= (fold "
                "fewer turns at a time) or max_summary_tokens")
        cap = even_cap(lengths, avail)
        cut = [cut_text(x, cap, tokenizer)[0] if n > cap else x for x, n in zip(texts, lengths)]
        fitted = [dataclasses.replace(t, user=cut[1 + 2 * i], assistant=cut[2 + 2 * i]) for i, t in enumerate(turns)]
        messages = summarizer_messages(cut[0], fitted)
        over = count(messages) - room
        if over <= 0:
            return messages
        frame += over
    raise ContextWindowError(f"the summarizer's prompt could not be fitted to {room} tokens; lower every= or "
                             "max_summary_tokens")


@register_policy("summary")
class RollingSummary(ContextPolicy):
    """The summary (in the system block, after any instructions) plus the turns not yet
    folded into it, verbatim. The summary is rewritten every `every` observed turns.

    If the generator returns an empty summary the turns stay pending (verbatim), so nothing
    is lost; a warning says so. `build` catches up on turns it was not shown via `observe`.

    >>> from rhea.context import Conversation, Turn
    >>> from rhea.backends.llm import ScriptedGenerator
    >>> policy = RollingSummary(ScriptedGenerator(["User's cat is Tom."]), every=1)
    >>> conv = Conversation([Turn("My cat is Tom.", "Nice name!")])
    >>> plan = policy.build(conv, "What is my cat called?")
    >>> plan.system_text
    "Summary of the conversation so far:\\nUser's cat is Tom."
    """

    controller_arg = "generator"

    def __init__(
        self,
        generator: TextGenerator,
        *,
        every: int = 1,
        max_summary_tokens: int = 256,
        system_prompt: SystemSource = None,
        tokenizer: Any = None,
    ):
        super().__init__(system_prompt=system_prompt, tokenizer=tokenizer)
        if not isinstance(generator, TextGenerator):
            raise RheaConfigError(f"generator={generator!r} must implement TextGenerator.generate(messages, ...)")
        self.generator = generator
        self.every = positive_int(every, "every")
        self.max_summary_tokens = positive_int(max_summary_tokens, "max_summary_tokens", minimum=8)
        self.reset()

    def config(self) -> dict:
        return {"every": self.every, "max_summary_tokens": self.max_summary_tokens}

    def reset(self) -> None:
        self.summary = ""
        self.summarized = 0  # turns [0, summarized) are folded into the summary
        self.pending: list[Turn] = []
        self.updates = 0

    @property
    def observed(self) -> int:
        return self.summarized + len(self.pending)

    def observe(self, turn: Turn) -> None:
        super().observe(turn)
        self.pending.append(turn)
        if len(self.pending) >= self.every:
            self._fold()

    @classmethod
    def observe_batch(cls, policies: Sequence["RollingSummary"], turns: Sequence[Turn]) -> None:
        """Observe one turn per policy; the summaries due for a rewrite are written in one batch per
        summary length where their generators can share one (`generate_rows`), each as its own
        `observe` would write it (greedy).

        >>> from rhea.backends.llm import ScriptedGenerator
        >>> a, b = RollingSummary(ScriptedGenerator(["A"])), RollingSummary(ScriptedGenerator(["B"]))
        >>> RollingSummary.observe_batch([a, b], [Turn("x", "y"), Turn("u", "v")])
        >>> a.summary, b.summary
        ('A', 'B')
        """
        if len(policies) != len(turns):
            raise RheaConfigError(f"observe_batch: {len(policies)} policies but {len(turns)} turns; pass one turn per policy")
        due: dict[int, list[RollingSummary]] = {}
        for policy, turn in zip(policies, turns):
            ContextPolicy.observe(policy, turn)
            policy.pending.append(turn)
            if len(policy.pending) >= policy.every:
                due.setdefault(policy.max_summary_tokens, []).append(policy)
        for length, group in due.items():
            replies = generate_rows([p.generator for p in group],
                                    [fitted_summarizer_messages(p.generator, p.summary, p.pending, length) for p in group],
                                    max_new_tokens=length)
            for policy, reply in zip(group, replies):
                policy._take(reply)

    def _fold(self) -> None:
        messages = fitted_summarizer_messages(self.generator, self.summary, self.pending, self.max_summary_tokens)
        self._take(self.generator.generate(messages, max_new_tokens=self.max_summary_tokens))

    def _take(self, reply: str) -> None:
        """The rewritten summary folds in every pending turn (an empty one folds none)."""
        if not reply or not reply.strip():
            warnings.warn(
                f"summary: generator returned an empty summary; keeping {len(self.pending)} turns verbatim", stacklevel=4
            )
            return
        self.summary = reply.strip()
        self.summarized += len(self.pending)
        self.pending = []
        self.updates += 1

    def build(self, conversation: Conversation, query: str) -> ContextPlan:
        if len(conversation) < self.observed:
            raise RheaConfigError(
                f"summary policy has observed {self.observed} turns but the conversation has {len(conversation)}; "
                "call reset() before starting another conversation"
            )
        for turn in conversation.turns[self.observed:]:
            self.observe(turn)
        decisions = [
            TurnDecision(i, "drop", None, f"folded into the summary (update {self.updates})") if i < self.summarized
            else TurnDecision(i, "raw", None, "not yet summarized")
            for i in range(len(conversation))
        ]
        extra = [f"{SUMMARY_HEADER}\n{self.summary}"] if self.summary else []
        records = [{"event": "summary", "turns_summarized": self.summarized, "updates": self.updates, "summary": self.summary}]
        return assemble_plan(self.name, conversation, query, decisions, system_source=self.system_prompt,
                             extra_system=extra, records=records, tokenizer=self.tokenizer)

    def _state(self) -> dict:
        return {"summary": self.summary, "summarized": self.summarized, "updates": self.updates,
                "pending": [t.to_dict() for t in self.pending]}

    def _load_state(self, state: dict) -> None:
        try:
            self.summary, self.summarized, self.updates = str(state["summary"]), int(state["summarized"]), int(state["updates"])
            self.pending = [Turn.from_dict(t) for t in state["pending"]]
        except KeyError as exc:
            raise RheaConfigError(f"summary state lacks {exc}; pass what state_dict() returned") from exc
