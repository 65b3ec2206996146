"""Score retrieval triples with a model's own read-out, and fit HCR thresholds to keep/drop targets.

Scores are exactly what `rhea.memory.EpisodicMemory` computes at inference: the reply and
the query are each compressed by the compress adapter into ``n_mem`` latents and scored by
``rhea_kernels.turn_scores`` (max cosine over the n×n pairs, optionally after subtracting a
centre vector).

>>> import torch
>>> fit = fit_thresholds(torch.tensor([0.6, 0.7, 0.8, 0.9]), torch.tensor([0.1, 0.2, 0.3, 0.5]))
>>> round(fit.tau_low, 3), fit.keep_rate, fit.drop_rate
(0.55, 1.0, 1.0)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from rhea.calibration.data import Triple
from rhea.errors import RheaError


class CalibrationError(RheaError, ValueError):
    """Thresholds cannot be fitted (too few triples, or targets out of range)."""


def share(mask: torch.Tensor) -> float | torch.Tensor:
    """Share of True in a bool `mask` (along the last dim for 2-D masks), in float64: float32 makes 90/100
    come out as 0.89999998, which fails a 0.9 target."""
    if mask.dim() > 1:
        return mask.double().mean(-1)
    return float(mask.double().mean())


@torch.no_grad()
def compress_views(model, texts: Sequence[str], *, batch_size: int = 16) -> list[torch.Tensor]:
    """One ``[rows, hidden]`` fp32 CPU latent per text as the policy scores it (compress adapter, eval mode,
    ``RheaConfig.compress_chunk_tokens`` applied; ``model.score_view``: the final states)."""
    was_training = model.training
    model.eval()
    try:
        return [model.score_view(x).float().cpu() for x in model.compress_replies(list(texts), batch_size=batch_size)]
    finally:
        model.train(was_training)


def latent_mean(latents: torch.Tensor) -> torch.Tensor:
    """The mean latent vector ``[hidden]`` over every slot of every text (the centre to subtract)."""
    return latents.reshape(-1, latents.shape[-1]).mean(0)


def pair_scores(reply_latents: torch.Tensor, query_latents: torch.Tensor, center: torch.Tensor | None = None) -> torch.Tensor:
    """Score of reply i against query i for every i: ``[N]`` (the HCR turn score)."""
    from rhea_kernels import turn_scores

    return torch.stack([turn_scores(q[None], r[None, None], center=center)[0, 0] for q, r in zip(query_latents, reply_latents)])


@dataclass
class TripleScores:
    """Scores of each reply against its needing query (`related`) and its unrelated query."""

    related: torch.Tensor
    unrelated: torch.Tensor

    @property
    def ranking_accuracy(self) -> float:
        """Share of triples whose needing query scores above the unrelated one."""
        return share(self.related > self.unrelated)

    def tier_accuracy(self, tau_low: float) -> tuple[float, float]:
        """(share of related kept, share of unrelated dropped) under threshold `tau_low`."""
        return share(self.related >= tau_low), share(self.unrelated < tau_low)


@dataclass
class TripleLatents:
    """``[N, rows, hidden]`` latents of the replies, needing queries and unrelated queries. `rows` (``[3, N]``, None =
    every row real) counts each text's real rows when texts were compressed in chunks and padded to a common count."""

    replies: torch.Tensor
    queries: torch.Tensor
    unrelated: torch.Tensor
    rows: torch.Tensor | None = None

    def scores(self, center: torch.Tensor | None = None) -> TripleScores:
        return TripleScores(pair_scores(self.replies, self.queries, center), pair_scores(self.replies, self.unrelated, center))

    def mean(self) -> torch.Tensor:
        every = torch.cat([self.replies, self.queries, self.unrelated])
        if self.rows is None:
            return latent_mean(every)
        real = torch.arange(every.shape[1])[None, :] < self.rows.reshape(-1)[:, None]  # padding rows left out
        return every[real].mean(0)

    def subset(self, keep: torch.Tensor) -> "TripleLatents":
        """The triples where the bool mask `keep` is True."""
        return TripleLatents(self.replies[keep], self.queries[keep], self.unrelated[keep],
                             None if self.rows is None else self.rows[:, keep])


