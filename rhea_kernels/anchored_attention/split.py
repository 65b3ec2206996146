"""Prefix-anchored attention as two plain flash-attention calls merged by log-sum-exp ("split").

Query i sees key j iff ``j < P`` (the prefix, logit ``+beta``) or ``j <= i`` (causal), with
``P = prefix_len[b]``. So, per group of batch rows with the same P:

* pass A: every query against the prefix keys ``K[:, :, :P]``, non-causal. ``+beta`` is a
  constant shift of those logits: the output ``O_A`` is unchanged, ``lse_A' = lse_A + beta``;
* pass B: queries ``[P, N)`` against keys ``[P, N)``, causal (equal lengths, so the causal
  diagonal is unambiguous). With ``causal=False``: every query against keys ``[P, N)``;
* merge (`merge`, one fused Triton pass on CUDA): ``lse = logaddexp(lse_A', lse_B)`` (rows
  below P: ``lse_A'`` only), ``O = exp(lse_A' - lse) O_A + exp(lse_B - lse) O_B``.

Backward (the ring-attention identity, exact): each pass's flash backward is called with the
MERGED output and MERGED lse (pass A with ``lse - beta``: its logits lack the bias), so its
recomputed probabilities are the full softmax's and its ``rowsum(dO * O)`` the full one;
``dQ = dQ_A + dQ_B`` (rows >= P for the causal pass B), ``dK = cat(dK_A, dK_B)`` along N,
likewise dV.

The forward returns (out in q's dtype, fp32 lse [B, H, N], natural log, bias included): the
same convention as the Triton kernel and the reference's ``return_lse``, so a forward of one
route and a backward of the other agree (``op.py`` still picks both with `eligible`).

The aten flash ops, as read in the PyTorch sources (torch 2.11 on the GPU, 2.13 here):

* ``aten::_scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal,
  return_debug_mask, *, scale) -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
  rng_state, unused, debug_attn_mask)`` (2.13 names the 7th/8th outputs rng_state/unused,
  older releases philox_seed/philox_offset; same positions). q/k/v are [B, H, N, D]; the op
  transposes to [B, N, H, D] views and calls ``mha_fwd``
  (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp), which requires only
  ``stride(-1) == 1`` (so N-slices of a [B, H, N, D] tensor are fine), fp16/bf16, D % 8 == 0,
  D <= 256, sm80+, and ``num_heads % num_heads_k == 0``: GQA is native (K/V with fewer heads
  are read in place, never repeated). ``logsumexp`` is fp32 ``[B, H, N_q]`` contiguous
  (``at::empty({batch_size, num_heads, seqlen_q})``), natural log of the scaled logits; a
  zero-length key side gives ``+inf`` (never called here: empty passes are skipped).
* ``aten::_scaled_dot_product_flash_attention_backward(grad_out, q, k, v, out, logsumexp,
  cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *,
  scale)``. Torch's own autograd formula (tools/autograd/derivatives.yaml,
  ``_scaled_dot_product_flash_attention``) passes the forward's own outputs back. The CUDA
  forward returns undefined tensors (Python ``None``) for cum_seq_q/k, and
  ``_flash_attention_backward`` (cuda/attention_backward.cu) takes the varlen path iff
  ``cum_seq_q.defined()``: so pass ``None``; max_q / max_k are the dense lengths. ``mha_bwd``
  reads philox_seed only ``if (is_dropout)``: with dropout 0 any tensor does (a [2] / []
  int64 placeholder here). It ``.contiguous()``s grad_out and out (as [B, N, H, D] views)
  but reads ``softmax_lse.data_ptr()`` as a contiguous [B, H, N_q] block with no stride
  check, so every lse handed to it is made contiguous here. GQA: dK/dV come back with Hkv
  heads (mha_bwd sums the expanded per-query-head gradients).
* CPU: ``aten::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, *,
  attn_mask, scale) -> (output, logsumexp)`` and ``..._for_cpu_backward(grad_out, q, k, v,
  out, logsumexp, dropout_p, is_causal, *, attn_mask, scale)``: fp32/fp16/bf16, any D, GQA
  accepted; its logsumexp is [B, H, N] with [B, N, H] strides (made contiguous here). This
  backend exists so the whole algorithm is tested on CPU against the reference.
"""
from __future__ import annotations

