"""Triton turn scoring: one pass over vk, fused normalisation, max and tiering.

The (turn, latent) rows of vk are flattened into one tile: program (b, t-block) owns
BLOCK_T turns and walks their nk latents BLOCK_J at a time as BLOCK_T*BLOCK_J rows, so
each d-chunk is one `tl.dot` of those rows against the (centred) query rows, with the
rows' and the queries' squared norms accumulated in the same pass. vk is read exactly
once, the query once per d-chunk per row tile; the cosine max over (nq, nk) and the tier
stay in registers. BLOCK_T is chosen so the grid covers the GPU's SMs (`launch_config`).

Variants, all chosen by the config (`launch_config`, or `config=` from the tile sweep in
benchmarks/turn_scores_tiles.py):

* ``NATIVE_DOT``: fp16/bf16 rows and queries go into `tl.dot` as they are (tensor cores,
  fp32 accumulation) instead of being widened to fp32 for an ``input_precision="ieee"``
  dot (CUDA-core FMAs). A product of two 16-bit floats is exact in fp32, so only the
  accumulation order differs. Not for fp32 inputs (that would be TF32) and not with a
  centre (the centred values are not 16-bit numbers any more).
* ``num_stages`` (config key, not a kernel argument; Triton's default 3 when absent): the
  software-pipelining depth of the d-loop (loads issued that many steps ahead, cp.async
  into shared memory; compiled PTX checked in tests/kernels/test_triton_compile.py).
* ``SPLIT_D`` (split-K): d is cut into SPLIT_D chunks (multiples of BLOCK_D) and grid axis 2
  runs one program per (b, t-block, chunk); in that mode `_turn_scores_kernel` writes the
  chunk's partial dots [rows, nq] and partial squared norms (rows and queries) to an fp32
  workspace passed as SCORES, and `_turn_scores_reduce_kernel` sums the partials in a fixed
  order (deterministic, so the fused scores still equal the plain ones), normalises, takes the
  max over (nq, nk), masks and tiers. For one conversation (few rows, large d), where one
  program per row tile leaves most of the GPU's memory bandwidth idle.

Semantics: rhea_kernels/turn_scores/reference.py (zero vectors score 0, masked turns -inf)
and rhea_kernels/score_tiers/reference.py (tiers; masked turns tier 0). This kernel is the
CUDA implementation of ``rhea_kernels::turn_scores`` and, with WRITE_TIERS, of
``rhea_kernels::turn_scores_and_tiers`` (registered in rhea_kernels/*/op.py).
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

EPS = tl.constexpr(1e-12)  # same norm floor as the reference


@triton.jit
def _row_dots(VK, rows, r_ok, q_base, q_ok, CENTER, d_lo, d_hi, D,
              HAS_CENTER: tl.constexpr, NATIVE_DOT: tl.constexpr,
              ROWS: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr):
    """Dots of ROWS vk rows with the BLOCK_Q query rows over d in [d_lo, d_hi) (BLOCK_D steps),
    and both sides' squared norms over that range: (dots [ROWS, BLOCK_Q], k_sq [ROWS], q_sq [BLOCK_Q])."""
    dots = tl.zeros([ROWS, BLOCK_Q], dtype=tl.float32)
    k_sq = tl.zeros([ROWS], dtype=tl.float32)
    q_sq = tl.zeros([BLOCK_Q], dtype=tl.float32)
    for d0 in range(d_lo, d_hi, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        k = tl.load(VK + rows[:, None] + offs_d[None, :], mask=r_ok[:, None] & d_ok[None, :], other=0.0)
        q = tl.load(q_base + offs_d[None, :], mask=q_ok[:, None] & d_ok[None, :], other=0.0)
        if NATIVE_DOT:
            # 16-bit operands straight into the tensor cores, fp32 accumulation: each
            # product is exact in fp32. The norms are summed in fp32 from the same values.
            kf = k.to(tl.float32)
            qf = q.to(tl.float32)
            k_sq += tl.sum(kf * kf, axis=1)
            q_sq += tl.sum(qf * qf, axis=1)
            dots = tl.dot(k, tl.trans(q), dots, out_dtype=tl.float32)
        else:
            k = k.to(tl.float32)
            q = q.to(tl.float32)
            if HAS_CENTER:
                c = tl.load(CENTER + offs_d, mask=d_ok, other=0.0).to(tl.float32)
                k = tl.where(r_ok[:, None] & d_ok[None, :], k - c[None, :], 0.0)
                q = tl.where(q_ok[:, None] & d_ok[None, :], q - c[None, :], 0.0)
            k_sq += tl.sum(k * k, axis=1)
            q_sq += tl.sum(q * q, axis=1)
            # fp32 operands, full fp32 precision: scores near the thresholds must not flip tiers.
            dots += tl.dot(k, tl.trans(q), input_precision="ieee")
    return dots, k_sq, q_sq


@triton.jit
def _tile(tb, T, NQ, BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Index vectors of t-block `tb`: its turns, the query slots, and row r of the flattened tile =
    latent (j0 + r % BLOCK_J) of turn (tb * BLOCK_T + r // BLOCK_J)."""
    offs_t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_q = tl.arange(0, BLOCK_Q)
    offs_r = tl.arange(0, BLOCK_T * BLOCK_J)
    return offs_t, offs_q, offs_t < T, offs_q < NQ, tb * BLOCK_T + offs_r // BLOCK_J, offs_r % BLOCK_J


@triton.jit
def _fold_best(best, dots, k_sq, inv_q, q_ok, r_ok, BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr):
    """best[t] = max(best[t], max over the tile's rows of turn t and the valid queries of the cosine)."""
    inv_k = 1.0 / tl.maximum(tl.sqrt_rn(k_sq), EPS)
    cos = dots * inv_k[:, None] * inv_q[None, :]
    cos = tl.where(q_ok[None, :] & r_ok[:, None], cos, float("-inf"))
    row_best = tl.max(cos, axis=1)
    return tl.maximum(best, tl.max(tl.reshape(row_best, [BLOCK_T, BLOCK_J]), axis=1))


@triton.jit
def _turn_epilogue(best, offs_t, t_ok, b, T, MASK, SCORES, TIERS, tau_low, tau_high,
                   HAS_MASK: tl.constexpr, WRITE_TIERS: tl.constexpr):
    if HAS_MASK:
        keep = tl.load(MASK + b * T + offs_t, mask=t_ok, other=0) != 0
        best = tl.where(keep, best, float("-inf"))
    tl.store(SCORES + b * T + offs_t, best, mask=t_ok)
    if WRITE_TIERS:
        tier = tl.where(best > tau_high, 2, tl.where(best < tau_low, 0, 1)).to(tl.int8)
        tl.store(TIERS + b * T + offs_t, tier, mask=t_ok)


@triton.jit
def _turn_scores_kernel(
    VQ, VK, MASK, CENTER, SCORES, TIERS,
    T, NQ, NK, D,
    s_qb, s_qi, s_kb, s_kt, s_kj,
    tau_low, tau_high,
    HAS_MASK: tl.constexpr, HAS_CENTER: tl.constexpr, WRITE_TIERS: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
    NATIVE_DOT: tl.constexpr = False, SPLIT_D: tl.constexpr = 1,
    B=1, D_CHUNK=0,
):
    """Program (b, t-block[, s]). SPLIT_D == 1: the whole pass, scores (and tiers) out.

    SPLIT_D > 1 (split-K, first half; grid axis 2 = the SPLIT_D chunks of D_CHUNK columns):
    SCORES is the fp32 workspace instead, holding the chunk's partial dots [S, B, T, NK, NQ],
    then the rows' partial squared norms [S, B, T, NK], then the queries' [S, B, NQ] (written by
    the t-block-0 programs); MASK/TIERS are not read. `_turn_scores_reduce_kernel` finishes.
    """
    # int64 batch offset: a server batch (64 x 512 x 8 x 4096) passes 2**31 elements.
    b = tl.program_id(0).to(tl.int64)
    tb = tl.program_id(1)
    offs_t, offs_q, t_ok, q_ok, r_t, r_j = _tile(tb, T, NQ, BLOCK_T, BLOCK_J, BLOCK_Q)
    q_base = VQ + b * s_qb + offs_q[:, None] * s_qi

    if SPLIT_D == 1:
        best = tl.full([BLOCK_T], float("-inf"), dtype=tl.float32)
        for j0 in range(0, NK, BLOCK_J):
            rows = b * s_kb + r_t.to(tl.int64) * s_kt + (j0 + r_j) * s_kj
            r_ok = (r_t < T) & (j0 + r_j < NK)
            # Every pass walks all of d, so its q_sq is the query's whole squared norm (the
            # queries are in registers anyway: no separate pass over vq).
            dots, k_sq, q_sq = _row_dots(VK, rows, r_ok, q_base, q_ok, CENTER, 0, D, D, HAS_CENTER, NATIVE_DOT,
                                         BLOCK_T * BLOCK_J, BLOCK_Q, BLOCK_D)
            inv_q = 1.0 / tl.maximum(tl.sqrt_rn(q_sq), EPS)
            best = _fold_best(best, dots, k_sq, inv_q, q_ok, r_ok, BLOCK_T, BLOCK_J)
        _turn_epilogue(best, offs_t, t_ok, b, T, MASK, SCORES, TIERS, tau_low, tau_high, HAS_MASK, WRITE_TIERS)
    else:
        s = tl.program_id(2)
        d_lo = s * D_CHUNK
        d_hi = tl.minimum(d_lo + D_CHUNK, D)
        n_rows = (b * 0 + SPLIT_D * B) * T * NK  # rows of the workspace, int64 (B, T may be constexpr 1s)
        P_KSQ = SCORES + n_rows * NQ
        P_QSQ = P_KSQ + n_rows
        sb = s * B + b  # (split, batch) slab of the workspace (int64: b is)
        q_sq = tl.zeros([BLOCK_Q], dtype=tl.float32)
        for j0 in range(0, NK, BLOCK_J):
            rows = b * s_kb + r_t.to(tl.int64) * s_kt + (j0 + r_j) * s_kj
            r_ok = (r_t < T) & (j0 + r_j < NK)
            dots, k_sq, q_sq = _row_dots(VK, rows, r_ok, q_base, q_ok, CENTER, d_lo, d_hi, D, HAS_CENTER,
                                         NATIVE_DOT, BLOCK_T * BLOCK_J, BLOCK_Q, BLOCK_D)
            w_row = (sb * T + r_t.to(tl.int64)) * NK + (j0 + r_j)  # row index into [S, B, T, NK]
            tl.store(P_KSQ + w_row, k_sq, mask=r_ok)
            tl.store(SCORES + w_row[:, None] * NQ + offs_q[None, :], dots, mask=r_ok[:, None] & q_ok[None, :])
        # q_sq of the last pass covers the whole chunk; one t-block writes it.
        if tb == 0:
            tl.store(P_QSQ + sb * NQ + offs_q, q_sq, mask=q_ok)


@triton.jit
def _turn_scores_reduce_kernel(
    P_DOT, P_KSQ, P_QSQ, MASK, SCORES, TIERS,
    B, T, NQ, NK, SPLIT,
    tau_low, tau_high,
    HAS_MASK: tl.constexpr, WRITE_TIERS: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """Split-K, second half: sum the SPLIT partials (in order s = 0, 1, ...), normalise, max
    over (nq, nk), mask, tier. Program (b, t-block)."""
    b = tl.program_id(0).to(tl.int64)
    tb = tl.program_id(1)
    offs_t, offs_q, t_ok, q_ok, r_t, r_j = _tile(tb, T, NQ, BLOCK_T, BLOCK_J, BLOCK_Q)

    q_sq = tl.zeros([BLOCK_Q], dtype=tl.float32)
    for s in range(0, SPLIT):
        q_sq += tl.load(P_QSQ + (s * B + b) * NQ + offs_q, mask=q_ok, other=0.0)
    inv_q = 1.0 / tl.maximum(tl.sqrt_rn(q_sq), EPS)

    best = tl.full([BLOCK_T], float("-inf"), dtype=tl.float32)
    for j0 in range(0, NK, BLOCK_J):
        r_ok = (r_t < T) & (j0 + r_j < NK)
        dots = tl.zeros([BLOCK_T * BLOCK_J, BLOCK_Q], dtype=tl.float32)
        k_sq = tl.zeros([BLOCK_T * BLOCK_J], dtype=tl.float32)
        for s in range(0, SPLIT):
            w_row = ((s * B + b) * T + r_t.to(tl.int64)) * NK + (j0 + r_j)
            k_sq += tl.load(P_KSQ + w_row, mask=r_ok, other=0.0)
            dots += tl.load(P_DOT + w_row[:, None] * NQ + offs_q[None, :], mask=r_ok[:, None] & q_ok[None, :],
                            other=0.0)
        best = _fold_best(best, dots, k_sq, inv_q, q_ok, r_ok, BLOCK_T, BLOCK_J)

    _turn_epilogue(best, offs_t, t_ok, b, T, MASK, SCORES, TIERS, tau_low, tau_high, HAS_MASK, WRITE_TIERS)


MAX_ROWS = 256  # rows per tile: BLOCK_T * BLOCK_J
MIN_ROWS = 16   # tl.dot needs every dim >= 16
NATIVE_MIN_ROWS = 64  # the native-dot tile never shrinks below this (H100 sweep: 64-row tiles beat 16/32 rows)
SPLIT_ROWS = 64  # rows per tile on the split-K path
SPLIT_MIN_CHUNK = 768  # split-K: at least this many d-columns per program (H100: d=1536 -> 2, 4096 -> 5)
SPLIT_MAX_ROWS_PER_SM = 64  # split-K when a call has fewer (turn, latent) rows than this per SM ...
SPLIT_MIN_D = 1024  # ... and d is at least this


def native_dot_ok(dtype: torch.dtype, has_center: bool) -> bool:
    """Whether NATIVE_DOT is exact in the products: 16-bit inputs, no centre."""
    return dtype in (torch.float16, torch.bfloat16) and not has_center


def launch_config(nq: int, d: int, nk: int = 8, batch: int = 1, turns: int = 1, n_sm: int = 132,
                  dtype: torch.dtype = torch.float32, has_center: bool = False, allow_split: bool = True) -> dict:
    """Block sizes, variant and the grid's fill (the keys `turn_scores_triton`'s `config` takes).

    BLOCK_J covers nk (up to 32 latents at a time); BLOCK_T starts at MAX_ROWS / BLOCK_J
    and halves while the grid (batch x turns / BLOCK_T programs) is short of the GPU's SMs:
    for the native 16-bit dot, every SM and tiles of at least NATIVE_MIN_ROWS rows; for the
    fp32 ``ieee`` dot, half the SMs and MIN_ROWS rows (measured on fp32 inputs; the sweep below is bf16).

    NATIVE_DOT for fp16/bf16 inputs without a centre (exact products, tensor cores); the
    fp32 ``ieee`` dot otherwise. Split-K (SPLIT_D > 1) when the call has fewer than
    SPLIT_MAX_ROWS_PER_SM (turn, latent) rows per SM and d >= SPLIT_MIN_D: SPLIT_ROWS-row
    tiles, and d cut into chunks of at least SPLIT_MIN_CHUNK columns until there are about
    4 programs per SM (`allow_split=False`: never). No num_stages (Triton's default, 3).
    Set from the H100 sweep (benchmarks/results/turn_scores_tiles_h100.json.gz, bf16): the rules
    before it were 2-35% off that sweep's best at the 8 shapes of docs/guides/kernels.md.
    """
    block_j = min(32, max(1, triton.next_power_of_2(nk)))
    block_q = max(16, triton.next_power_of_2(nq))
    block_d = min(64, max(16, triton.next_power_of_2(d)))
    cfg = dict(BLOCK_Q=block_q, BLOCK_D=block_d, NATIVE_DOT=native_dot_ok(dtype, has_center), SPLIT_D=1)
    if allow_split and batch * turns * nk < SPLIT_MAX_ROWS_PER_SM * n_sm and d >= SPLIT_MIN_D:
        block_t = max(1, SPLIT_ROWS // block_j)
        programs = batch * triton.cdiv(turns, block_t)
        split = min(d // SPLIT_MIN_CHUNK, triton.cdiv(4 * n_sm, programs))
        split = split_chunk(d, split, block_d)[1]
        if split > 1:
            return dict(cfg, BLOCK_T=block_t, BLOCK_J=block_j, SPLIT_D=split)
    block_t = max(1, MAX_ROWS // block_j)
    if cfg["NATIVE_DOT"]:  # fill every SM, tiles of at least 64 rows (H100 sweep, bf16)
        min_t, fill = max(1, NATIVE_MIN_ROWS // block_j), n_sm
    else:  # the fp32 ieee dot: half the SMs, tiles down to 16 rows (measured on fp32 inputs)
        min_t, fill = max(1, MIN_ROWS // block_j), n_sm // 2
    while block_t > min_t and batch * triton.cdiv(turns, block_t) < fill:
        block_t //= 2
    return dict(cfg, BLOCK_T=block_t, BLOCK_J=block_j)


def split_chunk(d: int, split: int, block_d: int) -> tuple[int, int]:
    """(columns per chunk, a multiple of block_d; chunks actually used) for SPLIT_D=split."""
    chunk = triton.cdiv(triton.cdiv(d, max(1, split)), block_d) * block_d
    return chunk, triton.cdiv(d, chunk)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # the interpreter: any value gives the same result


# Tiles a GPU could not hold (shared memory differs: 227 KiB on an H100, 163 on an A100,
# 99 on an L4): (device, default config) -> the smaller config that launched there.
_SHRUNK: dict = {}


def _launch(vq, vk, mask, cen, scores, tiers, tau_low, tau_high, has_mask, has_center, with_tiers, cfg,
            num_warps, warmup=False):
    """Launch (or with `warmup`, only compile) the kernel(s) of one call."""
    def go(kernel, grid, *args, **kw):
        if warmup:
            kernel.warmup(*args, grid=grid, **kw)
        else:
            kernel[grid](*args, **kw)

    B, T, NK, D = vk.shape
    NQ = vq.shape[1]
    cfg = dict(cfg)
    if cfg.get("num_stages") is None:
        cfg.pop("num_stages", None)  # Triton's default (3 on CUDA)
    strides = (vq.stride(0), vq.stride(1), vk.stride(0), vk.stride(1), vk.stride(2))
    if cfg.get("SPLIT_D", 1) <= 1:
        go(_turn_scores_kernel, (B, triton.cdiv(T, cfg["BLOCK_T"])),
            vq, vk, mask, cen, scores, tiers, T, NQ, NK, D, *strides, float(tau_low), float(tau_high),
            HAS_MASK=has_mask, HAS_CENTER=has_center, WRITE_TIERS=with_tiers, num_warps=num_warps, **cfg,
            B=B, D_CHUNK=0,
        )
        return
    chunk, n_split = split_chunk(D, cfg["SPLIT_D"], cfg["BLOCK_D"])
    n_rows = n_split * B * T * NK
    work = torch.empty(n_rows * (NQ + 1) + n_split * B * NQ, dtype=torch.float32, device=vk.device)
    grid_t = triton.cdiv(T, cfg["BLOCK_T"])
    go(_turn_scores_kernel, (B, grid_t, n_split),
        vq, vk, mask, cen, work, tiers, T, NQ, NK, D, *strides, 0.0, 0.0,
        HAS_MASK=False, HAS_CENTER=has_center, WRITE_TIERS=False, num_warps=num_warps,
        **dict(cfg, SPLIT_D=n_split), B=B, D_CHUNK=chunk,
    )
    go(_turn_scores_reduce_kernel, (B, grid_t),
        work, work[n_rows * NQ:], work[n_rows * (NQ + 1):], mask, scores, tiers, B, T, NQ, NK, n_split,
        float(tau_low), float(tau_high), HAS_MASK=has_mask, WRITE_TIERS=with_tiers, BLOCK_T=cfg["BLOCK_T"],
        BLOCK_J=cfg["BLOCK_J"], BLOCK_Q=cfg["BLOCK_Q"], num_warps=4,
    )


def turn_scores_triton(vq, vk, turn_mask=None, center=None, tau_low=0.0, tau_high=0.0, with_tiers=False,
                       config=None, num_warps=4):
    """Launch the kernel; returns (scores fp32 [B, T], tiers int8 [B, T] or None). Inputs pre-validated.

    `config` (the keys `launch_config` returns: BLOCK_T, BLOCK_J, BLOCK_Q, BLOCK_D, and
    optionally NATIVE_DOT (default False), SPLIT_D (default 1) and num_stages) and
    `num_warps` override the defaults (benchmarks/turn_scores_tiles.py sweeps them); an
    explicit config that does not fit the GPU raises OutOfResources, the default one is
    halved in BLOCK_T until it fits. NATIVE_DOT with fp32 inputs or a centre raises ValueError.
    """
    B, T, NK, D = vk.shape
    NQ = vq.shape[1]
    vq = vq.contiguous()
    vk = vk.contiguous()
    scores = torch.empty(B, T, dtype=torch.float32, device=vk.device)
    tiers = torch.empty(B, T, dtype=torch.int8, device=vk.device) if with_tiers else scores
    if B * T == 0:
        return scores, (tiers if with_tiers else None)
    mask = turn_mask.to(torch.uint8).contiguous() if turn_mask is not None else scores
    cen = center.contiguous() if center is not None else scores
    cfg = config or launch_config(NQ, D, NK, B, T, _sm_count(vk.device), vk.dtype, center is not None)
    if not config and vk.dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        # Triton's interpreter (3.x, at least to 3.9) multiplies a bf16 tl.dot's raw uint16
        # bits; the default keeps the fp32 dot there (tests patch the interpreter to run this path).
        cfg = dict(cfg, NATIVE_DOT=False)
    if cfg.get("NATIVE_DOT", False) and not native_dot_ok(vk.dtype, center is not None):
        raise ValueError(f"NATIVE_DOT needs fp16/bf16 inputs and no centre (got {vk.dtype}, "
                         f"center={'given' if center is not None else None})")
    key = None if config else (str(vk.device), tuple(cfg.items()), num_warps)
    cfg = _SHRUNK.get(key, cfg)
    while True:
        try:
            _launch(vq, vk, mask, cen, scores, tiers, tau_low, tau_high, turn_mask is not None, center is not None,
                    with_tiers, cfg, num_warps)
            break
        except OutOfResources:
            if key is None or cfg["BLOCK_T"] * cfg["BLOCK_J"] <= MIN_ROWS or cfg["BLOCK_T"] == 1:
                raise
            cfg = _SHRUNK[key] = dict(cfg, BLOCK_T=cfg["BLOCK_T"] // 2)
    return scores, (tiers if with_tiers else None)


def precompile(vq, vk, turn_mask=None, center=None, with_tiers=False, config=None, num_warps=4) -> None:
    """Compile the kernel(s) a `turn_scores_triton` call with these arguments would launch, without
    launching them (`kernel.warmup`). Inside ``triton.runtime._async_compile.AsyncCompileMode`` the
    compiles run on its executor: benchmarks/turn_scores_tiles.py compiles its candidates in parallel."""
    B, T, NK, D = vk.shape
    if B * T == 0:
        return
    vq, vk = vq.contiguous(), vk.contiguous()
    scores = torch.empty(B, T, dtype=torch.float32, device=vk.device)
    tiers = torch.empty(B, T, dtype=torch.int8, device=vk.device) if with_tiers else scores
    mask = turn_mask.to(torch.uint8).contiguous() if turn_mask is not None else scores
    cen = center.contiguous() if center is not None else scores
    cfg = config or launch_config(vq.shape[1], D, NK, B, T, _sm_count(vk.device), vk.dtype, center is not None)
    _launch(vq, vk, mask, cen, scores, tiers, 0.0, 0.0, turn_mask is not None, center is not None, with_tiers, cfg,
            num_warps, warmup=True)
