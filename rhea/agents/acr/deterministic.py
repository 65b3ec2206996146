"""Deterministic implementations of three operators (no LLM call).

- `noise_filter`: scores every past turn against the question with a maintained scorer
  (BM25 from `bm25s`, or any `rhea.backends.embedding.Embedder` by cosine) and keeps turns whose
  score reaches τ (BM25 scores are divided by the best one, so τ is in [0, 1]).
- `path_prune`: a turn is a *failed attempt* when the next user message rejects its reply
  ("wrong", "try again", "doesn't work", ...). Failed attempts whose replies are identical
  (after normalising case and spaces) are repeats: only the first (which holds the original
  request) is kept, noted with how often that reply failed.
- `attention_anchor`: the paper's ``[KEY INFO]`` section (Figure 14): the task and the
  constraints in force (an `InstructionalMemory`, or the plan's system text, plus recent user
  constraints: "must", "never", "only", "from now on", ...), appended at the very end of the
  context, just before the question. The paper's other slots (inventory, searched
  locations, next step) belong to its embodied/search tasks and have no rule here.

>>> turns = [HistoryTurn(0, "Capital of France?", "Lyon"), HistoryTurn(1, "Wrong, try again.", "Lyon"),
...          HistoryTurn(2, "Wrong again.", "Paris")]
>>> path_prune(turns).keep, path_prune(turns).notes
([0, 2], {0: 'this reply failed 2 times'})
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rhea.agents.acr.errors import ACRConfigError
from rhea.agents.acr.history import HistoryTurn

#: The user rejecting the previous reply.
FAILURE_CUES = re.compile(
    r"\b(?:wrong|incorrect|not (?:right|correct|it|what i (?:asked|meant))|try again|that'?s not|doesn'?t work|"
    r"didn'?t work|does not work|did not work|still (?:wrong|failing|broken|not)|fails?|failed|error|nope)\b",
    re.IGNORECASE,
)
#: A user message that sets a constraint on later answers.
CONSTRAINT_CUES = re.compile(
    r"\b(?:must|always|never|only|don'?t|do not|make sure|remember|from now on|at most|at least|no more than|"
    r"keep (?:it|answers?|replies)|answer (?:in|with)|reply (?:in|with)|respond (?:in|with)|use)\b",
    re.IGNORECASE,
)
SCORERS = ("bm25", "embedding")


@dataclass
class TurnSelection:
    """Which past turns stay (indices into the conversation), with notes on kept turns."""

    keep: list[int]
    notes: dict[int, str] = field(default_factory=dict)
    scores: dict[int, float] = field(default_factory=dict)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def relevance_scores(turns: list[HistoryTurn], query: str, *, scorer: str = "bm25", embedder: Any = None) -> list[float]:
    """Each turn's relevance to `query` in [0, 1]: BM25 over max BM25, or embedding cosine."""
    if scorer not in SCORERS:
        raise ACRConfigError(f"scorer={scorer!r} must be one of {SCORERS}")
    texts = [f"{t.user}\n{t.assistant}" for t in turns]
    if not texts:
        return []
    if scorer == "bm25":
        from rhea.backends.retrieval import BM25Retriever

        raw = BM25Retriever(texts).scores(query)
        top = max(raw)
        return [s / top if top > 0 else 0.0 for s in raw]
    if embedder is None:
        raise ACRConfigError("scorer='embedding' needs embedder= (e.g. rhea.backends.embedding.MiniLMEmbedder())")
    vecs = np.asarray(embedder.encode(texts + [query]), dtype=np.float32)
    sims = vecs[:-1] @ vecs[-1]
    return [float(max(0.0, s)) for s in sims]


def noise_filter(turns: list[HistoryTurn], query: str, *, tau: float = 0.2, scorer: str = "bm25",
                 embedder: Any = None, keep_last: int = 1) -> TurnSelection:
    """Keep turns scoring >= `tau` against `query`, plus the `keep_last` most recent turns (continuity)."""
    if not 0.0 <= tau <= 1.0:
        raise ACRConfigError(f"tau={tau} must be in [0, 1]")
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
        raise ACRConfigError(f"keep_last={keep_last!r} must be an int >= 0")
    scores = relevance_scores(turns, query, scorer=scorer, embedder=embedder)
    recent = {t.index for t in turns[len(turns) - keep_last:]} if keep_last else set()
    keep = [t.index for t, s in zip(turns, scores) if s >= tau or t.index in recent]
    notes = {t.index: "kept as most recent" for t, s in zip(turns, scores) if s < tau and t.index in recent}
    return TurnSelection(keep, notes, {t.index: round(s, 4) for t, s in zip(turns, scores)})


def path_prune(turns: list[HistoryTurn]) -> TurnSelection:
    """Drop all but the first of each group of identical failed attempts (see the module docstring)."""
    failed = [i for i in range(len(turns) - 1) if FAILURE_CUES.search(turns[i + 1].user)]
    groups: dict[str, list[int]] = {}
    for i in failed:
        groups.setdefault(_norm(turns[i].assistant), []).append(i)
    dropped, notes = set(), {}
    for positions in groups.values():
        if len(positions) > 1:
            dropped.update(positions[1:])
            notes[turns[positions[0]].index] = f"this reply failed {len(positions)} times"
    return TurnSelection([t.index for k, t in enumerate(turns) if k not in dropped], notes)


def recent_constraints(turns: list[HistoryTurn], *, window: int = 6) -> list[str]:
    """User messages among the last `window` turns that set a constraint (oldest first)."""
    return [t.user for t in turns[-window:] if CONSTRAINT_CUES.search(t.user) and not FAILURE_CUES.search(t.user)]


KEY_INFO = "[KEY INFO]:"


def attention_anchor(turns: list[HistoryTurn], *, instructions: list[str] = (), window: int = 6, task: str = "") -> str:
    """The ``[KEY INFO]`` section: the task, then the instructions in force and the recent
    constraints not already among them ('' when there are no constraints to anchor).

    >>> print(attention_anchor([HistoryTurn(0, "Always answer in French.", "Oui.")], task="Chat."))
    [KEY INFO]:
    - Task: Chat.
    - Constraints: Always answer in French.
    """
    seen = {_norm(i) for i in instructions}
    lines = [i for i in instructions if i.strip()]
    lines += [c for c in recent_constraints(turns, window=window) if _norm(c) not in seen]
    if not lines:
        return ""
    head = [KEY_INFO] + ([f"- Task: {task}"] if task else [])
    return "\n".join(head + [f"- Constraints: {' | '.join(lines)}"])
