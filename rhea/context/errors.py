"""Named errors for the conversation model, plans and rendering.

Each is a `ValueError` subclass so callers that only know "bad input" can still catch it;
messages name the bad value and how to fix it.
"""
from __future__ import annotations


class EmptyMessageError(ValueError):
    """A user message or query is empty or whitespace only."""


class InvalidTurnError(ValueError):
    """A turn, latent or plan field has the wrong type or an out-of-range value."""


class MissingMemTokenError(ValueError):
    """The tokenizer has no `<mem>` token, so latents cannot be placed."""


class SpoofedPlaceholderError(ValueError):
    """Message text contains the literal `<mem>` string, which would pose as a latent slot."""


class PlaceholderCountError(ValueError):
    """The rendered ids hold a different number of `<mem>` ids than there are latent rows."""


class ContextOverflowError(ValueError):
    """Even the smallest plan a policy can build exceeds its token budget."""


def require_text(value: object, what: str) -> str:
    """Return `value` if it is a non-blank string, else raise a named error.

    >>> require_text("hi", "query")
    'hi'
    """
    if not isinstance(value, str):
        raise InvalidTurnError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    if not value.strip():
        raise EmptyMessageError(f"{what}={value!r} is empty or whitespace; pass the message text")
    return value
