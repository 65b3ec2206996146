"""Triton prefix-anchored flash attention (forward and backward).

Flash-attention-2 structure (online softmax, LSE saved for the backward). Keys below
prefix_len[b] carry +beta and are visible to every query: the forward walks the prefix
blocks first (the only place the bias and the "always visible" rule are applied), then
the causal body blocks up to the diagonal, so cost matches plain causal flash attention
plus at most the prefix blocks above the diagonal. GQA reads kv head h // (H // Hkv)
without repeating K/V; the dK/dV kernel loops over the query heads of its group.
Semantics: rhea_kernels/anchored_attention/reference.py. The CUDA implementation of
``rhea_kernels::anchored_attention_fwd`` / ``_bwd`` (registered in
rhea_kernels/anchored_attention/op.py).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton import knobs

# (BLOCK_M, BLOCK_N) per kernel: plain FA2 choices, no autotune (see benchmarks/kernel_ops.py).
FWD_BLOCKS = (64, 64)
DKDV_BLOCKS = (32, 64)
DQ_BLOCKS = (64, 32)

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _fwd_kernel(
    Q, K, V, PL, O, LSE,
    sm_scale, beta, N, H, GROUP,
    s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_ob, s_oh, s_on,
    D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    h = bh % H
    kvh = h // GROUP
    P = tl.minimum(tl.maximum(tl.load(PL + b).to(tl.int32), 0), N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    m_ok = offs_m < N
    q = tl.load(Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qn + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:  # the interpreter's bf16 tl.dot is wrong: compute in fp32 there
        q = q.to(tl.float32)
    k_base = K + b * s_kb + kvh * s_kh
    v_base = V + b * s_vb + kvh * s_vh
    qk_scale = sm_scale * LOG2E  # exp2 domain
    beta2 = beta * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Prefix blocks: +beta on keys < P, which every query sees.
    p_end = tl.cdiv(P, BLOCK_N) * BLOCK_N
    for start_n in range(0, p_end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        kt = tl.load(k_base + offs_n[None, :] * s_kn + offs_d[:, None], mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_base + offs_n[:, None] * s_vn + offs_d[None, :], mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            kt = kt.to(tl.float32)
            v = v.to(tl.float32)
        in_p = offs_n < P
        s = tl.dot(q, kt, input_precision=DOT_PREC) * qk_scale + tl.where(in_p, beta2, 0.0)[None, :]
        if CAUSAL:
            vis = in_p[None, :] | (offs_n[None, :] <= offs_m[:, None])
        else:
            vis = n_ok[None, :]
        s = tl.where(vis & n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
        m_i = m_new

    # Body blocks: plain causal attention (no bias), up to the diagonal.
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, N)
    else:
        hi = N
    for start_n in range(p_end, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        kt = tl.load(k_base + offs_n[None, :] * s_kn + offs_d[:, None], mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_base + offs_n[:, None] * s_vn + offs_d[None, :], mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            kt = kt.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, kt, input_precision=DOT_PREC) * qk_scale
        if CAUSAL:
            vis = (offs_n[None, :] <= offs_m[:, None]) & n_ok[None, :]
        else:
            vis = n_ok[None, :]
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
        m_i = m_new

    # Padded rows (offs_m >= N) are never stored; guard their l_i against log(0).
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    tl.store(O + b * s_ob + h * s_oh + offs_m[:, None] * s_on + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])
    tl.store(LSE + bh * N + offs_m, (m_i + tl.log2(l_safe)) * LN2, mask=m_ok)


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, PL, DO, LSE, DELTA, DK, DV,
    sm_scale, beta, N, H, GROUP,
    s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn,
    D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # Q, DO share q's strides; DK, DV share k's/v's strides (all contiguous).
    pid_n = tl.program_id(0)
    bk = tl.program_id(1).to(tl.int64)
    HKV = H // GROUP
    b = bk // HKV
    kvh = bk % HKV
    P = tl.minimum(tl.maximum(tl.load(PL + b).to(tl.int32), 0), N)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    n_ok = offs_n < N
    kv_mask = n_ok[:, None] & d_ok[None, :]
    k = tl.load(K + b * s_kb + kvh * s_kh + offs_n[:, None] * s_kn + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + b * s_vb + kvh * s_vh + offs_n[:, None] * s_vn + offs_d[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    in_p = offs_n < P
    qk_scale = sm_scale * LOG2E
    bias2 = tl.where(in_p, beta * LOG2E, 0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    # Prefix keys are seen by every query; body keys only by queries at or after them.
    lo = 0
    if CAUSAL:
        if start_n >= P:
            lo = (start_n // BLOCK_M) * BLOCK_M
    for g in range(0, GROUP):
        h = kvh * GROUP + g
        q_base = Q + b * s_qb + h * s_qh
        do_base = DO + b * s_qb + h * s_qh
        row_base = (b * H + h) * N
        for start_m in range(lo, N, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            m_ok = offs_m < N
            qt = tl.load(q_base + offs_m[None, :] * s_qn + offs_d[:, None], mask=m_ok[None, :] & d_ok[:, None], other=0.0)
            do = tl.load(do_base + offs_m[:, None] * s_qn + offs_d[None, :], mask=m_ok[:, None] & d_ok[None, :], other=0.0)
            if UPCAST:
                qt = qt.to(tl.float32)
                do = do.to(tl.float32)
            lse2 = tl.load(LSE + row_base + offs_m, mask=m_ok, other=0.0) * LOG2E
            delta = tl.load(DELTA + row_base + offs_m, mask=m_ok, other=0.0)
            st = tl.dot(k, qt, input_precision=DOT_PREC) * qk_scale + bias2[:, None]  # [BLOCK_N, BLOCK_M]
            if CAUSAL:
                vis = in_p[:, None] | (offs_n[:, None] <= offs_m[None, :])
            else:
                vis = n_ok[:, None]
            vis = vis & n_ok[:, None] & m_ok[None, :]
            pt = tl.where(vis, tl.exp2(st - lse2[None, :]), 0.0)
            dv += tl.dot(pt.to(do.dtype), do, input_precision=DOT_PREC)
            dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)
            dst = pt * (dpt - delta[None, :])
            dk += tl.dot(dst.to(qt.dtype), tl.trans(qt), input_precision=DOT_PREC)
    out_off = b * s_kb + kvh * s_kh + offs_n[:, None] * s_kn + offs_d[None, :]
    tl.store(DK + out_off, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + b * s_vb + kvh * s_vh + offs_n[:, None] * s_vn + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=kv_mask)


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, PL, DO, LSE, DELTA, DQ,
    sm_scale, beta, N, H, GROUP,
    s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn,
    D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, DOT_PREC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    h = bh % H
    kvh = h // GROUP
    P = tl.minimum(tl.maximum(tl.load(PL + b).to(tl.int32), 0), N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    m_ok = offs_m < N
    q_off = b * s_qb + h * s_qh + offs_m[:, None] * s_qn + offs_d[None, :]
    q_mask = m_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + q_off, mask=q_mask, other=0.0)
    do = tl.load(DO + q_off, mask=q_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse2 = tl.load(LSE + bh * N + offs_m, mask=m_ok, other=0.0) * LOG2E
    delta = tl.load(DELTA + bh * N + offs_m, mask=m_ok, other=0.0)
    k_base = K + b * s_kb + kvh * s_kh
    v_base = V + b * s_vb + kvh * s_vh
    qk_scale = sm_scale * LOG2E
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if CAUSAL:
        hi = tl.maximum(tl.minimum((pid_m + 1) * BLOCK_M, N), P)
    else:
        hi = N
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        kt = tl.load(k_base + offs_n[None, :] * s_kn + offs_d[:, None], mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        vt = tl.load(v_base + offs_n[None, :] * s_vn + offs_d[:, None], mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        if UPCAST:
            kt = kt.to(tl.float32)
            vt = vt.to(tl.float32)
        in_p = offs_n < P
        s = tl.dot(q, kt, input_precision=DOT_PREC) * qk_scale + tl.where(in_p, beta * LOG2E, 0.0)[None, :]
        if CAUSAL:
            vis = in_p[None, :] | (offs_n[None, :] <= offs_m[:, None])
        else:
            vis = m_ok[:, None]
        vis = vis & n_ok[None, :] & m_ok[:, None]
        p = tl.where(vis, tl.exp2(s - lse2[:, None]), 0.0)
        dp = tl.dot(do, vt, input_precision=DOT_PREC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(kt.dtype), tl.trans(kt), input_precision=DOT_PREC)
    tl.store(DQ + q_off, (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


def _common(q: torch.Tensor, k: torch.Tensor):
    D = q.shape[-1]
    upcast = q.device.type != "cuda" or knobs.runtime.interpret
    # fp32 inputs keep full precision (no TF32); fp16/bf16 use the tensor cores.
    prec = "ieee" if (upcast or q.dtype == torch.float32) else "tf32"
    return dict(D=D, UPCAST=upcast, DOT_PREC=prec, BLOCK_D=max(16, triton.next_power_of_2(D)))


def anchored_attention_fwd_triton(q, k, v, prefix_len, beta: float, causal: bool, scale: float):
    """Returns (out [B, H, N, D] in q.dtype, lse fp32 [B, H, N]). Inputs pre-validated."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, N, _ = q.shape
    group = H // k.shape[1]
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device)
    BLOCK_M, BLOCK_N = FWD_BLOCKS
    grid = (triton.cdiv(N, BLOCK_M), B * H)
    _fwd_kernel[grid](
        q, k, v, prefix_len, out, lse, float(scale), float(beta), N, H, group,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        CAUSAL=causal, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, **_common(q, k),
    )
    return out, lse


