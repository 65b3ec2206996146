"""The conversation model's errors (defined with the others in `rhea.errors`)."""
from rhea.errors import (  # noqa: F401
    ContextOverflowError,
    ContextWindowError,
    EmptyMessageError,
    InvalidTurnError,
    MissingMemTokenError,
    PlaceholderCountError,
    SpoofedPlaceholderError,
    require_text,
)
