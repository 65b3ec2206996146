"""Triton turn scoring: one pass over vk, fused normalisation, max and tiering.

Program (b, t-block) loads the query rows once per d-chunk and streams the BLOCK_T x nk
latent rows of its turns exactly once, accumulating dot products (tl.dot) and squared
norms together; the cosine max over (nq, nk) and the tier are computed in registers.
Semantics: rhea_kernels/reference.py (zero vectors score 0, masked turns -inf / tier 0).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

EPS = tl.constexpr(1e-12)  # same norm floor as the reference


@triton.jit
def _turn_scores_kernel(
    VQ, VK, MASK, CENTER, SCORES, TIERS,
    T, NQ, NK, D,
    s_qb, s_qi, s_kb, s_kt, s_kj,
    tau_low, tau_high,
    HAS_MASK: tl.constexpr, HAS_CENTER: tl.constexpr, WRITE_TIERS: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # int64 batch offset: a server batch (64 x 512 x 8 x 4096) passes 2**31 elements.
    b = tl.program_id(0).to(tl.int64)
    tb = tl.program_id(1)
    offs_t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_q = tl.arange(0, BLOCK_Q)
    t_ok = offs_t < T
    q_ok = offs_q < NQ

    # Query norms first (nq x d is tiny next to the turns' nk x d rows).
    q_sq = tl.zeros([BLOCK_Q], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        q = tl.load(VQ + b * s_qb + offs_q[:, None] * s_qi + offs_d[None, :],
                    mask=q_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        if HAS_CENTER:
            c = tl.load(CENTER + offs_d, mask=d_ok, other=0.0).to(tl.float32)
            q = tl.where(q_ok[:, None] & d_ok[None, :], q - c[None, :], 0.0)
        q_sq += tl.sum(q * q, axis=1)
    inv_q = 1.0 / tl.maximum(tl.sqrt_rn(q_sq), EPS)

    best = tl.full([BLOCK_T], float("-inf"), dtype=tl.float32)
    for j in range(0, NK):
        dots = tl.zeros([BLOCK_T, BLOCK_Q], dtype=tl.float32)
        k_sq = tl.zeros([BLOCK_T], dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            d_ok = offs_d < D
            k = tl.load(VK + b * s_kb + offs_t[:, None] * s_kt + j * s_kj + offs_d[None, :],
                        mask=t_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            q = tl.load(VQ + b * s_qb + offs_q[:, None] * s_qi + offs_d[None, :],
                        mask=q_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            if HAS_CENTER:
                c = tl.load(CENTER + offs_d, mask=d_ok, other=0.0).to(tl.float32)
                k = tl.where(t_ok[:, None] & d_ok[None, :], k - c[None, :], 0.0)
                q = tl.where(q_ok[:, None] & d_ok[None, :], q - c[None, :], 0.0)
            k_sq += tl.sum(k * k, axis=1)
            # fp32 operands, full fp32 precision: scores near the thresholds must not flip tiers.
            dots += tl.dot(k, tl.trans(q), input_precision="ieee")
        inv_k = 1.0 / tl.maximum(tl.sqrt_rn(k_sq), EPS)
        cos = dots * inv_k[:, None] * inv_q[None, :]
        cos = tl.where(q_ok[None, :], cos, float("-inf"))
        best = tl.maximum(best, tl.max(cos, axis=1))

    if HAS_MASK:
        keep = tl.load(MASK + b * T + offs_t, mask=t_ok, other=0) != 0
        best = tl.where(keep, best, float("-inf"))
    tl.store(SCORES + b * T + offs_t, best, mask=t_ok)
    if WRITE_TIERS:
        tier = tl.where(best > tau_high, 2, tl.where(best < tau_low, 0, 1)).to(tl.int8)
        tl.store(TIERS + b * T + offs_t, tier, mask=t_ok)


def launch_config(nq: int, d: int) -> dict:
    """Block sizes: tl.dot needs every dim >= 16; BLOCK_D caps register use for large d."""
    return dict(BLOCK_T=16, BLOCK_Q=max(16, triton.next_power_of_2(nq)),
                BLOCK_D=min(128, max(16, triton.next_power_of_2(d))))


def turn_scores_triton(vq, vk, turn_mask=None, center=None, tau_low=0.0, tau_high=0.0, with_tiers=False):
    """Launch the kernel; returns (scores fp32 [B, T], tiers int8 [B, T] or None). Inputs pre-validated."""
    B, T, NK, D = vk.shape
    NQ = vq.shape[1]
    vq = vq.contiguous()
    vk = vk.contiguous()
    scores = torch.empty(B, T, dtype=torch.float32, device=vk.device)
    tiers = torch.empty(B, T, dtype=torch.int8, device=vk.device) if with_tiers else scores
    mask = turn_mask.to(torch.uint8).contiguous() if turn_mask is not None else scores
    cen = center.contiguous() if center is not None else scores
    cfg = launch_config(NQ, D)
    grid = (B, triton.cdiv(T, cfg["BLOCK_T"]))
    _turn_scores_kernel[grid](
        vq, vk, mask, cen, scores, tiers, T, NQ, NK, D,
        vq.stride(0), vq.stride(1), vk.stride(0), vk.stride(1), vk.stride(2),
        float(tau_low), float(tau_high),
        HAS_MASK=turn_mask is not None, HAS_CENTER=center is not None, WRITE_TIERS=with_tiers, **cfg,
    )
    return scores, (tiers if with_tiers else None)
