"""Turn scorers for the Rhea policy, their fusion, and the tier rules (threshold or budget).

Each past turn gets one score per *component*:

* ``latent``: HCR's max-cosine between the query's and the reply's ``<mem>`` latents
  (`rhea.memory.episodic.EpisodicMemory.score`);
* ``bm25``: BM25 of the query against the turn's text, user + reply (`rhea.backends.retrieval`);
* ``dense``: cosine of sentence embeddings (all-MiniLM-L6-v2 by default) of the query and the turn's text.

The *scorer* ranks turns by one component or by a fusion of several: reciprocal-rank fusion
(``rrf``: ``sum_c w_c / (k + rank_c)``) or a calibrated sum (``zsum``: each component
standardised over this query's turns, then weighted and summed). Ties rank the later turn
first, for every scorer.

Tiers then come from one of two rules:

* ``threshold`` (the paper's HCR): a turn below every component's *floor* is dropped; a turn
  above a *ceiling* (latent > τ_high, or dense >= ``dense_high``) is raw; the rest are latent;
* ``budget``: turns that pass a floor are ranked by the scorer; the best ``max_raw`` are raw,
  the next ``max_latent`` latent, the rest dropped, so a turn's cost is bounded whatever the scores.

Floors (a turn is *eligible* when it passes any of its scorer's components): latent >= τ_low,
bm25 > 0 (shares a content word with the query), dense >= ``dense_floor``.

When the latent tier is off (see `latent_tier_active`), turns the rule would keep as latents
are raw under ``threshold``, and dropped under ``budget`` (only ``max_raw`` turns are kept).

``recent_raw`` (default 0) keeps the last turns raw whatever their scores, under either rule
(in budget mode on top of ``max_raw``): the turn a question needs is most often the last few.

>>> import torch
>>> comps = {"bm25": torch.tensor([0.0, 2.0, 1.0]), "dense": torch.tensor([0.1, 0.3, 0.6])}
>>> fused = fuse(comps, "rrf", rrf_k=60)
>>> rank_order(fused).tolist()
[2, 1, 0]
>>> rule = TierRule(mode="budget", max_raw=1, max_latent=1)
>>> assign_tiers(fused, comps, rule)
['drop', 'latent', 'raw']
>>> assign_tiers(fused, comps, TierRule(mode="budget", max_raw=1, max_latent=0, recent_raw=1))
['drop', 'raw', 'raw']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from rhea.errors import RheaConfigError
from rhea.modeling.config import (  # noqa: F401  (re-exported: the scorer settings live with RheaConfig)
    COMPONENTS, FIDELITY_MIN_CONTROL_GAP, FIDELITY_MIN_TOKEN_ACC, FUSIONS, LATENT_TIER_MODES, SCORERS, TIER_MODES,
    check_thresholds, fidelity_passes, latent_tier_active)


def components_of(scorer: str, fusion_components: Sequence[str]) -> tuple[str, ...]:
    """The component scores a scorer needs."""
    if scorer not in SCORERS:
        raise RheaConfigError(f"scorer={scorer!r} must be one of {SCORERS}")
    return tuple(fusion_components) if scorer == "fused" else (scorer,)


def rank_order(scores: torch.Tensor) -> torch.Tensor:
    """Turn indices best first; ties go to the later turn (recency)."""
    n = scores.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.long)
    # stable sort of the reversed sequence by descending score = later turn first among ties
    rev = scores.flip(0).double()
    order = torch.sort(rev, descending=True, stable=True).indices
    return (n - 1) - order


def hidden_best(kept: Sequence[str], fresh: Sequence[str], scores: torch.Tensor, top: int) -> list[int]:
    """The turns among a query's `top` best-scored that its own fresh plan (`fresh`) shows as raw text but a kept
    plan's tiers (`kept`) do not, best first; [] when the kept plan serves the query (always for top = 0).

    >>> hidden_best(["raw", "drop", "raw"], ["drop", "raw", "raw"], torch.tensor([0.1, 0.9, 0.5]), 2)
    [1]
    >>> hidden_best(["raw", "drop", "raw"], ["raw", "drop", "raw"], torch.tensor([0.1, 0.2, 0.9]), 3)
    []
    """
    if len(kept) != len(fresh) or len(fresh) != scores.numel():
        raise ValueError(f"kept ({len(kept)}), fresh ({len(fresh)}) and scores ({scores.numel()}) must cover the same turns")
    return [i for i in rank_order(scores)[:top].tolist() if fresh[i] == "raw" and kept[i] != "raw"]


def ranks(scores: torch.Tensor) -> torch.Tensor:
    """1-based rank of every turn, tied turns sharing the mean of their ranks (fractional ranking).

    Fusion uses these, so a block of equal scores (e.g. every turn with no word in common with
    the query, BM25 = 0) lends none of its members a better rank than another.

    >>> ranks(torch.tensor([0.5, 0.0, 0.9, 0.0])).tolist()
    [2.0, 3.5, 1.0, 3.5]
    """
    s = scores.flatten().double()
    values, inverse, counts = torch.unique(-s, sorted=True, return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts  # 0-based position of each tie group
    mean_rank = first.double() + (counts.double() + 1) / 2
    return mean_rank[inverse]


def fuse(components: Mapping[str, torch.Tensor], fusion: str = "rrf", *, weights: Mapping[str, float] | None = None,
         rrf_k: float = 60.0) -> torch.Tensor:
    """Fused score ``[T]`` of several component scores ``{name: [T]}`` (float64)."""
    if fusion not in FUSIONS:
        raise RheaConfigError(f"fusion={fusion!r} must be one of {FUSIONS}")
    if not components:
        raise RheaConfigError("fuse needs at least one component score")
    w = {c: 1.0 for c in components} if weights is None else {c: float(weights.get(c, 1.0)) for c in components}
    n = next(iter(components.values())).numel()
    total = torch.zeros(n, dtype=torch.float64)
    for name, s in components.items():
        s = s.double().flatten()
        if fusion == "rrf":
            total += w[name] / (rrf_k + ranks(s))
        else:
            std = s.std(unbiased=False) if n > 1 else torch.tensor(0.0, dtype=torch.float64)
            total += w[name] * ((s - s.mean()) / std if std > 1e-12 else torch.zeros_like(s))
    return total


@dataclass
class TierRule:
    """How scores become tiers (see the module docstring)."""

    mode: str = "budget"
    tau_low: float = 0.5
    tau_high: float = 0.8
    dense_floor: float = 0.05
    dense_high: float = 0.6
    max_raw: int = 10
    max_latent: int = 8
    latents: bool = True
    #: the last `recent_raw` turns are raw whatever their scores (in budget mode on top of `max_raw`)
    recent_raw: int = 0

    def __post_init__(self) -> None:
        if self.mode not in TIER_MODES:
            raise RheaConfigError(f"tier_mode={self.mode!r} must be one of {TIER_MODES}")
        for name in ("max_raw", "max_latent", "recent_raw"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise RheaConfigError(f"{name}={v!r} must be an int >= 0")
        check_thresholds(self.tau_low, self.tau_high)
        if not self.dense_floor <= self.dense_high:
            raise RheaConfigError(f"dense_floor={self.dense_floor} must be <= dense_high={self.dense_high}")


def floor_mask(components: Mapping[str, torch.Tensor], rule: TierRule) -> torch.Tensor:
    """True where a turn passes at least one component's floor (it may be kept)."""
    masks = []
    for name, s in components.items():
        s = s.flatten()  # compared in its own dtype, as the kernels compare fp32 scores
        masks.append(s >= rule.tau_low if name == "latent" else s > 0 if name == "bm25" else s >= rule.dense_floor)
    return torch.stack(masks).any(0)


