"""Turn scoring: the max cosine of each stored turn's latents against the query latents.

Op ``rhea_kernels::turn_scores`` (`op.py`), reference `reference.turn_scores`, Triton kernel
`triton_kernel` (CUDA), C++ entry ``csrc/turn_scores.cpp`` (CPU). The tiers variant is the op
``rhea_kernels::turn_scores_and_tiers`` in `rhea_kernels.score_tiers`.
"""
from __future__ import annotations

import torch

from rhea_kernels import _checks
from rhea_kernels.turn_scores.op import OP


def turn_scores(vq: torch.Tensor, vk: torch.Tensor, turn_mask: torch.Tensor | None = None,
                center: torch.Tensor | None = None) -> torch.Tensor:
    """Score every stored turn against the query: ``max_{i,j} cos(vq[b,i]-c, vk[b,t,j]-c)``.

    Args:
        vq: query latents [B, nq, d] (fp32/fp16/bf16).
        vk: stored turn latents [B, T, nk, d], same dtype.
        turn_mask: optional bool [B, T]; False = no such turn (score -inf).
        center: optional [d] mean latent subtracted from vq and vk before normalising.

    Returns:
        fp32 [B, T]. A zero (after centring) vector has cosine 0 with everything.
        Not differentiable.

    Example:
        >>> turn_scores(torch.randn(2, 8, 576), torch.randn(2, 30, 8, 576)).shape
        torch.Size([2, 30])
    """
    _checks.check_turn_scores(vq, vk, turn_mask, center)
    return torch.ops.rhea_kernels.turn_scores(vq, vk, turn_mask, center)


__all__ = ["OP", "turn_scores"]
