"""Votes of the deciding agents: parse one reply, then tally them by majority.

Tie rule: a tie (including "every agent abstained") goes to `tie_break`, RETRIEVE by
default — a split vote means the agents are unsure the memory already holds what the
question needs, and fetching evidence is the recoverable mistake (a THINK over missing
facts only adds a guess to the memory).

>>> tally([parse_vote("RETRIEVE"), parse_vote("think."), parse_vote("Retrieve")]).action
'RETRIEVE'
>>> parse_vote("I am not sure").choice is None
True
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from rhea.agents.ace.errors import AceConfigError

RETRIEVE, THINK = "RETRIEVE", "THINK"
ACTIONS = (RETRIEVE, THINK)
_LABEL = re.compile(r"\b(retriev\w*|think\w*)\b", re.IGNORECASE)
# An explicit "decision: X" line wins when a reply names both actions ("not RETRIEVE; decision: THINK").
_EXPLICIT = re.compile(r"\b(?:decision|action|answer|next step|vote)\s*[:=\-]\s*\**\s*(retriev\w*|think\w*)", re.IGNORECASE)


def _label(word: str) -> str:
    return RETRIEVE if word.lower().startswith("retriev") else THINK


@dataclass(frozen=True)
class Vote:
    """One agent's reply: `choice` is RETRIEVE, THINK, or None (abstained, with `reason`)."""

    raw: str
    choice: str | None
    reason: str = ""

    def to_dict(self) -> dict:
        return {"raw": self.raw, "choice": self.choice, "reason": self.reason}


def parse_vote(text: str) -> Vote:
    """Read RETRIEVE/THINK from a free-form reply; anything unclear is an abstention.

    >>> parse_vote("**Think**").choice, parse_vote("retrieval is needed").choice
    ('THINK', 'RETRIEVE')
    >>> parse_vote("RETRIEVE or THINK").reason
    'names both RETRIEVE and THINK without a decision line'
    >>> parse_vote("We could retrieve... Decision: THINK").choice
    'THINK'
    """
    if not isinstance(text, str) or not text.strip():
        return Vote(text if isinstance(text, str) else repr(text), None, "empty reply")
    found = {_label(m) for m in _LABEL.findall(text)}
    if len(found) == 1:
        return Vote(text, found.pop(), "")
    if not found:
        return Vote(text, None, "names neither RETRIEVE nor THINK")
    explicit = _EXPLICIT.findall(text)
    if explicit:
        return Vote(text, _label(explicit[-1]), "decision line")
    return Vote(text, None, "names both RETRIEVE and THINK without a decision line")


@dataclass(frozen=True)
class Tally:
    """The outcome of one round's vote."""

    action: str
    counts: dict = field(default_factory=dict)
    abstained: int = 0
    tie: bool = False

    def to_dict(self) -> dict:
        return {"action": self.action, "counts": dict(self.counts), "abstained": self.abstained, "tie": self.tie}


def tally(votes: list[Vote], *, tie_break: str = RETRIEVE) -> Tally:
    """Majority over the non-abstaining votes; ties (and no valid vote) go to `tie_break`.

    >>> t = tally([parse_vote("THINK"), parse_vote("RETRIEVE"), parse_vote("??")])
    >>> t.action, t.tie, t.abstained
    ('RETRIEVE', True, 1)
    >>> tally([parse_vote("THINK")] * 2 + [parse_vote("RETRIEVE")]).action
    'THINK'
    """
    if tie_break not in ACTIONS:
        raise AceConfigError(f"tie_break={tie_break!r} must be one of {ACTIONS}")
    counts = {a: sum(v.choice == a for v in votes) for a in ACTIONS}
    abstained = sum(v.choice is None for v in votes)
    if counts[RETRIEVE] == counts[THINK]:
        return Tally(tie_break, counts, abstained, tie=True)
    return Tally(max(ACTIONS, key=counts.get), counts, abstained, tie=False)
