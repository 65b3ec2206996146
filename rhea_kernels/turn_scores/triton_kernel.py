"""Triton turn scoring: one pass over vk, fused normalisation, max and tiering.

The (turn, latent) rows of vk are flattened into one tile: program (b, t-block) owns
BLOCK_T turns and walks their nk latents BLOCK_J at a time as BLOCK_T*BLOCK_J rows, so
each d-chunk is one `tl.dot` of those rows against the (centred) query rows, with the
rows' squared norms accumulated in the same pass. vk is read exactly once, the query
once per d-chunk per row tile; the cosine max over (nq, nk) and the tier stay in
registers. BLOCK_T is chosen so the grid covers the GPU's SMs (`launch_config`).
Semantics: rhea_kernels/turn_scores/reference.py (zero vectors score 0, masked turns -inf)
and rhea_kernels/score_tiers/reference.py (tiers; masked turns tier 0). This kernel is the
CUDA implementation of ``rhea_kernels::turn_scores`` and, with WRITE_TIERS, of
``rhea_kernels::turn_scores_and_tiers`` (registered in rhea_kernels/*/op.py).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

EPS = tl.constexpr(1e-12)  # same norm floor as the reference


@triton.jit
def _turn_scores_kernel(
    VQ, VK, MASK, CENTER, SCORES, TIERS,
    T, NQ, NK, D,
    s_qb, s_qi, s_kb, s_kt, s_kj,
    tau_low, tau_high,
    HAS_MASK: tl.constexpr, HAS_CENTER: tl.constexpr, WRITE_TIERS: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # int64 batch offset: a server batch (64 x 512 x 8 x 4096) passes 2**31 elements.
    b = tl.program_id(0).to(tl.int64)
    tb = tl.program_id(1)
    offs_t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_q = tl.arange(0, BLOCK_Q)
    t_ok = offs_t < T
    q_ok = offs_q < NQ
    # Row r of the tile is latent (j0 + r % BLOCK_J) of turn (tb * BLOCK_T + r // BLOCK_J).
    offs_r = tl.arange(0, BLOCK_T * BLOCK_J)
    r_t = tb * BLOCK_T + offs_r // BLOCK_J
    r_j = offs_r % BLOCK_J
    q_base = VQ + b * s_qb + offs_q[:, None] * s_qi

    # Query norms first (nq x d is tiny next to the turns' nk x d rows).
    q_sq = tl.zeros([BLOCK_Q], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        q = tl.load(q_base + offs_d[None, :], mask=q_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        if HAS_CENTER:
            c = tl.load(CENTER + offs_d, mask=d_ok, other=0.0).to(tl.float32)
            q = tl.where(q_ok[:, None] & d_ok[None, :], q - c[None, :], 0.0)
        q_sq += tl.sum(q * q, axis=1)
    inv_q = 1.0 / tl.maximum(tl.sqrt_rn(q_sq), EPS)

    best = tl.full([BLOCK_T], float("-inf"), dtype=tl.float32)
    for j0 in range(0, NK, BLOCK_J):
        rows = b * s_kb + r_t.to(tl.int64) * s_kt + (j0 + r_j) * s_kj
        r_ok = (r_t < T) & (j0 + r_j < NK)
        dots = tl.zeros([BLOCK_T * BLOCK_J, BLOCK_Q], dtype=tl.float32)
        k_sq = tl.zeros([BLOCK_T * BLOCK_J], dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            d_ok = offs_d < D
            k = tl.load(VK + rows[:, None] + offs_d[None, :],
                        mask=r_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            q = tl.load(q_base + offs_d[None, :], mask=q_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            if HAS_CENTER:
                c = tl.load(CENTER + offs_d, mask=d_ok, other=0.0).to(tl.float32)
                k = tl.where(r_ok[:, None] & d_ok[None, :], k - c[None, :], 0.0)
                q = tl.where(q_ok[:, None] & d_ok[None, :], q - c[None, :], 0.0)
            k_sq += tl.sum(k * k, axis=1)
            # fp32 operands, full fp32 precision: scores near the thresholds must not flip tiers.
            dots += tl.dot(k, tl.trans(q), input_precision="ieee")
        inv_k = 1.0 / tl.maximum(tl.sqrt_rn(k_sq), EPS)
        cos = dots * inv_k[:, None] * inv_q[None, :]
        cos = tl.where(q_ok[None, :] & r_ok[:, None], cos, float("-inf"))
        row_best = tl.max(cos, axis=1)
        best = tl.maximum(best, tl.max(tl.reshape(row_best, [BLOCK_T, BLOCK_J]), axis=1))

    if HAS_MASK:
        keep = tl.load(MASK + b * T + offs_t, mask=t_ok, other=0) != 0
        best = tl.where(keep, best, float("-inf"))
    tl.store(SCORES + b * T + offs_t, best, mask=t_ok)
    if WRITE_TIERS:
        tier = tl.where(best > tau_high, 2, tl.where(best < tau_low, 0, 1)).to(tl.int8)
        tl.store(TIERS + b * T + offs_t, tier, mask=t_ok)


MAX_ROWS = 256  # rows per tile: BLOCK_T * BLOCK_J
MIN_ROWS = 16   # tl.dot needs every dim >= 16


def launch_config(nq: int, d: int, nk: int = 8, batch: int = 1, turns: int = 1, n_sm: int = 132) -> dict:
    """Block sizes and the grid's fill.

    BLOCK_J covers nk (up to 32 latents at a time); BLOCK_T starts at MAX_ROWS / BLOCK_J
    and halves while the grid (batch x turns / BLOCK_T programs) has fewer programs than
    half the GPU's SMs, down to a MIN_ROWS-row tile. On an H100 this rule was within 4% of
    the best of a 28-config sweep at every measured shape
    (benchmarks/results/turn_scores_tiles_h100.json): a session's 512 turns get 128
    programs of 4 turns, a server batch 256-row tiles. BLOCK_D=64 beat 128 at every shape.
    """
    block_j = min(32, max(1, triton.next_power_of_2(nk)))
    block_t = max(1, MAX_ROWS // block_j)
    min_t = max(1, MIN_ROWS // block_j)
    while block_t > min_t and batch * triton.cdiv(turns, block_t) < n_sm // 2:
        block_t //= 2
    return dict(BLOCK_T=block_t, BLOCK_J=block_j, BLOCK_Q=max(16, triton.next_power_of_2(nq)),
                BLOCK_D=min(64, max(16, triton.next_power_of_2(d))))


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # the interpreter: any value gives the same result


# Tiles a GPU could not hold (shared memory differs: 227 KiB on an H100, 163 on an A100,
# 99 on an L4): (device, default config) -> the smaller config that launched there.
_SHRUNK: dict = {}


def turn_scores_triton(vq, vk, turn_mask=None, center=None, tau_low=0.0, tau_high=0.0, with_tiers=False,
                       config=None, num_warps=4):
    """Launch the kernel; returns (scores fp32 [B, T], tiers int8 [B, T] or None). Inputs pre-validated.

    `config` (block sizes, as `launch_config` returns) and `num_warps` override the defaults
    (benchmarks/turn_scores_tiles.py sweeps them); an explicit config that does not fit the
    GPU raises OutOfResources, the default one is halved in BLOCK_T until it fits.
    """
    B, T, NK, D = vk.shape
    NQ = vq.shape[1]
    vq = vq.contiguous()
    vk = vk.contiguous()
    scores = torch.empty(B, T, dtype=torch.float32, device=vk.device)
    tiers = torch.empty(B, T, dtype=torch.int8, device=vk.device) if with_tiers else scores
    mask = turn_mask.to(torch.uint8).contiguous() if turn_mask is not None else scores
    cen = center.contiguous() if center is not None else scores
    cfg = config or launch_config(NQ, D, NK, B, T, _sm_count(vk.device))
    key = None if config else (str(vk.device), tuple(cfg.items()), num_warps)
    cfg = _SHRUNK.get(key, cfg)
    while True:
        try:
            _turn_scores_kernel[(B, triton.cdiv(T, cfg["BLOCK_T"]))](
                vq, vk, mask, cen, scores, tiers, T, NQ, NK, D,
                vq.stride(0), vq.stride(1), vk.stride(0), vk.stride(1), vk.stride(2),
                float(tau_low), float(tau_high),
                HAS_MASK=turn_mask is not None, HAS_CENTER=center is not None, WRITE_TIERS=with_tiers,
                num_warps=num_warps, **cfg,
            )
            break
        except OutOfResources:
            if key is None or cfg["BLOCK_T"] * cfg["BLOCK_J"] <= MIN_ROWS or cfg["BLOCK_T"] == 1:
                raise
            cfg = _SHRUNK[key] = dict(cfg, BLOCK_T=cfg["BLOCK_T"] // 2)
    return scores, (tiers if with_tiers else None)
