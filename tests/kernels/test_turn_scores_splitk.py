"""The turn-scoring kernel's variants (split-K over d, NATIVE_DOT, pipelining depth) against the
reference, on CPU under TRITON_INTERPRET=1, plus `launch_config`'s choices.

Odd shapes on purpose: T not a multiple of BLOCK_T, nk=3 (not a power of two, and past one
BLOCK_J), nq=5, d=777 (not a multiple of BLOCK_D nor of a split chunk), a mask, the tiers.
The interpreter runs in a child process of this module's own (as `conftest.Interpreter` does),
because its `tl.dot` on bf16 multiplies the raw uint16 bits (Triton <= 3.9): the child patches
that one method to widen bf16 to fp32 first, so the NATIVE_DOT path is tested in bf16 too.
(The GPU runs the same configs: tests/kernels/test_cuda.py.)
"""
from __future__ import annotations

import importlib.util
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

from rhea_kernels import reference as R
from tests.kernels.harness import TAU_HIGH, TAU_LOW, _check_scores, _check_tiers, score_inputs

# No `import triton` here: the child process imports this module before it selects the
# interpreter, and triton must not be imported before that.
if importlib.util.find_spec("triton") is None:
    pytest.skip("needs triton", allow_module_level=True)
pytestmark = pytest.mark.xdist_group("triton_interpreter")

DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# ------------------------------------------------------------------ the child process

def _init() -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    torch.set_num_threads(1)  # the parent runs beside it on a shared 2-core machine
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as I

    create_dot = I.InterpreterBuilder.create_dot

    def widen(h):
        if h.dtype.scalar == tl.bfloat16:  # stored as uint16: the high half of an fp32
            return I.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return h

    def patched(self, a, b, d, *rest):
        return create_dot(self, widen(a), widen(b), d, *rest)

    I.InterpreterBuilder.create_dot = patched


def _run(args: tuple, kwargs: dict):
    from rhea_kernels.turn_scores.triton_kernel import turn_scores_triton

    return turn_scores_triton(*args, **kwargs)


def _probe_bf16_dot():
    """The patched interpreter's bf16 dot (a check of the patch itself)."""
    import triton
    import triton.language as tl

    @triton.jit
    def k(A, B, C):
        r = tl.arange(0, 16)
        a = tl.load(A + r[:, None] * 16 + r[None, :])
        b = tl.load(B + r[:, None] * 16 + r[None, :])
        tl.store(C + r[:, None] * 16 + r[None, :], tl.dot(a, b))

    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    c = torch.empty(16, 16)
    k[(1,)](a, b, c)
    return c, a.float() @ b.float()


@pytest.fixture(scope="module")
def pool():
    workers = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_init)
    yield workers
    workers.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def interp(pool):
    """turn_scores_triton(*args, **kwargs) in the interpreter."""
    return lambda *args, **kwargs: pool.submit(_run, args, kwargs).result(timeout=600)


# ------------------------------------------------------------------ helpers

SHAPE = (2, 11, 5, 3, 777)  # B, T, nq, nk, d


def _cfg(split=1, native=False, block_t=4, block_j=4, block_d=64, stages=2):
    return dict(BLOCK_T=block_t, BLOCK_J=block_j, BLOCK_Q=16, BLOCK_D=block_d, NATIVE_DOT=native, SPLIT_D=split,
                num_stages=stages)


def _check(got, vq, vk, mask, center, with_tiers=True, atol=1e-5):
    want = R.turn_scores(vq.float(), vk.float(), mask, center)
    scores, tiers = got
    _check_scores(scores, want, atol)
    if with_tiers:
        _check_tiers(tiers, scores, want, mask, atol)
    return scores


# ------------------------------------------------------------------ tests

def test_interpreter_patch_widens_bf16(pool):
    got, want = pool.submit(_probe_bf16_dot).result(timeout=300)
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("split", [2, 3, 5, 13])
@pytest.mark.parametrize("dt,center", [("fp32", True), ("fp32", False), ("bf16", True), ("fp16", False)])
def test_split_k_matches_reference(interp, dt, center, split):
    """Split-K on the fp32 `ieee` path: chunks of 320 (split 3), 192 (5), 64 (13) columns, the
    last one partial; nk=3 in two BLOCK_J=2 passes (the queries' norms come from the last)."""
    vq, vk, mask, c = score_inputs(*SHAPE, center, DT[dt], seed=split)
    got = interp(vq, vk, mask, c, TAU_LOW, TAU_HIGH, True, config=_cfg(split, block_j=2))
    _check(got, vq, vk, mask, c)