import math
import warnings
import weakref

import torch

try:  # the fused merge; everything else here works without Triton (CPU, or no Triton installed)
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton ships with CUDA torch wheels
    triton = None

MERGE_BLOCK_ELEMS = 4096  # rows x padded D per merge program


# --------------------------------------------------------------- eligibility

def _flash_enabled() -> bool:
    available = getattr(torch.backends.cuda, "is_flash_attention_available", lambda: True)()
    return bool(available) and torch.backends.cuda.flash_sdp_enabled()


def eligible(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether the split route can serve these inputs on this machine (CUDA flash attention).

    Deterministic in (q, k) and the process's settings, so the op's forward and backward make
    the same choice: CUDA (not ROCm), fp16/bf16 with k of q's dtype, 4-D, same B/N/D with
    H % Hkv == 0, D % 8 == 0 and D <= 256 (D <= 128 off sm80/sm90: FA2's D > 128 backward
    needs their shared memory), compute capability >= 8.0, flash SDPA available and enabled
    (``torch.backends.cuda.flash_sdp_enabled()``), and no CUDA-graph capture in progress
    (the route reads prefix_len on the host).
    """
    if q.device.type != "cuda" or k.device != q.device or torch.version.hip is not None:
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or q.dim() != 4 or k.dim() != 4:
        return False
    B, H, N, D = q.shape
    if k.shape[0] != B or k.shape[2] != N or k.shape[3] != D or k.shape[1] == 0 or H % k.shape[1]:
        return False
    if B == 0 or N == 0 or D % 8 or D > 256:
        return False
    cc = torch.cuda.get_device_capability(q.device)
    if cc < (8, 0) or (D > 128 and cc not in ((8, 0), (9, 0))):
        return False
    if not _flash_enabled() or torch.cuda.is_current_stream_capturing():
        return False
    return True


# ------------------------------------------------------------ flash backends

# Native GQA in the CUDA flash op (see the module docstring). Should a build refuse it, the
# first GQA call falls back to repeating K/V for the call (and summing dK/dV per group), once,
# with a warning.
_GQA_NATIVE = {"cuda": True, "cpu": True}


def _expand(t: torch.Tensor, group: int) -> torch.Tensor:
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def _fold(t: torch.Tensor, group: int) -> torch.Tensor:
    if group == 1:
        return t
    B, H, N, D = t.shape
    return t.reshape(B, H // group, group, N, D).sum(2)


def _gqa_failed(kind: str, exc: RuntimeError) -> None:
    """Re-raise unless `exc` is the flash op refusing the head counts; else fall back, warned once."""
    if isinstance(exc, torch.OutOfMemoryError) or "head" not in str(exc).lower():
        raise exc
    _GQA_NATIVE[kind] = False
    warnings.warn(f"anchored_attention split route: the {kind} flash op refused K/V with fewer heads than Q "
                  f"({str(exc)[:120]}); repeating K/V per call from now on", RuntimeWarning, stacklevel=3)


def _flash_fwd_raw(q, k, v, causal: bool, scale: float):
    if q.device.type == "cuda":
        res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
        return res[0], res[1]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    return out, lse


def _flash_fwd(q, k, v, causal: bool, scale: float):
    """Plain flash attention of q [B, H, Nq, D] over k, v [B, Hkv, Nk, D]: (out [B, H, Nq, D] in
    q's dtype, fp32 lse [B, H, Nq] contiguous, natural log). Equal Nq and Nk when causal."""
    kind = q.device.type
    group = q.shape[1] // k.shape[1]
    if group > 1 and _GQA_NATIVE.get(kind, True):
        try:
            out, lse = _flash_fwd_raw(q, k, v, causal, scale)
        except RuntimeError as exc:
            _gqa_failed(kind, exc)
        else:
            return out, lse.float().contiguous()
    out, lse = _flash_fwd_raw(q, _expand(k, group), _expand(v, group), causal, scale)
    return out, lse.float().contiguous()


def _flash_bwd_raw(do, q, k, v, o, lse, causal: bool, scale: float):
    if q.device.type == "cuda":
        nq, nk = q.shape[2], k.shape[2]
        seed = torch.empty(2, dtype=torch.int64, device=q.device)  # unread: dropout_p == 0
        offset = torch.empty((), dtype=torch.int64, device=q.device)
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            do, q, k, v, o, lse, None, None, nq, nk, 0.0, causal, seed, offset, scale=scale)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        do, q, k, v, o, lse, 0.0, causal, scale=scale)


