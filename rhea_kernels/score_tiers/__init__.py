"""Tiers from turn scores: 2 RAW (s > tau_high), 1 LATENT, 0 DROP (s < tau_low; masked turns).

* `score_tiers(scores, tau_low, tau_high)`: the rule on scores already computed (plain torch,
  any device; `reference.score_tiers`).
* `turn_scores_and_tiers(vq, vk, tau_low, tau_high, turn_mask=None, center=None)`: the fused
  op ``rhea_kernels::turn_scores_and_tiers`` (`op.py`): one pass of the turn-scoring kernel
  (Triton on CUDA, C++ entry ``csrc/score_tiers.cpp`` on CPU) returning scores and tiers.
  This is the call a retrieval policy makes once per turn (Rhea's heuristic context
  retrieval): ``scores, tiers = turn_scores_and_tiers(vq[None], vk[None], tau_low, tau_high,
  center=center)`` replaces ``turn_scores(...)`` followed by ``score_tiers(...)``.
"""
from __future__ import annotations

import torch

from rhea_kernels import _checks
from rhea_kernels.score_tiers import reference
from rhea_kernels.score_tiers.op import OP
from rhea_kernels.score_tiers.reference import DROP, LATENT, RAW


def score_tiers(scores: torch.Tensor, tau_low: float, tau_high: float) -> torch.Tensor:
    """int8 tiers from scores: 2 RAW if s > tau_high, 0 DROP if s < tau_low, else 1 LATENT.

    Example:
        >>> score_tiers(torch.tensor([[0.1, 0.6, 0.9, float("-inf")]]), 0.5, 0.8).tolist()
        [[0, 1, 2, 0]]
    """
    _checks.check_taus(tau_low, tau_high)
    return reference.score_tiers(scores, tau_low, tau_high)


def turn_scores_and_tiers(vq: torch.Tensor, vk: torch.Tensor, tau_low: float, tau_high: float,
                          turn_mask: torch.Tensor | None = None,
                          center: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`turn_scores` and `score_tiers` in one pass: returns (fp32 scores [B, T], int8 tiers [B, T]).

    Same inputs and checks as `rhea_kernels.turn_scores` plus the thresholds
    (``tau_low <= tau_high``, not NaN). The tiers equal ``score_tiers(scores, tau_low, tau_high)``
    exactly (thresholds compared in fp32 on every path). Not differentiable.

    Example:
        >>> s, t = turn_scores_and_tiers(torch.randn(1, 4, 64), torch.randn(1, 9, 4, 64), 0.1, 0.3)
        >>> t.dtype
        torch.int8
    """
    _checks.check_turn_scores(vq, vk, turn_mask, center)
    _checks.check_taus(tau_low, tau_high)
    return torch.ops.rhea_kernels.turn_scores_and_tiers(vq, vk, turn_mask, center, float(tau_low), float(tau_high))


__all__ = ["DROP", "LATENT", "OP", "RAW", "score_tiers", "turn_scores_and_tiers"]
