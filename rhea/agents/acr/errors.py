"""Named errors of ACR. Each says what was wrong and how to fix it.

Router and refactorer *output* problems are not raised at run time: the policy falls back
(to NONE, or to the operator's documented fallback) and records why. They are raised only
by the strict parsers when called directly with ``strict=True``.
"""
from __future__ import annotations

from rhea.errors import RheaConfigError, RheaError


class ACRError(RheaError, ValueError):
    """Base of ACR's errors."""


class ACRConfigError(ACRError, RheaConfigError):
    """An ACR setting (operator name, threshold, adapter name, TGSE config) is out of range."""


class RouterOutputError(ACRError):
    """The router's reply is not the JSON object the contract asks for."""


class RefactorerOutputError(ACRError):
    """The refactorer's reply has no usable ``<summary>…</summary>`` block."""


class TGSEStateError(ACRError):
    """A TGSE output directory cannot be resumed (missing or inconsistent state)."""
