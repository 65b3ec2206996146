"""Statistics over episodes: bootstrap intervals and paired comparisons between policies.

The unit of every interval is the **episode**, never the single check: the turns of one
conversation share its instructions, its questions and the model's earlier replies, so they
are not independent. A metric is first computed per episode (`episode_metrics`, the suite's
own aggregation over that episode's turns), then:

- `bootstrap_ci`: the mean over episodes with a percentile bootstrap interval (episodes
  resampled with replacement);
- `paired_comparison`: policy minus baseline on the same episodes (every policy runs the
  same seeded conversations): the mean difference, its bootstrap interval, and a two-sided
  sign-flip permutation p-value (exact up to 16 episodes, Monte Carlo beyond).

One episode gives a mean but no interval (``low``/``high`` None) and a p-value of 1.

>>> ci = bootstrap_ci([4.0, 5.0, 6.0, 5.0, 5.5, 4.5, 6.5, 3.5])
>>> round(ci.mean, 2), ci.low < ci.mean < ci.high, ci.n
(5.0, True, 8)
>>> cmp = paired_comparison({"a": 6, "b": 7, "c": 8, "d": 7}, {"a": 5, "b": 5, "c": 6, "d": 6})
>>> cmp.diff, cmp.p_value  # all four differences positive: 2 of 16 sign patterns as extreme
(1.5, 0.125)
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from rhea.errors import RheaError

#: Bootstrap resamples and the permutation draws beyond the exact limit.
N_BOOT = 5000
N_PERM = 20000
EXACT_PERMUTATION_MAX = 16


class StatsError(RheaError, ValueError):
    """Values a statistic cannot be computed from (empty, non-finite, unpaired)."""


@dataclass(frozen=True)
class Interval:
    """A mean over `n` episodes and its bootstrap interval (None with fewer than 2)."""

    mean: float
    low: float | None
    high: float | None
    n: int
    confidence: float = 0.95

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self, digits: int = 2) -> str:
        """``5.00 [4.25, 5.75]``, or ``5.00 (n=1)`` with no interval."""
        if self.low is None:
            return f"{self.mean:.{digits}f} (n={self.n})"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


@dataclass(frozen=True)
class Comparison:
    """Policy minus baseline over `n` paired episodes."""

    diff: float
    low: float | None
    high: float | None
    p_value: float
    n: int
    confidence: float = 0.95

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self, digits: int = 2) -> str:
        """``+1.75 [+1.00, +2.50] p=0.125``."""
        if self.low is None:
            return f"{self.diff:+.{digits}f} (n={self.n}, p={self.p_value:.2g})"
        return (f"{self.diff:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}] "
                f"p={self.p_value:.2g}")


def _clean(values: Iterable[Any], what: str) -> list[float]:
    kept = [float(v) for v in values if v is not None]
    if not kept:
        raise StatsError(f"{what}: no values; at least one episode must have this metric")
    if not all(math.isfinite(v) for v in kept):
        raise StatsError(f"{what}: non-finite values {kept}; drop them before computing intervals")
    return kept


def bootstrap_ci(values: Iterable[float | None], *, confidence: float = 0.95,
                 n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """Mean of `values` (None skipped) with a percentile bootstrap interval."""
    import numpy as np

    if not 0.0 < confidence < 1.0:
        raise StatsError(f"confidence={confidence} must be in (0, 1), e.g. 0.95")
    data = np.asarray(_clean(values, "bootstrap_ci"))
    mean = float(data.mean())
    if len(data) < 2:
        return Interval(mean, None, None, len(data), confidence)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(n_boot, len(data)))].mean(axis=1)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(mean, float(low), float(high), len(data), confidence)


def sign_flip_p_value(diffs: Sequence[float], *, n_perm: int = N_PERM, seed: int = 0) -> float:
    """Two-sided p-value of mean(diffs) = 0 by flipping signs (the paired permutation test).

    Exact (all 2^n sign patterns) up to `EXACT_PERMUTATION_MAX` differences, else `n_perm`
    random patterns with the observed one counted (so p is never 0).
    """
    import numpy as np

    d = np.asarray(_clean(diffs, "sign_flip_p_value"))
    observed = abs(d.mean())
    if observed == 0.0:
        return 1.0
    tolerance = 1e-12 * max(1.0, observed)
    if len(d) <= EXACT_PERMUTATION_MAX:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
        flipped = np.abs((signs * d).mean(axis=1))
        return float((flipped >= observed - tolerance).mean())
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(n_perm, len(d)))
    flipped = np.abs((signs * d).mean(axis=1))
    return float(((flipped >= observed - tolerance).sum() + 1) / (n_perm + 1))


def paired_comparison(policy: Mapping[str, float | None], baseline: Mapping[str, float | None],
                      *, confidence: float = 0.95, n_boot: int = N_BOOT, seed: int = 0
                      ) -> Comparison:
    """`policy` minus `baseline` over the episodes (keys) both have a value for."""
    shared = [k for k in policy if k in baseline
              and policy[k] is not None and baseline[k] is not None]
    if not shared:
        raise StatsError("paired_comparison: the two policies share no episode with this metric; "
                         "compare runs of the same suite, seed and episodes")
    diffs = [float(policy[k]) - float(baseline[k]) for k in shared]
    ci = bootstrap_ci(diffs, confidence=confidence, n_boot=n_boot, seed=seed)
    return Comparison(ci.mean, ci.low, ci.high, sign_flip_p_value(diffs, seed=seed), ci.n,
                      confidence)


# ---------------------------------------------------------------------- per-episode metrics

def _flatten(aggregate: Mapping[str, Any]) -> dict[str, float]:
    """Numeric top-level fields, and numeric fields one level down as ``outer.inner``."""
    flat: dict[str, float] = {}
    for key, value in aggregate.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            flat[key] = float(value)
        elif isinstance(value, Mapping) and key != "recorded":
            for inner, v in value.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    flat[f"{key}.{inner}"] = float(v)
    return flat


def held_mb(row: Mapping[str, Any]) -> float | None:
    """The megabytes (10^6 bytes) a turn's conversation held after it (KV cache + latents + instruction block:
    the row's ``bytes_held``, a number or its parts by kind), or None where the row does not record it.

    >>> held_mb({"bytes_held": 2_500_000}), held_mb({"bytes_held": {"kv_cache": 1_000_000, "latents": 500_000}})
    (2.5, 1.5)
    """
    value = row.get("bytes_held")
    if isinstance(value, Mapping):
        parts = [v for v in value.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        value = sum(parts) if parts else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) / 1e6


def episode_metrics(suite, rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{episode_id: {metric: value}}``: the suite's aggregation over each episode's rows,
    plus the mean context tokens, latency and megabytes held (``held_mb``) per turn of the episode."""
    by_episode: dict[str, list] = {}
    for row in rows:
        by_episode.setdefault(str(row.get("episode_id")), []).append(row)
    out = {}
    for episode, episode_rows in by_episode.items():
        metrics = _flatten(suite._aggregate(episode_rows))
        for cost in ("context_tokens", "latency_s"):
            values = [r[cost] for r in episode_rows if isinstance(r.get(cost), (int, float))]
            if values:
                metrics[cost] = sum(values) / len(values)
        held = [v for v in map(held_mb, episode_rows) if v is not None]
        if held:
            metrics["held_mb"] = sum(held) / len(held)
        out[episode] = metrics
    return out