def ceiling_mask(components: Mapping[str, torch.Tensor], rule: TierRule) -> torch.Tensor:
    """True where a turn passes a raw-text ceiling (threshold mode): latent > τ_high or dense >= dense_high."""
    n = next(iter(components.values())).numel()
    out = torch.zeros(n, dtype=torch.bool)
    for name, s in components.items():
        if name == "latent":
            out |= s.flatten() > rule.tau_high
        elif name == "dense":
            out |= s.flatten() >= rule.dense_high
    return out


def describe_thresholds(names, rule: TierRule) -> str:
    """The floors and ceilings threshold mode applies to the components `names`, as a decision's reason states them.

    >>> describe_thresholds(["dense"], TierRule(mode="threshold", dense_floor=0.5, dense_high=0.9))
    'dense floor 0.5, ceiling 0.9'
    >>> describe_thresholds(["latent", "bm25"], TierRule(mode="threshold", tau_low=0.3, tau_high=0.6))
    'tau_low=0.3, tau_high=0.6; bm25 > 0'
    """
    parts = {"latent": f"tau_low={rule.tau_low}, tau_high={rule.tau_high}", "bm25": "bm25 > 0",
             "dense": f"dense floor {rule.dense_floor}, ceiling {rule.dense_high}"}
    return "; ".join(parts[n] for n in names if n in parts)


