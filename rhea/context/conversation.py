"""The conversation data model: `Turn` (one user message and its reply) and `Conversation`."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from rhea.errors import InvalidTurnError, require_text


def _require_json_exact(meta: Any, what: str) -> dict:
    # A JSON round trip must give back exactly what was stored (no tuples turning into
    # lists, no int keys turning into str), or saved sessions would silently differ.
    if not isinstance(meta, dict):
        raise InvalidTurnError(f"{what} must be a dict, got {type(meta).__name__}")
    try:
        again = json.loads(json.dumps(meta))
    except (TypeError, ValueError) as exc:
        raise InvalidTurnError(f"{what}={meta!r} is not JSON-serializable ({exc}); store plain str/int/float/bool/list/dict") from exc
    if again != meta:
        raise InvalidTurnError(
            f"{what}={meta!r} does not survive a JSON round trip unchanged; use str keys and lists instead of tuples"
        )
    return meta


@dataclass
class Turn:
    """One exchange: the user's message and the assistant's reply.

    `meta` holds JSON-serializable extras (timestamps, recognizer decisions, ...). Two keys have
    a meaning: ``"session"`` (the number or name of the session the turn belongs to, in a
    multi-session history) and ``"date"`` (that session's date, as text); a turn that carries
    them is shown with a short header where it is rendered away from its place
    (`session_header`). The reply may be empty (a model can answer nothing); the user message may not.

    >>> Turn("What is 2+2?", "4").user
    'What is 2+2?'
    """

    user: str
    assistant: str
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_text(self.user, "Turn.user")
        if not isinstance(self.assistant, str):
            raise InvalidTurnError(f"Turn.assistant must be a str, got {type(self.assistant).__name__}")
        _require_json_exact(self.meta, "Turn.meta")

    def to_dict(self) -> dict:
        return {"user": self.user, "assistant": self.assistant, "meta": json.loads(json.dumps(self.meta))}

    @classmethod
    def from_dict(cls, data: dict) -> "Turn":
        missing = {"user", "assistant"} - set(data)
        if missing:
            raise InvalidTurnError(f"turn dict {data!r} lacks keys {sorted(missing)}")
        return cls(data["user"], data["assistant"], dict(data.get("meta", {})))


#: The `Turn.meta` keys that place a turn in a multi-session history.
SESSION_KEYS = ("session", "date")


def session_header(turn: Turn) -> str | None:
    """The header that places `turn` in its history: ``"[session 3, 2023-05-08]"`` from its
    ``meta["session"]`` and ``meta["date"]`` (either alone works); None when it has neither.

    >>> session_header(Turn("Where did we go?", "Lisbon.", {"session": 3, "date": "2023-05-08"}))
    '[session 3, 2023-05-08]'
    >>> session_header(Turn("hi", "hello", {"date": "8 May 2023"})), session_header(Turn("hi", "hello"))
    ('[8 May 2023]', None)
    """
    session, date = turn.meta.get("session"), turn.meta.get("date")
    parts = [f"session {session}" if session is not None and str(session).strip() else "",
             str(date).strip() if date is not None else ""]
    parts = [p for p in parts if p]
    return f"[{', '.join(parts)}]" if parts else None


def session_of(turn: Turn) -> tuple | None:
    """What tells `turn`'s session apart from another's (its session and date), None without them."""
    key = tuple(turn.meta.get(k) for k in SESSION_KEYS)
    return None if key == (None, None) else key


def turn_text(turn: Turn) -> str:
    """What retrieval indexes a turn by: both sides, since either may hold what the query needs.

    >>> print(turn_text(Turn("Where is the milk?", "In the hallway.")))
    Where is the milk?
    In the hallway.
    """
    return f"{turn.user}\n{turn.assistant}"


class Conversation:
    """An ordered list of `Turn`s with an exact JSON round trip.

    >>> c = Conversation()
    >>> c.append(Turn("hi", "hello"))
    >>> len(c), c[0].assistant
    (1, 'hello')
    >>> Conversation.from_json(c.to_json()) == c
    True
    """

    def __init__(self, turns: list[Turn] | None = None):
        self._turns: list[Turn] = []
        for turn in turns or []:
            self.append(turn)

    def append(self, turn: Turn) -> None:
        if not isinstance(turn, Turn):
            raise InvalidTurnError(f"Conversation.append takes a Turn, got {type(turn).__name__}; wrap it as Turn(user, assistant)")
        self._turns.append(turn)

    def __len__(self) -> int:
        return len(self._turns)

    def __iter__(self) -> Iterator[Turn]:
        return iter(self._turns)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Conversation(self._turns[index])
        return self._turns[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Conversation) and self._turns == other._turns

    def __repr__(self) -> str:
        return f"Conversation({len(self)} turns)"

    @property
    def turns(self) -> list[Turn]:
        """A copy of the turns, oldest first."""
        return list(self._turns)

    def to_json(self) -> str:
        return json.dumps({"turns": [t.to_dict() for t in self._turns]}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Conversation":
        data = json.loads(text)
        if not isinstance(data, dict) or "turns" not in data:
            raise InvalidTurnError("conversation JSON must be an object with a 'turns' list, as written by Conversation.to_json()")
        return cls([Turn.from_dict(t) for t in data["turns"]])
