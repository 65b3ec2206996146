"""The shared kernel-test harness: one `OpSpec` per registered op, every backend tested the same way.

An `OpSpec` says how to build an op's arguments for a shape and dtype, what the plain-torch
reference returns for them, and how a backend's outputs are compared with it. The backend
tests (`test_backends.py` on CPU and under the Triton interpreter, `test_cuda.py` on a GPU)
are parametrised over `SPECS` x shapes x dtypes instead of being written once per op and
backend. Shapes are small and odd (the interpreter is 100-350x slower than torch); `big`
shapes run past one tile (C++ and CUDA only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from rhea_kernels import reference as R

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TAU_LOW, TAU_HIGH = 0.05, 0.5
BETA = 1.3
# Relative RMS error allowed vs the fp32 reference, per input dtype.
ATTN_TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.5e-2}


def rel_rms(a: torch.Tensor, b: torch.Tensor, floor: float = 1e-3) -> float:
    """Relative RMS error (flash-linear-attention style), robust to a few rounding outliers.

    The denominator is floored at `floor` so an exactly-zero gradient (e.g. dq when N == 1)
    compares rounding noise against a meaningful scale instead of dividing noise by noise.
    """
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(floor)).item()


# ------------------------------------------------------------------ inputs

# (B, T, nq, nk, d, with_center)
SCORE_SHAPES = [(1, 1, 1, 1, 576, False), (2, 7, 3, 5, 60, True), (2, 33, 8, 2, 60, False), (1, 7, 4, 4, 576, True),
                (1, 3, 2, 70, 32, True),  # nk=70: several latent chunks per turn
                # the C++ dot loop: queries in blocks of 8+4+1, d with a vector tail and past one
                # 768-column pass, rows not on 64-byte boundaries (fp32 read in place, no centre)
                (2, 5, 13, 3, 777, False), (1, 4, 7, 2, 1600, True)]
BIG_SCORE_SHAPES = [(2, 300, 8, 8, 576, True), (1, 40, 3, 96, 60, False)]
CUDA_BIG_SCORE_SHAPES = BIG_SCORE_SHAPES + [(8, 512, 8, 8, 4096, False), (1, 1000, 8, 8, 1536, True)]


def score_inputs(B, T, nq, nk, d, with_center, dtype, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    vq = torch.randn(B, nq, d, generator=g).to(dtype)
    vk = torch.randn(B, T, nk, d, generator=g).to(dtype)
    vk[0, 0] = 0  # a zero turn must score 0, not NaN
    if T > 2:  # make one turn a near-copy of a query so the RAW tier occurs
        vk[-1, 1, 0] = vq[-1, 0] + 0.05 * torch.randn(d, generator=g).to(dtype)
    mask = torch.rand(B, T, generator=g) > 0.3
    center = 0.1 * torch.randn(d, generator=g) if with_center else None
    return tuple(t.to(device) if t is not None else None for t in (vq, vk, mask, center))


# (B, H, Hkv, N, D, prefix_len, causal)
ATTN_SHAPES = [
    (2, 4, 1, 37, 60, [5, 37], True),
    (1, 2, 2, 130, 32, [0], True),
    (2, 4, 2, 1, 64, [0, 1], True),
    (1, 2, 1, 70, 16, [66], False),
    (2, 8, 2, 37, 64, [37, 12], True),
]
# Past one tile: several query blocks (256 rows at N >= 768 on CPU) and key blocks, the prefix
# ending inside a block, P=0, GQA, D=128.
BIG_ATTN_SHAPES = [(2, 4, 2, 1100, 64, [600, 0], True), (1, 2, 1, 700, 32, [100], False),
                   (1, 2, 2, 520, 128, [520], True)]
CUDA_BIG_ATTN_SHAPES = BIG_ATTN_SHAPES + [(1, 4, 1, 4096, 128, [512], True), (1, 2, 2, 2047, 64, [2047], True)]


def attn_inputs(B, H, Hkv, N, D, prefix_len, dtype, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, N, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, N, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, N, D, generator=g).to(dtype)
    grad_out = torch.randn(B, H, N, D, generator=g).to(dtype)
    return tuple(t.to(device) for t in (q, k, v, torch.tensor(prefix_len, dtype=torch.int64), grad_out))


# (leading dims of x, K, N, with bias): rows in register blocks of 8+4+1 (13) and past 16; K with a
# vector tail and past one 768-column pass; N past one 64-row block; a 3-D x (decoding's [B, 1, K])
LINEAR_SHAPES = [((1,), 64, 33, False), ((1,), 64, 33, True), ((8,), 777, 100, True), ((3, 1), 1600, 65, True), ((13,), 96, 130, False),
                 ((2, 9), 40, 7, True), ((1, 1), 5, 1, False)]
# threads split the outputs: Qwen2.5-1.5B's attention and MLP widths at a decoding batch
BIG_LINEAR_SHAPES = [((8, 1), 1536, 2048, True), ((16,), 8960, 300, False)]
CUDA_BIG_LINEAR_SHAPES = BIG_LINEAR_SHAPES + [((8, 1), 1536, 8960, False)]


def linear_inputs(lead, K, N, with_bias, dtype, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, K, generator=g).to(dtype)
    w = (torch.randn(N, K, generator=g) / K ** 0.5).to(dtype)
    b = torch.randn(N, generator=g).to(dtype) if with_bias else None
    return tuple(t.to(device) if t is not None else None for t in (x, w, b))


def _f32(t):
    return t.float() if t is not None and t.is_floating_point() else t


# ------------------------------------------------------------ comparisons

def _check_scores(got, want, atol):
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got.isinf().cpu(), want.isinf().cpu()) and not got.isnan().any()
    finite = ~want.isinf()
    assert torch.allclose(got[finite], want[finite], atol=atol), (got[finite] - want[finite]).abs().max()


def _check_tiers(tiers, scores, want_scores, mask, atol):
    assert tiers.dtype == torch.int8 and tiers.shape == want_scores.shape
    # exactly the rule applied to the op's own scores (thresholds compared in fp32 everywhere) ...
    assert torch.equal(tiers, R.score_tiers(scores, TAU_LOW, TAU_HIGH))
    # ... and the reference's tiers wherever the reference score is not within rounding of a threshold
    clear = ((want_scores - TAU_LOW).abs() > atol) & ((want_scores - TAU_HIGH).abs() > atol)
    assert torch.equal(tiers[clear], R.score_tiers(want_scores, TAU_LOW, TAU_HIGH)[clear])
    assert (tiers[~mask] == 0).all()


def _score_atol(device: str) -> float:
    return 1e-4 if device == "cuda" else 1e-5


@dataclass(frozen=True)
class OpSpec:
    """How to test one op: its arguments, its reference, and the comparison."""

    name: str  # torch.ops.rhea_kernels.<name>
    shapes: list
    big_shapes: list
    cuda_big_shapes: list
    make: Callable  # (shape, dtype, device) -> the op's positional arguments
    expect: Callable  # args -> the reference outputs
    compare: Callable  # (got, want, args, dtype name, device) -> None, asserts
    shape_id: Callable
    interp_dtypes: tuple = ("fp32", "fp16", "bf16")  # the interpreter is slow: what is worth its time

    def call(self, *args):
        return getattr(torch.ops.rhea_kernels, self.name)(*args)


def _turn_scores_compare(got, want, args, dt, device):
    _check_scores(got, want, _score_atol(device))


def _fused_compare(got, want, args, dt, device):
    scores, tiers = got
    _check_scores(scores, want[0], _score_atol(device))
    _check_tiers(tiers, scores, want[0], args[2], _score_atol(device))


def _attn_tol(args, dt):
    return ATTN_TOL[dt] * (2 if args[0].shape[2] >= 1000 else 1)


def _fwd_compare(got, want, args, dt, device):
    out, lse = got
    tol = _attn_tol(args, dt)
    assert out.dtype == args[0].dtype and out.shape == want[0].shape and rel_rms(out, want[0]) < tol
    assert lse.dtype == torch.float32 and rel_rms(lse, want[1]) < 1e-5


def _bwd_compare(got, want, args, dt, device):
    tol = 2 * _attn_tol(args[1:], dt)
    for name, g, w, inp in zip("qkv", got, want, args[1:4]):
        assert g.dtype == inp.dtype and g.shape == inp.shape, f"d{name}"
        assert rel_rms(g, w, floor=0.1) < tol, f"d{name}: {rel_rms(g, w, floor=0.1):.2e}"


def _linear_compare(got, want, args, dt, device):
    assert got.dtype == want.dtype and got.shape == want.shape
    # fp32: the C++ kernel sums in another order than BLAS; other dtypes take F.linear itself
    tol = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 1e-2}[dt]
    assert torch.allclose(got.float(), want.float(), rtol=tol, atol=tol), (got.float() - want.float()).abs().max()


def _score_args(shape, dtype, device):
    return score_inputs(*shape, dtype, device=device)


def _score_id(s):
    return f"B{s[0]}-T{s[1]}-nq{s[2]}-nk{s[3]}-d{s[4]}{'-c' if s[5] else ''}"


def _attn_id(s):
    return f"B{s[0]}-H{s[1]}-KV{s[2]}-N{s[3]}-D{s[4]}-P{'_'.join(map(str, s[5]))}{'' if s[6] else '-full'}"


def _fwd_args(shape, dtype, device):
    B, H, Hkv, N, D, prefix, causal = shape
    q, k, v, pl, _ = attn_inputs(B, H, Hkv, N, D, prefix, dtype, device=device)
    return q, k, v, pl, BETA, causal, D ** -0.5


def _bwd_args(shape, dtype, device):
    B, H, Hkv, N, D, prefix, causal = shape
    q, k, v, pl, g = attn_inputs(B, H, Hkv, N, D, prefix, dtype, device=device)
    # out and lse as the forward would hand them over (the backward only reads them)
    out, lse = R.anchored_attention(q, k, v, pl, BETA, causal, D ** -0.5, return_lse=True)
    return g, q, k, v, out, lse, pl, BETA, causal, D ** -0.5


SPECS = {
    "turn_scores": OpSpec(
        "turn_scores", SCORE_SHAPES, BIG_SCORE_SHAPES, CUDA_BIG_SCORE_SHAPES, _score_args,
        lambda a: R.turn_scores(*(_f32(t) for t in a)), _turn_scores_compare, _score_id,
        interp_dtypes=("fp32",),  # the fused op below runs the same kernel in every dtype
    ),
    "turn_scores_and_tiers": OpSpec(
        "turn_scores_and_tiers", SCORE_SHAPES, BIG_SCORE_SHAPES, CUDA_BIG_SCORE_SHAPES,
        lambda s, dt, dev: (*_score_args(s, dt, dev), TAU_LOW, TAU_HIGH),
        lambda a: R.turn_scores_and_tiers(*(_f32(t) for t in a[:4]), *a[4:]), _fused_compare, _score_id,
    ),
    "anchored_attention_fwd": OpSpec(
        "anchored_attention_fwd", ATTN_SHAPES, BIG_ATTN_SHAPES, CUDA_BIG_ATTN_SHAPES, _fwd_args,
        lambda a: R.anchored_attention(*(_f32(t) for t in a[:3]), *a[3:], return_lse=True), _fwd_compare, _attn_id,
    ),
    "anchored_attention_bwd": OpSpec(
        "anchored_attention_bwd", ATTN_SHAPES, BIG_ATTN_SHAPES, CUDA_BIG_ATTN_SHAPES, _bwd_args,
        lambda a: R.anchored_attention_bwd(*(_f32(t) for t in a[:4]), *a[6:]), _bwd_compare, _attn_id,
    ),
    "decode_linear": OpSpec(
        "decode_linear", LINEAR_SHAPES, BIG_LINEAR_SHAPES, CUDA_BIG_LINEAR_SHAPES,
        lambda s, dt, dev: linear_inputs(*s, dt, device=dev), lambda a: R.decode_linear(*a), _linear_compare,
        lambda s: f"x{'x'.join(map(str, s[0]))}-K{s[1]}-N{s[2]}{'-b' if s[3] else ''}",
        interp_dtypes=(),  # no Triton kernel: CUDA runs the reference
    ),
}


def op_params(shapes: str = "shapes", dtypes=tuple(DTYPES), specs=None) -> list:
    """pytest params (spec, shape, dtype name) over every op in `specs` (default: all)."""
    out = []
    for spec in (specs or SPECS.values()):
        dts = spec.interp_dtypes if dtypes == "interp" else dtypes
        for shape in getattr(spec, shapes):
            for dt in dts:
                out.append(pytest.param(spec, shape, dt, id=f"{spec.name}-{spec.shape_id(shape)}-{dt}"))
    return out


def run_and_compare(spec: OpSpec, shape, dt: str, device: str, run: Callable | None = None) -> None:
    """Build the inputs on `device`, run the op (or `run(name, args)`), compare with the reference."""
    args = spec.make(shape, DTYPES[dt], device)
    got = spec.call(*args) if run is None else run(spec.name, args)
    spec.compare(got, spec.expect(args), args, dt, device)
