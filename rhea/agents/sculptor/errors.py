"""Named errors of the Sculptor context store and toolbox.

Every error is a `RheaError` and a `ValueError` whose message names the bad value and a fix. The
toolbox turns `AcmError`s raised by a tool into a `{"error": ...}` tool message for the
model, so a bad tool argument never ends the loop; programming errors (bad constructor
arguments, wrong message shapes) still raise to the caller.
"""
from __future__ import annotations

from rhea.errors import RheaError


class AcmError(RheaError, ValueError):
    """Base of every error a context-management operation can raise."""


class InvalidMessagesError(AcmError):
    """The conversation is not a list of `{"role": str, "content": str}` dicts."""


class UnknownFragmentError(AcmError):
    """No fragment has the given id."""


class FragmentStateError(AcmError):
    """The operation does not apply to the fragment's state (e.g. restoring a visible fragment)."""


class MarkerNotFoundError(AcmError):
    """A start/end marker of `fragment_context` matches no message of the requested role."""


class FragmentOverlapError(AcmError):
    """A new fragment would overlap an existing one."""


class UnknownSearchError(AcmError):
    """No search has the given id."""


class NothingToUndoError(AcmError):
    """`undo()` was called with an empty op log."""


class ToolArgumentError(AcmError):
    """Tool arguments violate the tool's JSON schema (missing, unknown, wrong type, out of range)."""


class UnknownToolError(AcmError):
    """The model called a tool the toolbox does not have."""


class ConversationMismatchError(RheaError, ValueError):
    """`SculptorLoop.run` got messages that do not continue the store's conversation.

    Not an `AcmError`: it is a caller's mistake, never reported to the model.
    """
