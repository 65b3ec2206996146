"""The working memory ACE evolves: retrieved passages and (sub-question, answer) thoughts.

Entries are append-only, so the memory after round n is a prefix of the final one
(`prefix(size)`); that lets one N-round run yield the N=1..N answers exactly.

>>> m = WorkingMemory("Where is the milk?")
>>> m.add_passage(4, "Mary went to the hallway.")
>>> m.add_passage(1, "Mary got the milk there.")
>>> m.add_thought("Who has the milk?", "Mary.")
>>> print(m.render_facts())
[1] Mary got the milk there.
[4] Mary went to the hallway.
>>> print(m.render_thoughts())
Sub-question: Who has the milk? Answer: Mary.
"""
from __future__ import annotations

from dataclasses import dataclass

from rhea.errors import require_text


@dataclass(frozen=True)
class MemoryEntry:
    """A retrieved passage (`kind="passage"`, with its corpus `index`) or a thought."""

    kind: str
    text: str
    index: int | None = None
    sub_question: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "index": self.index, "sub_question": self.sub_question}


class WorkingMemory:
    """M_i of the paper: starts as {question}; grows only by what the vote chose."""

    def __init__(self, question: str, entries: list[MemoryEntry] | None = None):
        self.question = require_text(question, "question")
        self.entries: list[MemoryEntry] = list(entries or [])

    def __len__(self) -> int:
        return len(self.entries)

    def add_passage(self, index: int, text: str) -> None:
        self.entries.append(MemoryEntry("passage", text, index))

    def add_thought(self, sub_question: str, answer: str) -> None:
        self.entries.append(MemoryEntry("thought", answer, None, sub_question))

    @property
    def passage_indices(self) -> list[int]:
        return [e.index for e in self.entries if e.kind == "passage"]

    @property
    def passages(self) -> list[MemoryEntry]:
        """Passages in corpus order: chronology matters for stories and chat histories."""
        return sorted((e for e in self.entries if e.kind == "passage"), key=lambda e: e.index)

    @property
    def thoughts(self) -> list[MemoryEntry]:
        return [e for e in self.entries if e.kind == "thought"]

    def prefix(self, size: int) -> "WorkingMemory":
        """The memory as it was when it held its first `size` entries."""
        return WorkingMemory(self.question, self.entries[:size])

    def render_facts(self) -> str:
        return "\n".join(f"[{e.index}] {e.text}" for e in self.passages)

    def render_thoughts(self) -> str:
        return "\n".join(f"Sub-question: {e.sub_question} Answer: {e.text}" for e in self.thoughts)

    def render(self) -> str:
        """Facts then thoughts, each block only when non-empty; "(empty)" for M_0."""
        blocks = [b for b in (self.render_facts(), self.render_thoughts()) if b]
        return "\n".join(blocks) if blocks else "(empty)"

    def to_dict(self) -> dict:
        return {"question": self.question, "entries": [e.to_dict() for e in self.entries]}
