"""How ACR's controllers see a conversation: numbered turns as plain text.

>>> from rhea.context import Turn
>>> print(format_history([HistoryTurn(0, "My room is 3.", "Noted.")]))
[turn 1] User: My room is 3.
[turn 1] Assistant: Noted.
"""
from __future__ import annotations

from dataclasses import dataclass

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