def metric_by_episode(per_episode: Mapping[str, Mapping[str, float]], metric: str
                      ) -> dict[str, float]:
    """One metric's value per episode, for the episodes that have it."""
    return {e: m[metric] for e, m in per_episode.items() if m.get(metric) is not None}


def shared_time_units(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{episode_id: unit}``: which episodes share the measurement of their turns' time.

    A batched run (``rhea bench --batch-episodes K``) times each turn once for its K rows: they carry
    ``batch_rows`` > 1 and the same ``prefill_s`` and ``decode_s``. Episodes linked by such a shared
    measurement (at any turn) are one unit, named by its first episode; an episode never batched is its
    own unit. For latency the unit is this, not the episode: eight episodes in one batch are one timing.

    >>> rows = [{"episode_id": e, "turn_index": 0, "batch_rows": 2.0, "prefill_s": p, "decode_s": 1.0}
    ...         for e, p in (("a", 0.5), ("b", 0.5), ("c", 0.7), ("d", 0.7))]
    >>> shared_time_units(rows + [{"episode_id": "e", "turn_index": 0, "prefill_s": 0.5, "decode_s": 1.0}])
    {'a': 'a', 'b': 'a', 'c': 'c', 'd': 'c', 'e': 'e'}
    """
    parent: dict[str, str] = {}

    def root(e: str) -> str:
        while parent[e] != e:
            parent[e] = parent[parent[e]]
            e = parent[e]
        return e

    first_of: dict[tuple, str] = {}
    for row in rows:
        episode = str(row.get("episode_id"))
        parent.setdefault(episode, episode)
        if float(row.get("batch_rows") or 1.0) <= 1.0:
            continue
        key = (row.get("turn_index"), row.get("prefill_s"), row.get("decode_s"))
        other = first_of.setdefault(key, episode)
        a, b = sorted((root(episode), root(other)))
        parent[b] = a
    return {e: root(e) for e in parent}
