"""The shape every suite shares: scripted turns, episodes, and a scoring contract.

A runner drives an `Episode` turn by turn: send ``turn.user`` through the chat session,
take the reply, call ``episode.score_turn(turn, reply, history=...)``, keep the dict;
after all episodes, ``suite.aggregate(all_turn_scores)`` gives the suite's metrics. The
runner may add its own numbers (tokens, latency) to each turn-score dict; `aggregate`
summarises every numeric field it does not already know.

>>> turn = SuiteTurn("Hello!", "filler")
>>> turn.kind, turn.active_instructions
('filler', ())
"""
from __future__ import annotations

import random
import re
import statistics
import string
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rhea.errors import RheaError
from rhea.eval.checkers import InstructionSpec

#: Turn kinds: a global instruction, its revocation, an ordinary question, small talk that
#: only adds distance, a fact the model must track ("update"), a question whose answer
#: is known ("probe"), and a question about the history asked on its own ("question": answered
#: from the conversation so far and not added to it, `ChatSession.ask`, so every question of an
#: episode sees the same history).
TURN_KINDS = ("instruction", "revoke", "query", "filler", "update", "probe", "question")


class SuiteConfigError(RheaError, ValueError):
    """A suite parameter or data set that cannot build episodes."""


@dataclass(frozen=True)
class SuiteTurn:
    """One scripted user turn and what is expected of the reply to it."""

    user: str
    kind: str
    active_instructions: tuple[InstructionSpec, ...] = ()
    expected: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in TURN_KINDS:
            raise SuiteConfigError(f"turn kind={self.kind!r} must be one of {TURN_KINDS}")
        object.__setattr__(self, "active_instructions", tuple(self.active_instructions))

    def to_dict(self) -> dict:
        """A JSON-ready view (instruction specs as ``{"id", "kwargs"}``), for run logs."""
        return {"user": self.user, "kind": self.kind, "expected": self.expected,
                "active_instructions": [s.to_dict() for s in self.active_instructions],
                "meta": _jsonable(dict(self.meta))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SuiteTurn":
        """The turn `to_dict` wrote (a run's ``episodes``): instruction specs, and the ``given`` /
        ``revoked`` specs of its meta, as `InstructionSpec` again.

        >>> t = SuiteTurn("Hi", "query", expected="x", meta={"index": 3})
        >>> SuiteTurn.from_dict(t.to_dict()) == t
        True
        """
        meta = dict(data.get("meta") or {})
        for key in ("revoked", "given"):
            if key in meta:
                meta[key] = tuple(InstructionSpec.from_dict(s) for s in meta[key])
        return cls(data["user"], data["kind"],
                   tuple(InstructionSpec.from_dict(s) for s in data.get("active_instructions") or ()),
                   data.get("expected"), meta)


@dataclass
class Episode:
    """A scripted conversation of one suite; scoring is delegated to that suite."""

    episode_id: str
    suite: "Suite"
    turns: list[SuiteTurn]
    meta: dict = field(default_factory=dict)
    #: Turns that happened before the first scripted turn, with their replies (`Turn.to_dict` form):
    #: a runner feeds them to the session's policy (`ContextPolicy.catch_up`), nothing is generated.
    history: list[dict] = field(default_factory=list)

    def score_turn(self, turn: SuiteTurn, reply: str, *,
                   history: Sequence[tuple[str, str]] = ()) -> dict:
        """Metrics for `reply` to `turn`; `history` is the earlier (user, reply) pairs."""
        return self.labelled(turn, self.suite.score_turn(turn, reply, history=history))

    def labelled(self, turn: SuiteTurn, scores: dict) -> dict:
        """`scores` of `turn` with the episode and turn they belong to."""
        return {"episode_id": self.episode_id, "turn_index": turn.meta.get("index"),
                "kind": turn.kind, **scores}

    def aggregate(self, turn_scores: Sequence[dict]) -> dict:
        return self.suite.aggregate(turn_scores)

    def __len__(self) -> int:
        return len(self.turns)

    def to_dict(self) -> dict:
        out = {"episode_id": self.episode_id, "suite": self.suite.name,
               "meta": _jsonable(self.meta), "turns": [t.to_dict() for t in self.turns]}
        if self.history:
            out["history"] = [dict(t) for t in self.history]
        return out

    def history_turns(self) -> list:
        """`history` as `rhea.context.Turn` objects."""
        from rhea.context.conversation import Turn

        return [Turn.from_dict(t) for t in self.history]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], suite: "Suite") -> "Episode":
        """The episode `to_dict` wrote, scored by `suite` (a run's ``episodes``, read back to re-score
        or judge its committed replies)."""
        if data.get("suite", suite.name) != suite.name:
            raise SuiteConfigError(f"episode {data.get('episode_id')!r} belongs to suite {data['suite']!r}, "
                                   f"not {suite.name!r}")
        return cls(data["episode_id"], suite, [SuiteTurn.from_dict(t) for t in data["turns"]],
                   dict(data.get("meta") or {}), [dict(t) for t in data.get("history") or ()])


