"""Input validation shared by the public ops: bad input raises ValueError naming the fix."""
from __future__ import annotations

import math
import numbers

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256  # one Triton tile holds a whole head: larger heads would spill registers


DEVICE_TYPES = ("cpu", "cuda")  # the dispatch keys the ops register kernels for


def _device_ok(name: str, t: torch.Tensor) -> None:
    if t.device.type not in DEVICE_TYPES:
        raise ValueError(f"{name} is on {t.device}; rhea_kernels ops run on cpu and cuda: move the tensors there")


def _dtype_ok(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name}.dtype={t.dtype} is not supported; cast to float32, float16 or bfloat16")


def check_turn_scores(vq, vk, turn_mask, center) -> None:
    if not isinstance(vq, torch.Tensor) or vq.dim() != 3:
        raise ValueError(f"vq must be a [B, nq, d] tensor, got shape {tuple(getattr(vq, 'shape', ()))}")
    if not isinstance(vk, torch.Tensor) or vk.dim() != 4:
        raise ValueError(f"vk must be a [B, T, nk, d] tensor, got shape {tuple(getattr(vk, 'shape', ()))}")
    B, nq, d = vq.shape
    if vk.shape[0] != B or vk.shape[3] != d:
        raise ValueError(f"vq {tuple(vq.shape)} and vk {tuple(vk.shape)} must agree on B and d")
    if nq < 1 or vk.shape[2] < 1 or d < 1:
        raise ValueError(f"nq={nq}, nk={vk.shape[2]} and d={d} must all be >= 1")
    _dtype_ok("vq", vq)
    _dtype_ok("vk", vk)
    _device_ok("vk", vk)
    if vq.dtype != vk.dtype:
        raise ValueError(f"vq.dtype={vq.dtype} differs from vk.dtype={vk.dtype}; cast one to the other")
    if vq.device != vk.device:
        raise ValueError(f"vq is on {vq.device} but vk on {vk.device}; move them to one device")
    if turn_mask is not None:
        if tuple(turn_mask.shape) != tuple(vk.shape[:2]):
            raise ValueError(f"turn_mask shape {tuple(turn_mask.shape)} must be [B, T] = {tuple(vk.shape[:2])}")
        if turn_mask.dtype != torch.bool:
            raise ValueError(f"turn_mask.dtype={turn_mask.dtype} must be torch.bool (True = turn exists)")
        if turn_mask.device != vk.device:
            raise ValueError(f"turn_mask is on {turn_mask.device}; move it to {vk.device}")
    if center is not None:
        if tuple(center.shape) != (d,):
            raise ValueError(f"center shape {tuple(center.shape)} must be [d] = ({d},)")
        _dtype_ok("center", center)
        if center.device != vk.device:
            raise ValueError(f"center is on {center.device}; move it to {vk.device}")


def check_taus(tau_low: float, tau_high: float) -> None:
    for name, tau in (("tau_low", tau_low), ("tau_high", tau_high)):
        # numbers.Real: Python and numpy floats/ints (a threshold read from a config or an array)
        if isinstance(tau, bool) or not isinstance(tau, numbers.Real) or math.isnan(tau):
            raise ValueError(f"{name}={tau!r} must be a float (cosine threshold in [-1, 1])")
    if tau_low > tau_high:
        raise ValueError(f"tau_low={tau_low} must be <= tau_high={tau_high}")


def check_attention(q, k, v, prefix_len, beta, scale) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a [B, H, N, D] tensor, got shape {tuple(getattr(t, 'shape', ()))}")
        _dtype_ok(name, t)
    _device_ok("q", q)
    B, H, N, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if k.shape[0] != B or k.shape[2] != N or k.shape[3] != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree on B, N and D "
                         "(decode steps with a KV cache go through rhea_kernels.hf)")
    if k.shape[1] < 1 or H % k.shape[1] != 0:
        raise ValueError(f"query heads H={H} must be a multiple of kv heads Hkv={k.shape[1]}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes {q.dtype}, {k.dtype}, {v.dtype} differ; cast them to one dtype")
    if not (q.device == k.device == v.device == prefix_len.device):
        raise ValueError(f"q, k, v, prefix_len must share a device, got {q.device}, {k.device}, {v.device}, "
                         f"{prefix_len.device}")
    if D > MAX_HEAD_DIM:
        raise ValueError(f"head dim D={D} > {MAX_HEAD_DIM} is not supported")
    if tuple(prefix_len.shape) != (B,):
        raise ValueError(f"prefix_len shape {tuple(prefix_len.shape)} must be [B] = ({B},)")
    if prefix_len.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"prefix_len.dtype={prefix_len.dtype} must be torch.int32 or torch.int64")
    if not isinstance(beta, (int, float)) or not math.isfinite(beta):
        raise ValueError(f"beta={beta!r} must be a finite float")
    if scale is not None and (not isinstance(scale, (int, float)) or not scale > 0):
        raise ValueError(f"scale={scale!r} must be a positive float (or None for 1/sqrt(D))")
    # A value check needs the data on the host: only in eager mode, and only for CPU tensors
    # (a device sync per call would cost more than the attention on small inputs).
    if prefix_len.device.type == "cpu" and not torch.compiler.is_compiling() and B > 0:
        lo, hi = int(prefix_len.min()), int(prefix_len.max())
        if lo < 0 or hi > N:
            raise ValueError(f"prefix_len values must lie in [0, N={N}], got min {lo} and max {hi}")