def _flash_bwd(do, q, k, v, o, lse, causal: bool, scale: float):
    """(dq, dk, dv) of `_flash_fwd` given its (or any consistent) out and fp32 lse [B, H, Nq]."""
    kind = q.device.type
    lse = lse.float().contiguous()  # mha_bwd reads it as a packed [B, H, Nq] block
    group = q.shape[1] // k.shape[1]
    if group > 1 and _GQA_NATIVE.get(kind, True):
        try:
            return _flash_bwd_raw(do, q, k, v, o, lse, causal, scale)
        except RuntimeError as exc:
            _gqa_failed(kind, exc)
    dq, dk, dv = _flash_bwd_raw(do, q, _expand(k, group), _expand(v, group), o, lse, causal, scale)
    return dq, _fold(dk, group), _fold(dv, group)


# ------------------------------------------------------------ cuDNN backend
#
# Measured on an H100 (torch 2.11.0+cu130, docs/guides/kernels.md): SDPA without a mask picks cuDNN's
# fused attention there, ~580 TFLOP/s forward at N=16k, D=128, while the flash op above (FA2)
# runs ~330, as does the Triton kernel: the split route over FA2 was 1.7-2.1x SDPA. The same two
# passes over cuDNN's op keep the ceiling's kernel. ``aten::_scaled_dot_product_cudnn_attention(
# q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, return_debug_mask, *, scale)``
# returns (out, logsumexp [B, H, Nq, 1] fp32, ...); its backward takes (grad_out, q, k, v, out,
# logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k,
# dropout_p, is_causal, *, scale), the undefined tensors passed as None (as torch's autograd
# formula passes the forward's). What cuDNN accepts (GQA, strides, lengths) and the lse's units
# are checked on the first call per (device, dtype, D, heads) against the flash route on small
# random inputs (`_cudnn_usable`); a refusal or a mismatch keeps that signature on flash.

_CUDNN: dict = {}


def _cudnn_fwd(q, k, v, causal: bool, scale: float):
    res = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    out, lse = res[0], res[1]
    return out, lse.reshape(q.shape[0], q.shape[1], q.shape[2]).float().contiguous()


def _cudnn_bwd(do, q, k, v, o, lse, causal: bool, scale: float):
    B, H, Nq, _ = q.shape
    empty = torch.empty(0, dtype=torch.int64, device=q.device)  # philox: unread with dropout 0
    lse4 = lse.float().contiguous().reshape(B, H, Nq, 1)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        do.contiguous(), q, k, v, o.contiguous(), lse4, empty, empty, None, None, None, Nq, k.shape[2], 0.0, causal,
        scale=scale)
    return dq, dk, dv