def _jsonable(value: Any) -> Any:
    if isinstance(value, InstructionSpec):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class Suite:
    """Base class: subclasses set `name`, build episodes, score turns and aggregate.

    Subclasses implement ``_episode(n_turns, rng)``, ``score_turn`` and ``_aggregate``;
    ``load(path)`` (a classmethod) reads the public data format into the ``data=`` value.
    ``_episode`` returns ``(turns, meta)``; a ``"history"`` list in that meta (turn dicts) becomes the
    episode's `Episode.history`. A suite whose `default_turns` is None passes None to ``_episode``
    when no turn count is asked for (e.g. every question its data holds).
    """

    name = "suite"
    default_turns = 20

    def __init__(self, *, data: Any = None, n_episodes: int = 8):
        require_int("n_episodes", n_episodes, 1)
        self.data = data
        self.n_episodes = n_episodes

    @classmethod
    def load(cls, path: str) -> Any:
        raise NotImplementedError(f"suite {cls.name!r} reads no data files")

    @classmethod
    def from_path(cls, path: str, **kwargs: Any) -> "Suite":
        """The suite over a public benchmark file (see the subclass's `load`)."""
        return cls(data=cls.load(path), **kwargs)

    def generate(self, n_turns: int | None = None, seed: int = 0) -> list[Episode]:
        """`n_episodes` episodes of `n_turns` user turns each; same seed → same episodes."""
        n_turns = self.default_turns if n_turns is None else n_turns
        if n_turns is not None:
            require_int("n_turns", n_turns, self.min_turns())
        rng = random.Random(f"{self.name}:{seed}")
        episodes = []
        for number in range(self.n_episodes):
            turns, meta = self._episode(n_turns, rng)
            history = list(meta.pop("history", ()))
            indexed = [SuiteTurn(t.user, t.kind, t.active_instructions, t.expected,
                                 {**t.meta, "index": i}) for i, t in enumerate(turns)]
            episodes.append(Episode(f"{self.name}/{seed}/{number}", self, indexed,
                                    {**meta, "seed": seed}, history))
        return episodes

    def min_turns(self) -> int:
        return 1

    def _episode(self, n_turns: int, rng: random.Random) -> tuple[list[SuiteTurn], dict]:
        raise NotImplementedError

    def score_turn(self, turn: SuiteTurn, reply: str, *,
                   history: Sequence[tuple[str, str]] = ()) -> dict:
        raise NotImplementedError

    def score_turns(self, items: Sequence[tuple[SuiteTurn, str, Sequence[tuple[str, str]]]]) -> list[dict]:
        """`score_turn` of each ``(turn, reply, history)``, in order: the turns of several episodes
        answered in one batch. A suite whose scoring asks a model (long-horizon's judge) overrides
        this to ask once for all of them."""
        return [self.score_turn(turn, reply, history=history) for turn, reply, history in items]

    def aggregate(self, turn_scores: Sequence[dict]) -> dict:
        """Suite metrics plus a summary of any extra numeric fields the runner recorded."""
        result = {"suite": self.name, "n_turns": len(turn_scores),
                  "n_episodes": len({s.get("episode_id") for s in turn_scores})}
        result.update(self._aggregate(turn_scores))
        known = {"turn_index", "index"} | set(self.score_fields)
        extras = summarize_numeric(turn_scores, exclude=known)
        if extras:
            result["recorded"] = extras
        return result

    #: Fields `score_turn` produces (not re-summarised as runner extras).
    score_fields: tuple[str, ...] = ()

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        return {}


def require_int(name: str, value: Any, minimum: int) -> None:
    """Raise `SuiteConfigError` unless `value` is an int >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SuiteConfigError(f"{name}={value!r} must be an integer >= {minimum}")


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the non-None values, None if there are none."""
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def summarize_numeric(rows: Sequence[Mapping[str, Any]], *, exclude: Iterable[str] = ()
                      ) -> dict[str, dict[str, float]]:
    """For each numeric field in `rows`: count, mean, p50, p90, total.

    >>> summarize_numeric([{"ms": 10}, {"ms": 30}])["ms"]["mean"]
    20.0
    """
    skip = set(exclude)
    columns: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if key not in skip and isinstance(value, (int, float)) and not isinstance(value, bool):
                columns.setdefault(key, []).append(float(value))
    summary = {}
    for key, values in columns.items():
        ordered = sorted(values)
        summary[key] = {"count": len(values), "mean": statistics.fmean(values),
                        "p50": statistics.median(values),
                        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
                        "total": sum(values)}
    return summary


def fill_turns(rng: random.Random, pool: Sequence[str], n: int) -> list[str]:
    """`n` items from `pool`, without repeats until the pool is used up."""
    if not pool:
        raise SuiteConfigError("the query pool is empty; pass data with at least one query")
    out: list[str] = []
    while len(out) < n:
        out.extend(rng.sample(list(pool), min(len(pool), n - len(out))))
    return out


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces: SQuAD's answer normalisation, for
    exact-match scoring (`rhea.training.acr.rewards.exact_match`, ACE's `is_correct`).

    >>> normalize_answer("  The Rugby! ")
    'rugby'
    """
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def _normalize(text: str) -> str:
    # For mentions, not exact match: punctuation becomes a space ("kitchen/garden" names both)
    # and articles stay, so a multi-word value is found as written.
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _mentions(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(_normalize(phrase))}(?!\w)", _normalize(text)) is not None


def value_matches(answer: str, expected: str, candidates: Sequence[str] = ()) -> bool:
    """True if `answer` names `expected` and no other candidate value.

    >>> value_matches("It is in the kitchen.", "kitchen", ["kitchen", "garden"])
    True
    >>> value_matches("kitchen or garden", "kitchen", ["kitchen", "garden"])
    False
    """
    if not _mentions(answer, expected):
        return False
    rivals = [c for c in candidates if _normalize(c) not in _normalize(expected)
              and _normalize(expected) not in _normalize(c)]
    return not any(_mentions(answer, c) for c in rivals)
