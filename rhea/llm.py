"""Text generators: the one interface every LLM-driven controller talks to.

A `TextGenerator` turns chat messages into a reply. Controllers (the instruction
recognizer's classifier, rolling summaries, Sculptor, ACR, ACE, Context-Agent) depend on
this protocol only, so they run the same on a local Hugging Face model, an
OpenAI-compatible endpoint, or a scripted generator in tests.
"""
from __future__ import annotations

from typing import Iterable, Protocol, Sequence, runtime_checkable

Message = dict  # {"role": "system" | "user" | "assistant" | "tool", "content": str, ...}


@runtime_checkable
class TextGenerator(Protocol):
    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        stop: Sequence[str] | None = None,
    ) -> str:
        """Return the assistant's reply to `messages`."""
        ...


class ScriptedGenerator:
    """Replies from a fixed script, in order; records every prompt it was given.

    >>> g = ScriptedGenerator(["YES", "NO"])
    >>> g.generate([{"role": "user", "content": "hi"}])
    'YES'
    """

    def __init__(self, replies: Iterable[str]):
        self.replies = list(replies)
        self.calls: list[list[Message]] = []

    def generate(self, messages, *, max_new_tokens=256, temperature=0.0, stop=None) -> str:
        self.calls.append([dict(m) for m in messages])
        if not self.replies:
            raise RuntimeError(
                f"ScriptedGenerator ran out of replies after {len(self.calls) - 1} calls; "
                "give it one reply per expected call"
            )
        return self.replies.pop(0)