def assign_tiers(score: torch.Tensor, components: Mapping[str, torch.Tensor], rule: TierRule) -> list[str]:
    """``"raw" | "latent" | "drop"`` for every turn under `rule` (see the module docstring)."""
    n = score.numel()
    if n == 0:
        return []
    eligible = floor_mask(components, rule)
    recent = set(range(max(0, n - rule.recent_raw), n))
    if rule.mode == "threshold":
        if set(components) == {"bm25"}:
            # BM25 has no scale-free ceiling: every turn sharing a word with the query is raw
            high = eligible
        else:
            high = ceiling_mask(components, rule)
        keep_as = "latent" if rule.latents else "raw"
        return ["raw" if i in recent else "drop" if not e else "raw" if h else keep_as
                for i, (e, h) in enumerate(zip(eligible.tolist(), high.tolist()))]
    tiers = ["drop"] * n
    for i in recent:
        tiers[i] = "raw"
    n_raw = n_latent = 0
    max_latent = rule.max_latent if rule.latents else 0
    for i in rank_order(score).tolist():
        if not eligible[i] or i in recent:
            continue
        if n_raw < rule.max_raw:
            tiers[i], n_raw = "raw", n_raw + 1
        elif n_latent < max_latent:
            tiers[i], n_latent = "latent", n_latent + 1
        else:
            break
    return tiers


_DEFAULT_EMBEDDER = None


def default_embedder():
    """The process-wide `MiniLMEmbedder` the dense component uses unless a policy is given its own (loaded once)."""
    global _DEFAULT_EMBEDDER
    if _DEFAULT_EMBEDDER is None:
        from rhea.backends.embedding import MiniLMEmbedder

        _DEFAULT_EMBEDDER = MiniLMEmbedder()
    return _DEFAULT_EMBEDDER


def mode_line(config) -> str:
    """One line for `rhea chat`: which retrieval mode a `RheaConfig` runs and why.

    >>> from rhea.modeling.config import RheaConfig
    >>> mode_line(RheaConfig(scorer="bm25", tier_mode="budget", max_raw=3))
    'retrieval: scorer bm25, budget tiers (<= 3 raw), last 3 turns raw; latent tier off: no measured compressor fidelity in rhea_config.json (target: token acc >= 0.9 with a positive control gap)'
    """
    mode = config.active_mode()
    scorer = config.scorer if config.scorer != "fused" else f"fused {config.fusion}({', '.join(config.fusion_components)})"
    if config.tier_mode == "budget":
        tiers = f"budget tiers (<= {config.max_raw} raw" + (f", <= {config.max_latent} latent)" if mode["latent_tier"] else ")")
    else:
        tiers = f"threshold tiers (tau_low={config.tau_low}, tau_high={config.tau_high})"
    if getattr(config, "recent_raw", 0):
        tiers += f", last {config.recent_raw} turns raw"
    return f"retrieval: scorer {scorer}, {tiers}; {mode['reason']}"
