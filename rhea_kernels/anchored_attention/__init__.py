"""Prefix-anchored attention: keys below prefix_len[b] get +beta and are visible to every query.

Ops ``rhea_kernels::anchored_attention_fwd`` / ``_bwd`` with autograd (`op.py`), reference
`reference` (materialised, plus the O(N)-memory LSE merge), Triton kernels `triton_kernel`
(CUDA), C++ entry ``csrc/anchored_attention.cpp`` (CPU). `rhea_kernels.hf` wraps it as the
transformers attention function ``"rhea_anchored"``.
"""
from __future__ import annotations

import math

import torch

from rhea_kernels import _checks
from rhea_kernels.anchored_attention.op import BWD, FWD


def anchored_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_len: torch.Tensor | int,
                       beta: float, causal: bool = True, scale: float | None = None) -> torch.Tensor:
    """Attention where the instruction prefix is anchored: keys j < prefix_len[b] get +beta
    and are visible to every query; the rest is ordinary (causal) attention.

    Args:
        q: [B, H, N, D]; k, v: [B, Hkv, N, D] with H % Hkv == 0 (GQA, K/V never repeated).
        prefix_len: int32/int64 [B] (or an int for every row), each in [0, N].
        beta: additive logit bias on prefix keys (0 = plain attention with a visible prefix).
        causal: causal body (default); False = full attention plus the prefix bias.
        scale: softmax scale, default 1/sqrt(D).

    Returns:
        [B, H, N, D] in q's dtype; differentiable w.r.t. q, k, v.

    Example:
        >>> q, k, v = torch.randn(1, 4, 10, 64), torch.randn(1, 1, 10, 64), torch.randn(1, 1, 10, 64)
        >>> anchored_attention(q, k, v, torch.tensor([3]), beta=2.0).shape
        torch.Size([1, 4, 10, 64])
    """
    if isinstance(prefix_len, int):
        prefix_len = torch.full((q.shape[0],), prefix_len, dtype=torch.int64, device=q.device)
    _checks.check_attention(q, k, v, prefix_len, beta, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return torch.ops.rhea_kernels.anchored_attention_fwd(q, k, v, prefix_len, float(beta), bool(causal), scale)[0]


__all__ = ["BWD", "FWD", "anchored_attention"]