def _cudnn_usable(q, k) -> bool:
    """Whether cuDNN's attention serves this (device, dtype, D, H, Hkv) correctly: one check per
    signature, against the flash route, forward and backward, on random inputs with a prefix
    ending mid-block (both passes and the merge run)."""
    key = (str(q.device), q.dtype, q.shape[-1], q.shape[1], k.shape[1])
    if key in _CUDNN:
        return _CUDNN[key]
    ok, why = False, ""
    if not getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)():
        why = "cuDNN SDPA is disabled"
    else:
        try:
            # the first call may come from a no_grad / inference_mode forward (decoding): the check
            # runs its own backward regardless
            with torch.inference_mode(False), torch.enable_grad():
                g = torch.Generator(device=q.device).manual_seed(0)
                H, Hkv, D, N, P = q.shape[1], k.shape[1], q.shape[-1], 384, 100
                t = [torch.randn(1, h, N, D, device=q.device, dtype=q.dtype, generator=g) for h in (H, Hkv, Hkv, H)]
                pl = torch.tensor([P], device=q.device)
                res = {}
                for name in ("flash", "cudnn"):
                    leaves = [x.clone().requires_grad_() for x in t[:3]]
                    out = attention(*leaves, pl, 0.5, True, None, name)
                    out.backward(t[3])
                    res[name] = [out.detach().float()] + [x.grad.float() for x in leaves]
            errs = [((a - b).norm() / b.norm().clamp_min(1e-6)).item() for a, b in zip(res["cudnn"], res["flash"])]
            ok = all(e < 2e-2 for e in errs)
            why = "" if ok else f"differs from the flash route (relative errors out/dq/dk/dv {errs})"
        except RuntimeError as exc:  # refused (shape, layout, version): stay on flash
            why = f"refused: {str(exc).splitlines()[0][:160]}"
    _CUDNN[key] = ok
    if not ok:
        warnings.warn(f"anchored_attention split route: cuDNN attention not used for {key} ({why}); "
                      "the passes run on the flash op", RuntimeWarning, stacklevel=3)
    return ok


def pass_backend(q, k) -> str:
    """Which attention op runs the split route's passes: ``cudnn`` where it checks out on this
    GPU for this signature (`_cudnn_usable`), else ``flash`` (also on CPU, for tests)."""
    if q.device.type != "cuda" or q.shape[-1] > 128 or torch.cuda.is_current_stream_capturing():
        return "flash"
    return "cudnn" if _cudnn_usable(q, k) else "flash"


def _pass_fwd(backend: str, q, k, v, causal: bool, scale: float):
    if backend == "cudnn":
        return _cudnn_fwd(q, k, v, causal, scale)
    return _flash_fwd(q, k, v, causal, scale)


def _pass_bwd(backend: str, do, q, k, v, o, lse, causal: bool, scale: float):
    if backend == "cudnn":
        return _cudnn_bwd(do, q, k, v, o, lse, causal, scale)
    return _flash_bwd(do, q, k, v, o, lse, causal, scale)


# --------------------------------------------------------------------- merge

