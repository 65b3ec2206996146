"""Plain-torch ground truth of the tiering rule and of ``rhea_kernels::turn_scores_and_tiers``.

Tiers: 2 (RAW) if score > tau_high, 0 (DROP) if score < tau_low, else 1 (LATENT);
masked turns (score -inf) are DROP.
"""
from __future__ import annotations

import torch

from rhea_kernels.turn_scores.reference import turn_scores

DROP, LATENT, RAW = 0, 1, 2


def score_tiers(scores: torch.Tensor, tau_low: float, tau_high: float) -> torch.Tensor:
    """Map scores to int8 tiers: 0 DROP (s < tau_low), 1 LATENT, 2 RAW (s > tau_high).

    -inf (masked) scores are DROP. Thresholds are assumed already validated.

    Example:
        >>> score_tiers(torch.tensor([0.1, 0.6, 0.9]), 0.5, 0.8).tolist()
        [0, 1, 2]
    """
    tiers = torch.full_like(scores, LATENT, dtype=torch.int8)
    tiers = tiers.masked_fill(scores > tau_high, RAW)
    tiers = tiers.masked_fill(scores < tau_low, DROP)
    return tiers


def turn_scores_and_tiers(vq: torch.Tensor, vk: torch.Tensor, turn_mask: torch.Tensor | None,
                          center: torch.Tensor | None, tau_low: float,
                          tau_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 scores [B, T], int8 tiers [B, T]): `turn_scores` then `score_tiers` (the op's argument order).

    Example:
        >>> s, t = turn_scores_and_tiers(torch.randn(1, 2, 8), torch.randn(1, 3, 2, 8), None, None, 0.1, 0.5)
        >>> t.dtype
        torch.int8
    """
    scores = turn_scores(vq, vk, turn_mask, center)
    return scores, score_tiers(scores, tau_low, tau_high)
