"""The errors the instruction checkers raise."""
from __future__ import annotations

from rhea.errors import RheaError


class InstructionError(RheaError, ValueError):
    """Base class for bad instruction ids or parameters."""


class UnknownInstructionError(InstructionError):
    """An instruction id that is not registered here."""


class UnsupportedInstructionError(InstructionError):
    """An IFEval / MT-Eval instruction id (or parameter) this module cannot check."""


class InstructionArgumentError(InstructionError):
    """A missing, extra or out-of-range parameter for an instruction."""
