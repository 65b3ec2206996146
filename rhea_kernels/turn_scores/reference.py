"""Plain-torch ground truth of ``rhea_kernels::turn_scores`` (the Triton and C++ kernels are tested against it).

``score[b, t] = max_{i, j} cos(vq[b, i] - c, vk[b, t, j] - c)`` where ``c`` is the
optional ``center`` (zeros when absent) and ``cos(x, y) = x.y / (max(|x|, EPS) *
max(|y|, EPS))``. A zero (or all-centre) vector therefore has cosine 0 with everything
instead of NaN. Masked turns (``turn_mask[b, t] == False``) score -inf.
"""
from __future__ import annotations

import torch

# Norm floor: vectors shorter than this are treated as having this length, so a zero
# vector yields cosine 0 (not NaN). Small enough not to matter for real latents.
EPS = 1e-12


def turn_scores(
    vq: torch.Tensor,
    vk: torch.Tensor,
    turn_mask: torch.Tensor | None = None,
    center: torch.Tensor | None = None,
) -> torch.Tensor:
    """Max cosine similarity of each past turn's latents against the query latents.

    Args:
        vq: query latents [B, nq, d].
        vk: stored turn latents [B, T, nk, d].
        turn_mask: optional bool [B, T]; False marks a turn that does not exist (score -inf).
        center: optional [d] vector subtracted from vq and vk before normalising.

    Returns:
        fp32 scores [B, T].

    Example:
        >>> vq, vk = torch.randn(1, 8, 64), torch.randn(1, 5, 8, 64)
        >>> turn_scores(vq, vk).shape
        torch.Size([1, 5])
    """
    q = vq.float()
    k = vk.float()
    if center is not None:
        q = q - center.float()
        k = k - center.float()
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(EPS)
    k = k / k.norm(dim=-1, keepdim=True).clamp_min(EPS)
    sim = torch.einsum("bid,btjd->btij", q, k)  # [B, T, nq, nk]
    scores = sim.flatten(2).amax(dim=-1)
    if turn_mask is not None:
        scores = scores.masked_fill(~turn_mask.bool(), float("-inf"))
    return scores