def encode_triples(model, triples: Sequence[Triple], *, batch_size: int = 16) -> TripleLatents:
    """Compress the replies, needing queries and unrelated queries of `triples` (as the policy compresses them)."""
    from rhea.context.latent import stack_rows

    if not triples:
        raise CalibrationError("no triples to score")
    n = len(triples)
    views = compress_views(model, [t.reply for t in triples] + [t.query for t in triples]
                           + [t.unrelated for t in triples], batch_size=batch_size)
    counts = torch.tensor([x.shape[0] for x in views]).reshape(3, n)
    stacked = stack_rows(views)
    return TripleLatents(stacked[:n], stacked[n:2 * n], stacked[2 * n:],
                         None if bool((counts == stacked.shape[1]).all()) else counts)


@dataclass
class ThresholdFit:
    """Fitted τ_low/τ_high with the keep/drop rates they reach on the fitting triples."""

    tau_low: float
    tau_high: float
    keep_rate: float
    drop_rate: float
    raw_rate: float
    targets_met: bool

    def to_dict(self) -> dict:
        return asdict(self)


def fit_thresholds(related: torch.Tensor, unrelated: torch.Tensor, *, keep: float = 0.9, drop: float = 0.8,
                   raw: float = 0.5) -> ThresholdFit:
    """τ_low keeps ≥ `keep` of related replies and drops ≥ `drop` of unrelated ones, with the widest margin.

    Candidate thresholds are midpoints between sorted scores. Among those meeting both
    targets, τ_low is the middle of the feasible range (the largest margin either side, so it
    holds best on unseen data); if none meets both, the one with the best keep+drop among those
    meeting `keep` (or overall, if none does), and ``targets_met`` is False. τ_high puts a
    share `raw` of the related replies above it (kept as raw text; the rest as latents).
    """
    for name, v in (("keep", keep), ("drop", drop), ("raw", raw)):
        if not 0.0 <= v <= 1.0:
            raise CalibrationError(f"{name}={v} must be a rate in [0, 1]")
    related, unrelated = related.float().flatten(), unrelated.float().flatten()
    if related.numel() < 2 or unrelated.numel() < 2:
        raise CalibrationError(f"need at least 2 related and 2 unrelated scores, got {related.numel()} and {unrelated.numel()}")
    values = torch.cat([related, unrelated]).sort().values
    cands = torch.cat([values[:1] - 1e-4, (values[1:] + values[:-1]) / 2, values[-1:] + 1e-4])
    kept = share(related[None, :] >= cands[:, None])
    dropped = share(unrelated[None, :] < cands[:, None])
    ok = (kept >= keep) & (dropped >= drop)
    if ok.any():
        idx = ok.nonzero().flatten()
        tau_low = float((cands[idx[0]] + cands[idx[-1]]) / 2)
    else:
        pool = (kept >= keep) if (kept >= keep).any() else torch.ones_like(kept, dtype=torch.bool)
        score = torch.where(pool, kept + dropped, torch.full_like(kept, -1.0))
        tau_low = float(cands[int(score.argmax())])
    tau_high = max(tau_low, float(torch.quantile(related, 1.0 - raw))) if raw > 0 else 1.0
    tau_low, tau_high = max(-1.0, min(1.0, tau_low)), max(-1.0, min(1.0, tau_high))
    keep_rate = share(related >= tau_low)
    drop_rate = share(unrelated < tau_low)
    raw_rate = share(related > tau_high)
    return ThresholdFit(round(tau_low, 6), round(tau_high, 6), keep_rate, drop_rate, raw_rate,
                        keep_rate >= keep and drop_rate >= drop)