@pytest.mark.parametrize("split", [1, 2, 3, 13])
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_native_dot_matches_reference(interp, dt, split):
    """NATIVE_DOT (16-bit operands, fp32 accumulation), alone and with split-K."""
    vq, vk, mask, _ = score_inputs(*SHAPE, False, DT[dt], seed=10 + split)
    got = interp(vq, vk, mask, None, TAU_LOW, TAU_HIGH, True, config=_cfg(split, native=True, block_j=4))
    _check(got, vq, vk, mask, None)


@pytest.mark.parametrize("native", [False, True])
def test_split_equals_unsplit_and_plain_scores_equal_fused(interp, native):
    """Split and unsplit agree to rounding; with and without the tiers epilogue the scores are equal
    bit for bit (fused == two-step); no mask; BLOCK_D=128, 16-row tiles, num_stages=4."""
    vq, vk, _, _ = score_inputs(1, 9, 5, 3, 777, False, torch.bfloat16, seed=3)
    base = dict(block_t=4, block_j=4, block_d=128, stages=4, native=native)
    one = interp(vq, vk, None, None, 0.0, 0.0, False, config=_cfg(1, **base))[0]
    for split in (2, 7):
        plain = interp(vq, vk, None, None, 0.0, 0.0, False, config=_cfg(split, **base))[0]
        fused, tiers = interp(vq, vk, None, None, TAU_LOW, TAU_HIGH, True, config=_cfg(split, **base))
        assert torch.equal(plain, fused)
        assert torch.allclose(plain, one, atol=1e-6)
        _check((fused, tiers), vq, vk, torch.ones(1, 9, dtype=torch.bool), None)


def test_default_config_splits_a_long_latent_and_matches(interp):
    """A few rows and d >= 1024: `launch_config` splits d; the default path (the op's) matches."""
    from rhea_kernels.turn_scores.triton_kernel import launch_config

    assert launch_config(3, 1600, 2, 1, 5)["SPLIT_D"] == 2
    for dt, center in (("fp32", True), ("bf16", False)):
        vq, vk, mask, c = score_inputs(1, 5, 3, 2, 1600, center, DT[dt], seed=4)
        _check(interp(vq, vk, mask, c, TAU_LOW, TAU_HIGH, True), vq, vk, mask, c)


def test_zero_turns():
    from rhea_kernels.turn_scores.triton_kernel import turn_scores_triton

    scores, tiers = turn_scores_triton(torch.randn(2, 3, 8), torch.randn(2, 0, 3, 8), with_tiers=True)
    assert scores.shape == tiers.shape == (2, 0)


def test_launch_config_choices():
    from rhea_kernels.turn_scores.triton_kernel import launch_config, split_chunk

    bf16 = dict(dtype=torch.bfloat16)
    one = launch_config(8, 4096, 8, 1, 512, 132, **bf16)  # one conversation: split-K, native dot
    assert one["NATIVE_DOT"] and one["SPLIT_D"] > 1 and one["BLOCK_T"] * one["BLOCK_J"] == 64
    assert 1 * (512 // one["BLOCK_T"]) * one["SPLIT_D"] >= 2 * 132
    assert split_chunk(4096, one["SPLIT_D"], one["BLOCK_D"])[1] == one["SPLIT_D"]  # no chunk trimmed away
    assert "num_stages" not in one  # Triton's default unless a config sets it
    server = launch_config(8, 4096, 8, 64, 512, 132, **bf16)  # a server batch: 256-row tiles, no split
    assert server["SPLIT_D"] == 1 and server["BLOCK_T"] * server["BLOCK_J"] == 256 and server["NATIVE_DOT"]
    assert launch_config(8, 576, 8, 1, 512, 132, **bf16)["SPLIT_D"] == 1  # short latents: no split
    assert launch_config(8, 4096, 8, 8, 512, 132, **bf16)["SPLIT_D"] == 1  # 32k rows: enough without
    assert not launch_config(8, 4096, 8, 1, 512, 132, dtype=torch.bfloat16, has_center=True)["NATIVE_DOT"]
    assert not launch_config(8, 4096, 8, 1, 512, 132)["NATIVE_DOT"]  # fp32: the ieee dot
    assert launch_config(8, 4096, 8, 1, 512, 132, dtype=torch.float16)["NATIVE_DOT"]
    assert split_chunk(777, 3, 64) == (320, 3) and split_chunk(777, 13, 64) == (64, 13)
    assert split_chunk(777, 8, 64) == (128, 7)  # no empty chunk


@pytest.mark.parametrize("dt,center", [("fp32", False), ("bf16", True)])
def test_native_dot_refused_where_inexact(dt, center):
    from rhea_kernels.turn_scores.triton_kernel import turn_scores_triton

    vq, vk, mask, c = score_inputs(1, 3, 2, 2, 32, center, DT[dt])
    with pytest.raises(ValueError, match="NATIVE_DOT"):
        turn_scores_triton(vq, vk, mask, c, config=_cfg(native=True))