if triton is not None:
    @triton.jit
    def _merge_kernel(
        OA, LA, OB, LB, O, L,
        beta, N, H, ROW0,
        s_ab, s_ah, s_an, s_bb, s_bh, s_bn, s_ob, s_oh, s_on,
        s_lab, s_lah, s_lbb, s_lbh,
        D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        # One program: BLOCK_M rows of one (batch, head). Pass A covers rows [0, N), pass B rows
        # [ROW0, N) (its row r is row ROW0 + r); rows below ROW0 take pass A alone.
        pid_m = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        b = bh // H
        h = bh % H
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        m_ok = offs_m < N
        d_ok = offs_d < D
        in_b = m_ok & (offs_m >= ROW0)
        rb = offs_m - ROW0
        la = tl.load(LA + b * s_lab + h * s_lah + offs_m, mask=m_ok, other=0.0) + beta
        lb = tl.load(LB + b * s_lbb + h * s_lbh + rb, mask=in_b, other=float("-inf"))
        mx = tl.maximum(la, lb)
        lse = mx + tl.log(tl.exp(la - mx) + tl.exp(lb - mx))
        wa = tl.exp(la - lse)
        wb = tl.exp(lb - lse)
        oa = tl.load(OA + b * s_ab + h * s_ah + offs_m[:, None] * s_an + offs_d[None, :],
                     mask=m_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        ob = tl.load(OB + b * s_bb + h * s_bh + rb[:, None] * s_bn + offs_d[None, :],
                     mask=in_b[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        out = wa[:, None] * oa + wb[:, None] * ob
        tl.store(O + b * s_ob + h * s_oh + offs_m[:, None] * s_on + offs_d[None, :], out.to(O.dtype.element_ty),
                 mask=m_ok[:, None] & d_ok[None, :])
        tl.store(L + bh * N + offs_m, lse, mask=m_ok)


def merge_config(D: int) -> dict:
    block_d = max(16, triton.next_power_of_2(D))
    return dict(BLOCK_M=max(1, MERGE_BLOCK_ELEMS // block_d), BLOCK_D=block_d)


def merge_triton(o_a, lse_a, o_b, lse_b, row0: int, beta: float):
    """The fused merge: one read of O_A and O_B, one write of O (q's dtype) and fp32 lse.

    o_a [B, H, N, D], lse_a [B, H, N] (pass A, without beta); o_b [B, H, N - row0, D], lse_b
    [B, H, N - row0] (pass B's rows row0..N-1). Any strides with a unit last stride (lse: unit
    stride along N). Runs under TRITON_INTERPRET=1 on CPU tensors too.
    """
    B, H, N, D = o_a.shape
    out = torch.empty(B, H, N, D, dtype=o_a.dtype, device=o_a.device)
    lse = torch.empty(B, H, N, dtype=torch.float32, device=o_a.device)
    if o_a.stride(-1) != 1:
        o_a = o_a.contiguous()
    if o_b.stride(-1) != 1:
        o_b = o_b.contiguous()
    lse_a = lse_a if lse_a.stride(-1) == 1 else lse_a.contiguous()
    lse_b = lse_b if lse_b.stride(-1) == 1 else lse_b.contiguous()
    cfg = merge_config(D)
    grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * H)
    _merge_kernel[grid](
        o_a, lse_a, o_b, lse_b, out, lse, float(beta), N, H, int(row0),
        *o_a.stride()[:3], *o_b.stride()[:3], *out.stride()[:3], *lse_a.stride()[:2], *lse_b.stride()[:2],
        D=D, num_warps=4, **cfg,
    )
    return out, lse


def merge_torch(o_a, lse_a, o_b, lse_b, row0: int, beta: float):
    """`merge_triton` in plain torch (CPU; CUDA without Triton), computed in fp32."""
    lse = lse_a.float() + beta
    out = o_a.float().clone()
    la = lse[:, :, row0:]
    lm = torch.logaddexp(la, lse_b.float())
    out[:, :, row0:] = (torch.exp(la - lm)[..., None] * out[:, :, row0:]
                        + torch.exp(lse_b.float() - lm)[..., None] * o_b.float())
    lse[:, :, row0:] = lm
    return out.to(o_a.dtype), lse.contiguous()


def merge(o_a, lse_a, o_b, lse_b, row0: int, beta: float):
    if o_a.device.type == "cuda" and triton is not None:
        return merge_triton(o_a, lse_a, o_b, lse_b, row0, beta)
    return merge_torch(o_a, lse_a, o_b, lse_b, row0, beta)


# ------------------------------------------------------------ the two passes

#: cuDNN refused a pass with one query and one key on the H100 ("s_q = s_kv = 1 is not supported",
#: a prefix ending one row before N); a group whose passes have a side shorter than this runs both
#: passes on the flash op (short passes cost nothing either way)
CUDNN_MIN_LEN = 16


def _group_backend(backend: str, N: int, P: int, causal: bool) -> str:
    """The pass backend for one prefix length: `backend`, or flash where a pass would be tiny."""
    if backend != "cudnn":
        return backend
    sides = [N] if P in (0, N) else [N, P, N - P]  # pass A: N x P; pass B: (N-P or N) x (N-P)
    return "cudnn" if min(sides) >= CUDNN_MIN_LEN else "flash"


def _fwd_group(q, k, v, P: int, beta: float, causal: bool, scale: float, backend: str = "flash"):
    N = q.shape[2]
    backend = _group_backend(backend, N, P, causal)
    if P == 0:  # no prefix: plain (causal) attention
        return _pass_fwd(backend, q, k, v, causal, scale)
    o_a, lse_a = _pass_fwd(backend, q, k[:, :, :P], v[:, :, :P], False, scale)
    if P == N:  # all keys are prefix keys
        return o_a, lse_a + beta
    if causal:  # only queries at or after P see body keys
        o_b, lse_b = _pass_fwd(backend, q[:, :, P:], k[:, :, P:], v[:, :, P:], True, scale)
        return merge(o_a, lse_a, o_b, lse_b, P, beta)
    o_b, lse_b = _pass_fwd(backend, q, k[:, :, P:], v[:, :, P:], False, scale)
    return merge(o_a, lse_a, o_b, lse_b, 0, beta)


def _bwd_group(do, q, k, v, o, lse, P: int, beta: float, causal: bool, scale: float, backend: str = "flash"):
    N = q.shape[2]
    backend = _group_backend(backend, N, P, causal)
    if P == 0:
        return _pass_bwd(backend, do, q, k, v, o, lse, causal, scale)
    # Pass A's logits lack +beta: hand it lse - beta, so exp(s - (lse - beta)) is the full softmax.
    dq, dk_a, dv_a = _pass_bwd(backend, do, q, k[:, :, :P], v[:, :, :P], o, lse - beta, False, scale)
    if P == N:
        return dq, dk_a, dv_a
    if causal:
        dq_b, dk_b, dv_b = _pass_bwd(backend, do[:, :, P:], q[:, :, P:], k[:, :, P:], v[:, :, P:], o[:, :, P:],
                                      lse[:, :, P:], True, scale)
        dq[:, :, P:] += dq_b
    else:
        dq_b, dk_b, dv_b = _pass_bwd(backend, do, q, k[:, :, P:], v[:, :, P:], o, lse, False, scale)
        dq += dq_b
    return dq, torch.cat([dk_a, dk_b], dim=2), torch.cat([dv_a, dv_b], dim=2)


#: id(prefix_len tensor) -> (weakref to it, its _version, its values): the transformers hook hands
#: the same tensor to every layer of a forward, so a CUDA prefix_len is read (a device sync) once
#: per forward instead of once per layer. Checked by identity (the weakref) and version (in-place
#: writes bump it), so a new tensor at a recycled address is never mistaken for the old one.
_HOST_VALUES: dict = {}


def _host_values(t: torch.Tensor) -> list:
    if t.device.type == "cpu":
        return t.reshape(-1).tolist()
    hit = _HOST_VALUES.get(id(t))
    if hit is not None and hit[0]() is t and hit[1] == t._version:
        return hit[2]
    values = t.reshape(-1).tolist()
    if len(_HOST_VALUES) > 64:  # dead entries of earlier forwards
        for key in [k for k, v in _HOST_VALUES.items() if v[0]() is None]:
            del _HOST_VALUES[key]
    _HOST_VALUES[id(t)] = (weakref.ref(t), t._version, values)
    return values


def _groups(prefix_len, B: int, N: int) -> dict[int, list[int]]:
    """P -> batch rows with that (clamped) prefix length; one host read of prefix_len per tensor."""
    if isinstance(prefix_len, int):
        values = [prefix_len] * B
    else:
        values = _host_values(prefix_len)
        if len(values) == 1 and B > 1:
            values = values * B
    groups: dict[int, list[int]] = {}
    for b, p in enumerate(values):
        groups.setdefault(min(max(int(p), 0), N), []).append(b)
    return groups


def _rows(rows: list[int], device):
    """A slice when the rows are consecutive (a view), else an index tensor (a gather)."""
    if rows == list(range(rows[0], rows[-1] + 1)):
        return slice(rows[0], rows[-1] + 1)
    return torch.tensor(rows, dtype=torch.long, device=device)


def _take(t: torch.Tensor, sel):
    return t[sel] if isinstance(sel, slice) else t.index_select(0, sel)


def _put(dst: torch.Tensor, sel, src: torch.Tensor) -> None:
    if isinstance(sel, slice):
        dst[sel] = src
    else:
        dst.index_copy_(0, sel, src)


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def split_fwd(q, k, v, prefix_len, beta: float, causal: bool = True, scale: float | None = None,
              backend: str | None = None):
    """(out [B, H, N, D] in q's dtype, fp32 lse [B, H, N] with the bias) by the split route.

    q [B, H, N, D], k/v [B, Hkv, N, D] (H % Hkv == 0), prefix_len int [B] (or an int), values
    clamped to [0, N]. On CUDA the inputs must pass `eligible`; on CPU the CPU flash op runs.
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, N, D = q.shape
    beta, scale = float(beta), _scale(q, scale)
    backend = backend or pass_backend(q, k)
    groups = _groups(prefix_len, B, N)
    if len(groups) == 1:
        (P,) = groups
        out, lse = _fwd_group(q, k, v, P, beta, causal, scale, backend)
        return out.contiguous(), lse.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device)
    for P, rows in groups.items():
        sel = _rows(rows, q.device)
        o_g, l_g = _fwd_group(_take(q, sel), _take(k, sel), _take(v, sel), P, beta, causal, scale, backend)
        _put(out, sel, o_g)
        _put(lse, sel, l_g)
    return out, lse


def _bnhd(t: torch.Tensor) -> torch.Tensor:
    """The same [B, H, N, D] values stored as [B, N, H, D]: what the flash backward reads
    without copying (it makes its transposed grad_out/out views contiguous)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def split_bwd(grad_out, q, k, v, out, lse, prefix_len, beta: float, causal: bool = True,
              scale: float | None = None, backend: str | None = None):
    """(dq, dk, dv) in the dtypes of q, k, v, from the forward's out and fp32 lse (bias included:
    the convention of `split_fwd`, the Triton kernel and the reference's ``return_lse``)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, N, D = q.shape
    beta, scale = float(beta), _scale(q, scale)
    backend = backend or pass_backend(q, k)
    do, o = grad_out.to(q.dtype), out.to(q.dtype)
    if q.device.type == "cuda" and backend == "flash":
        do, o = _bnhd(do), _bnhd(o)
    lse = lse.float().contiguous()
    groups = _groups(prefix_len, B, N)
    if len(groups) == 1:
        (P,) = groups
        dq, dk, dv = _bwd_group(do, q, k, v, o, lse, P, beta, causal, scale, backend)
        return dq.contiguous(), dk.contiguous(), dv.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for P, rows in groups.items():
        sel = _rows(rows, q.device)
        grads = _bwd_group(_take(do, sel), _take(q, sel), _take(k, sel), _take(v, sel), _take(o, sel),
                           _take(lse, sel), P, beta, causal, scale, backend)
        for dst, src in zip((dq, dk, dv), grads):
            _put(dst, sel, src)
    return dq, dk, dv


class SplitAnchoredAttention(torch.autograd.Function):
    """Differentiable split route (benchmarks and tests; the op reaches it through op.py)."""

    @staticmethod
    def forward(ctx, q, k, v, prefix_len, beta, causal, scale, backend=None):
        backend = backend or pass_backend(q, k)
        out, lse = split_fwd(q, k, v, prefix_len, beta, causal, scale, backend)
        ctx.save_for_backward(q, k, v, prefix_len, out, lse)
        ctx.args = (beta, causal, scale, backend)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, prefix_len, out, lse = ctx.saved_tensors
        dq, dk, dv = split_bwd(grad_out, q, k, v, out, lse, prefix_len, *ctx.args)
        return dq, dk, dv, None, None, None, None, None


def attention(q, k, v, prefix_len, beta: float, causal: bool = True, scale: float | None = None,
              backend: str | None = None):
    """`anchored_attention` by the split route, differentiable (no input checks: see _checks)."""
    if isinstance(prefix_len, int):
        prefix_len = torch.full((q.shape[0],), prefix_len, dtype=torch.int64, device=q.device)
    return SplitAnchoredAttention.apply(q, k, v, prefix_len, float(beta), bool(causal), _scale(q, scale), backend)
