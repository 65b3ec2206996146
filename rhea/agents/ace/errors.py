"""Named errors of the ACE orchestrator: each names the bad value and the fix."""
from __future__ import annotations

from rhea.errors import RheaError


class AceConfigError(RheaError, ValueError):
    """An ACE setting is out of range (agents, rounds, temperatures, passages per retrieval)."""


class CorpusError(RheaError, ValueError):
    """A passage corpus is not a list of non-blank strings, or a retriever was asked for a bad index."""