def anchored_attention_bwd_triton(grad_out, q, k, v, out, lse, prefix_len, beta: float, causal: bool, scale: float):
    """Returns (dq, dk, dv) in the dtypes of q, k, v. Inputs pre-validated."""
    q, k, v, grad_out = q.contiguous(), k.contiguous(), v.contiguous(), grad_out.contiguous()
    B, H, N, _ = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    # delta_i = dO_i . O_i: one elementwise pass, left to torch.
    delta = (grad_out.float() * out.float()).sum(-1).contiguous()
    lse = lse.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    common = _common(q, k)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    _bwd_dkdv_kernel[(triton.cdiv(N, DKDV_BLOCKS[1]), B * Hkv)](
        q, k, v, prefix_len, grad_out, lse, delta, dk, dv, float(scale), float(beta), N, H, group, *strides,
        CAUSAL=causal, BLOCK_M=DKDV_BLOCKS[0], BLOCK_N=DKDV_BLOCKS[1], **common,
    )
    _bwd_dq_kernel[(triton.cdiv(N, DQ_BLOCKS[0]), B * H)](
        q, k, v, prefix_len, grad_out, lse, delta, dq, float(scale), float(beta), N, H, group, *strides,
        CAUSAL=causal, BLOCK_M=DQ_BLOCKS[0], BLOCK_N=DQ_BLOCKS[1], **common,
    )
    return dq, dk, dv


def default_scale(D: int) -> float:
    return 1.0 / math.sqrt(D)
