"""Named errors of Context-Agent: each says what was wrong and how to fix it."""
from __future__ import annotations

from rhea.errors import RheaError


class ForestStateError(RheaError, ValueError):
    """A forest dict or an operation on the forest refers to trees, branches or nodes that do not exist."""


class DecisionParseError(RheaError, ValueError):
    """An LLM decision is not one JSON object of the expected shape (the caller falls back and records why)."""
