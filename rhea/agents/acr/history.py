"""How ACR's controllers see a conversation: numbered turns as plain text.

>>> from rhea.context import Turn
>>> print(format_history([HistoryTurn(0, "My room is 3.", "Noted.")]))
[turn 1] User: My room is 3.
[turn 1] Assistant: Noted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rhea.context.budget import INNER_EVENT, count_text_tokens, fit_inner, prompt_length, prompt_room_of

#: Shown in place of a reply the base policy holds only as latent vectors.
LATENT_REPLY = "(reply held as compressed memory)"
#: ``{task_description}`` when the caller gives none (the paper always has a task: the question of
#: its search agent; a chat has none, so this generic goal stands in).
DEFAULT_TASK_DESCRIPTION = ("Continue the multi-turn dialogue: answer the user's next message correctly and "
                            "consistently with everything established earlier.")


@dataclass(frozen=True)
class HistoryTurn:
    """One past turn as the controllers see it (`index` is the turn's index in the conversation)."""

    index: int
    user: str
    assistant: str

    def to_dict(self) -> dict:
        return {"turn": self.index, "user": self.user, "assistant": self.assistant}


def format_history(turns: list[HistoryTurn]) -> str:
    """The turns as ``[turn n] User: …`` / ``[turn n] Assistant: …`` lines (n counts from 1)."""
    if not turns:
        return "(no earlier turns)"
    lines = []
    for t in turns:
        lines += [f"[turn {t.index + 1}] User: {t.user}", f"[turn {t.index + 1}] Assistant: {t.assistant}"]
    return "\n".join(lines)


def task_description(task: str) -> str:
    """The ``{task_description}`` placeholder: `task`, or `DEFAULT_TASK_DESCRIPTION` when none is given."""
    return task.strip() if task and task.strip() else DEFAULT_TASK_DESCRIPTION


#: tokens the ``[turn n] User:`` / ``[turn n] Assistant:`` labels of one turn take, at most
TURN_LABEL_TOKENS = 16


def fit_history_prompt(generator: Any, build: Callable[[list[HistoryTurn]], list[dict]], turns: list[HistoryTurn],
                       max_new_tokens: int, *, call: str, record: list | None = None) -> list[dict]:
    """``build(turns)`` (a controller's prompt) fitted to `generator`'s window: the oldest turns give
    way first, whole (their texts' cached token counts against the room the prompt's frame leaves),
    then `rhea.context.budget.fit_inner` cuts what still overruns (the middle of the one message).
    The ``inner_budget`` record, appended to `record`, counts the turns left out in ``turns_dropped``.
    Unchanged for a generator with no known window."""
    room = prompt_room_of(generator, max_new_tokens)
    tokenizer = getattr(generator, "tokenizer", None)
    if room is None or tokenizer is None or not turns:
        return fit_inner(generator, build(turns), max_new_tokens, call=call, record=record)
    own = getattr(generator, "count_prompt_tokens", None)
    count = own if callable(own) else (lambda ms: prompt_length(ms, tokenizer))
    left = room - count(build([]))
    keep, spent, dropped_tokens = len(turns), 0, 0
    for k in range(len(turns) - 1, -1, -1):
        cost = count_text_tokens(turns[k].user, tokenizer) + count_text_tokens(turns[k].assistant, tokenizer) + TURN_LABEL_TOKENS
        if spent + cost > left and k < len(turns) - 1:  # the newest turn always goes in (cut if need be)
            dropped_tokens = sum(count_text_tokens(t.user, tokenizer) + count_text_tokens(t.assistant, tokenizer)
                                 for t in turns[:k + 1])
            break
        spent += cost
        keep = k
    shown = turns[keep:]
    log: list[dict] = []
    messages = fit_inner(generator, build(shown), max_new_tokens, call=call, record=log)
    if len(shown) < len(turns):
        if not log:
            n = count(messages)
            log.append({"event": INNER_EVENT, "call": call, "tokens_before": n + dropped_tokens, "tokens_after": n,
                        "room": room, "cut": [], "dropped": 0, "dropped_tokens": 0, "dropped_messages": []})
        log[-1]["turns_dropped"] = len(turns) - len(shown)
        log[-1]["tokens_before"] += dropped_tokens
    if record is not None:
        record.extend(log)
    return messages
