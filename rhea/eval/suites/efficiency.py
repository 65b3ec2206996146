"""efficiency: a long conversation of queries that invite long replies.

Nothing about the content is scored: the suite exists so a runner can record prompt
tokens, generated tokens and latency per turn while the history grows (60 turns by
default). `score_turn` records the reply's size; `aggregate` summarises it together with
whatever numbers the runner added to each turn-score dict (e.g. ``latency_s``).

>>> ep = EfficiencySuite(n_episodes=1).generate(seed=0)[0]
>>> len(ep.turns), ep.turns[0].kind
(60, 'query')
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

from rhea.eval import loaders
from rhea.eval.checkers import count_words
from rhea.eval.suites.base import Suite, SuiteConfigError, SuiteTurn, fill_turns, summarize_numeric
from rhea.eval.suites.builtin import VERBOSE_TEMPLATES, VERBOSE_TOPICS


def builtin_prompts() -> list[str]:
    return [t.format(topic=topic) for topic in VERBOSE_TOPICS for t in VERBOSE_TEMPLATES]


class EfficiencySuite(Suite):
    """Verbose-reply-inducing queries; per-turn cost is the runner's to record."""

    name = "efficiency"
    default_turns = 60
    score_fields = ("reply_chars", "reply_words")

    def __init__(self, *, data: Sequence[str] | None = None, n_episodes: int = 1):
        super().__init__(data=list(data) if data is not None else builtin_prompts(),
                         n_episodes=n_episodes)
        if not self.data or not all(isinstance(p, str) and p.strip() for p in self.data):
            raise SuiteConfigError("data must be a non-empty list of non-empty prompt strings")

    @staticmethod
    def load(path: str | Path) -> list[str]:
        """Every turn of every question in an MT-Bench file, as standalone prompts."""
        return [turn for q in loaders.load_mt_bench_questions(path) for turn in q.turns]

    def _episode(self, n_turns: int, rng: random.Random):
        prompts = fill_turns(rng, self.data, n_turns)
        return [SuiteTurn(p, "query") for p in prompts], {"n_prompts": len(self.data)}

    def score_turn(self, turn: SuiteTurn, reply: str, *, history=()) -> dict:
        return {"reply_chars": len(reply), "reply_words": count_words(reply)}

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        sizes = [{k: s[k] for k in self.score_fields if k in s} for s in turn_scores]
        return summarize_numeric(sizes)
