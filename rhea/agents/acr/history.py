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


def controller_user_message(turns: list[HistoryTurn], query: str, task: str, ask: str) -> str:
    """The user message both controllers get: task, history, the pending question, then `ask`."""
    task_line = f"Task: {task}\n\n" if task and task.strip() else ""
    return f"{task_line}Conversation history:\n{format_history(turns)}\n\nThe user now asks: {query}\n\n{ask}"
