"""The split route of anchored attention (rhea_kernels/anchored_attention/split.py) on CPU.

The CPU flash ops (``aten::_scaled_dot_product_flash_attention_for_cpu`` and its backward)
stand in for the CUDA ones, so the whole algorithm is checked here against the reference:
grouping rows by prefix length, the prefix/body passes, the LSE merge, the backward identity
(each pass's flash backward with the merged output and lse), GQA, P = 0 / N, and the lse
convention shared with the other backends. The fused Triton merge runs under
TRITON_INTERPRET=1 in the `interp` child; tests/kernels/test_cuda.py runs the CUDA route.
"""
import warnings

import pytest
import torch

from rhea_kernels.anchored_attention import op as attn_op
from rhea_kernels.anchored_attention import reference as R
from rhea_kernels.anchored_attention import split
from tests.kernels.harness import ATTN_TOL, attn_inputs, rel_rms

N = 37
BETA = 1.3
PREFIXES = [0, 1, 7, N // 2, N - 1, N]


def _check(q, k, v, pl, g, causal, scale, tol, beta=BETA):
    out, lse = split.split_fwd(q, k, v, pl, beta, causal, scale)
    want_out, want_lse = R.anchored_attention(q.float(), k.float(), v.float(), pl, beta, causal, scale,
                                              return_lse=True)
    assert out.dtype == q.dtype and out.shape == q.shape and out.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3] and lse.is_contiguous()
    assert rel_rms(out, want_out) < tol, rel_rms(out, want_out)
    assert rel_rms(lse, want_lse) < 1e-5, rel_rms(lse, want_lse)
    grads = split.split_bwd(g, q, k, v, out, lse, pl, beta, causal, scale)
    want = R.anchored_attention_bwd(g.float(), q.float(), k.float(), v.float(), pl, beta, causal, scale)
    for name, got, ref, inp in zip("qkv", grads, want, (q, k, v)):
        assert got.dtype == inp.dtype and got.shape == inp.shape, f"d{name}"
        err = rel_rms(got, ref, floor=0.1)
        assert err < 2 * tol, f"d{name}: {err:.2e}"


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("P", PREFIXES, ids=[f"P{p}" for p in PREFIXES])
@pytest.mark.parametrize("H,Hkv", [(4, 4), (4, 2), (8, 2)], ids=["mha", "gqa2", "gqa4"])
def test_split_matches_reference_fp32(H, Hkv, P, causal):
    q, k, v, pl, g = attn_inputs(2, H, Hkv, N, 16, [P, P], torch.float32)
    _check(q, k, v, pl, g, causal, 0.3, ATTN_TOL["fp32"])


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("prefix", [[5, 0, 37], [36, 36, 2], [0, 37, 37], [37, 1, 37]],
                         ids=lambda p: "P" + "_".join(map(str, p)))
def test_rows_with_different_prefixes(prefix, causal):
    """Rows grouped by P: a gather for non-consecutive rows, a slice for consecutive ones."""
    q, k, v, pl, g = attn_inputs(3, 4, 2, N, 32, prefix, torch.float32, seed=1)
    _check(q, k, v, pl, g, causal, None, ATTN_TOL["fp32"])


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_half_precision(dt, causal):
    q, k, v, pl, g = attn_inputs(3, 8, 2, 70, 64, [9, 0, 70], {"bf16": torch.bfloat16, "fp16": torch.float16}[dt])
    _check(q, k, v, pl, g, causal, 0.125, ATTN_TOL[dt])


def test_prefix_len_clamped_and_int():
    q, k, v, pl, g = attn_inputs(2, 4, 1, N, 16, [0, 0], torch.float32)
    a = split.split_fwd(q, k, v, torch.tensor([-3, 500]), BETA, True, None)
    b = split.split_fwd(q, k, v, torch.tensor([0, N]), BETA, True, None)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = split.split_fwd(q, k, v, 5, BETA, True, None)
    d = split.split_fwd(q, k, v, torch.tensor([5, 5], dtype=torch.int32), BETA, True, None)
    assert torch.equal(c[0], d[0])


def test_n_equals_one():
    q, k, v, pl, g = attn_inputs(2, 4, 2, 1, 64, [0, 1], torch.float32)
    _check(q, k, v, pl, g, True, None, ATTN_TOL["fp32"])


def test_autograd_function_matches_reference():
    q, k, v, pl, g = attn_inputs(2, 8, 2, 50, 32, [12, 50], torch.float32)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    split.attention(*leaves, pl, 0.8).backward(g)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    R.anchored_attention(*ref, pl, 0.8).backward(g)
    for a, b in zip(leaves, ref):
        assert rel_rms(a.grad, b.grad, floor=0.1) < 2e-5


def test_lse_convention_matches_the_op():
    """split's (out, lse) feed the op's own backward (C++ kernel or reference on CPU): the
    convention the Triton kernel shares, so CUDA forward and backward routes can mix."""
    q, k, v, pl, g = attn_inputs(2, 8, 2, 70, 32, [9, 70], torch.float32)
    out, lse = split.split_fwd(q, k, v, pl, BETA, True, 0.2)
    op_out, op_lse = torch.ops.rhea_kernels.anchored_attention_fwd(q, k, v, pl, BETA, True, 0.2)
    assert rel_rms(lse, op_lse) < 1e-6 and rel_rms(out, op_out) < 1e-5
    got = torch.ops.rhea_kernels.anchored_attention_bwd(g, q, k, v, out, lse, pl, BETA, True, 0.2)
    want = R.anchored_attention_bwd(g, q, k, v, pl, BETA, True, 0.2)
    for a, b in zip(got, want):
        assert rel_rms(a, b, floor=0.1) < 2e-5


def test_gqa_fallback_repeats_kv(monkeypatch):
    """Should a flash build refuse fewer K/V heads, the route repeats K/V (once warned) and folds dK/dV."""
    real_fwd, real_bwd = split._flash_fwd_raw, split._flash_bwd_raw

    def refuse(real):
        def call(*args):
            q, k = args[1:3] if real is real_bwd else args[:2]
            if k.shape[1] != q.shape[1]:
                raise RuntimeError("Number of heads in key/value must equal the number of heads in query")
            return real(*args)
        return call

    monkeypatch.setattr(split, "_flash_fwd_raw", refuse(real_fwd))
    monkeypatch.setattr(split, "_flash_bwd_raw", refuse(real_bwd))
    monkeypatch.setitem(split._GQA_NATIVE, "cpu", True)
    q, k, v, pl, g = attn_inputs(2, 8, 2, N, 16, [7, 0], torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check(q, k, v, pl, g, True, None, ATTN_TOL["fp32"])
    assert split._GQA_NATIVE["cpu"] is False
    assert sum("repeating K/V" in str(w.message) for w in caught) == 1


def test_not_eligible_off_cuda():
    q, k, v, pl, g = attn_inputs(1, 4, 2, 64, 64, [8], torch.bfloat16)
    assert not split.eligible(q, k)


@pytest.mark.parametrize("value", ["", "auto", "split", "triton", "TRITON"])
def test_route_values(monkeypatch, value):
    monkeypatch.setenv(attn_op.ROUTE_ENV, value)
    assert attn_op.cuda_route() == (value.lower() or "auto")


@pytest.mark.parametrize("value", ["flash", "splt", "0"])
def test_bad_route_raises(monkeypatch, value):
    monkeypatch.setenv(attn_op.ROUTE_ENV, value)
    q, k, v, pl, g = attn_inputs(1, 4, 2, 16, 16, [3], torch.float32)
    with pytest.raises(ValueError, match="RHEA_ANCHORED_ROUTE.*auto, split, triton"):
        attn_op._fwd_triton(q, k, v, pl, 1.0, True, 0.25)
    with pytest.raises(ValueError, match="RHEA_ANCHORED_ROUTE"):
        attn_op._bwd_triton(g, q, k, v, q, pl.float(), pl, 1.0, True, 0.25)


def test_merge_torch_matches_a_direct_formula():
    g = torch.Generator().manual_seed(0)
    oa, ob = torch.randn(2, 3, 9, 8, generator=g), torch.randn(2, 3, 5, 8, generator=g)
    la, lb = torch.randn(2, 3, 9, generator=g), torch.randn(2, 3, 5, generator=g)
    out, lse = split.merge_torch(oa, la, ob, lb, 4, 0.5)
    za, zb = torch.exp(la + 0.5), torch.exp(lb)
    assert torch.allclose(out[:, :, :4], oa[:, :, :4]) and torch.allclose(lse[:, :, :4], la[:, :, :4] + 0.5)
    want = (za[:, :, 4:, None] * oa[:, :, 4:] + zb[..., None] * ob) / (za[:, :, 4:] + zb)[..., None]
    assert torch.allclose(out[:, :, 4:], want, atol=1e-6)
    assert torch.allclose(lse[:, :, 4:], torch.log(za[:, :, 4:] + zb), atol=1e-6)


# -------------------------------------------------- Triton, interpreted on CPU

MERGE_CASES = [  # (B, H, N, D, row0, dtype): causal (row0 = P) and full (row0 = 0); D not a power of 2
    (2, 3, 37, 60, 5, torch.float32), (1, 2, 70, 64, 0, torch.bfloat16), (2, 2, 33, 128, 32, torch.float16),
    (1, 1, 130, 16, 1, torch.float32),
]


def _merge_in_interpreter(cases):
    """Runs in the TRITON_INTERPRET=1 child: the fused merge and the torch merge on each case."""
    torch.manual_seed(0)
    results = []
    for B, H, N_, D, row0, dt in cases:
        oa = torch.randn(B, H, N_, D).to(dt)
        ob = torch.randn(B, N_ - row0, H, D).to(dt).transpose(1, 2)  # pass B's [B, N, H, D] layout on CUDA
        la, lb = 3 * torch.randn(B, H, N_), 3 * torch.randn(B, H, N_ - row0)
        results.append((split.merge_triton(oa, la, ob, lb, row0, 0.7), split.merge_torch(oa, la, ob, lb, row0, 0.7)))
    return results


@pytest.mark.xdist_group("triton_interpreter")
def test_fused_merge_interpreted(interp):
    results = interp._pool.submit(_merge_in_interpreter, MERGE_CASES).result(timeout=300)
    for (B, H, N_, D, row0, dt), ((out, lse), (want, want_lse)) in zip(MERGE_CASES, results):
        assert out.dtype == dt and out.shape == (B, H, N_, D) and out.is_contiguous()
        assert lse.dtype == torch.float32 and lse.is_contiguous()
        assert rel_rms(out, want) < (1e-6 if dt == torch.float32 else 5e-3)
        assert (lse - want_lse).abs().max() < 1e-5


def _triton_bwd_with_split_lse(args):
    """In the interpreter child: the Triton backward fed the split route's (out, lse)."""
    from rhea_kernels.anchored_attention.triton_kernel import anchored_attention_bwd_triton

    g, q, k, v, pl, beta, causal, scale = args
    out, lse = split.split_fwd(q, k, v, pl, beta, causal, scale)
    return anchored_attention_bwd_triton(g, q, k, v, out, lse, pl, beta, causal, scale)


@pytest.mark.xdist_group("triton_interpreter")
def test_triton_backward_accepts_split_forward(interp):
    """The Triton backward given the split forward's lse gives the reference gradients."""
    q, k, v, pl, g = attn_inputs(2, 4, 2, 37, 16, [5, 37], torch.float32)
    got = interp._pool.submit(_triton_bwd_with_split_lse, (g, q, k, v, pl, BETA, True, 0.25)).result(timeout=300)
    want = R.anchored_attention_bwd(g, q, k, v, pl, BETA, True, 0.25)
    for a, b in zip(got, want):
        assert rel_rms(a, b, floor=0.1) < 1e-4


def test_other_flash_errors_are_not_taken_for_gqa(monkeypatch):
    def broken(*args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(split, "_flash_fwd_raw", broken)
    monkeypatch.setitem(split._GQA_NATIVE, "cpu", True)
    q, k, v, pl, g = attn_inputs(1, 4, 2, 16, 16, [3], torch.float32)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        split.split_fwd(q, k, v, pl, 1.0, True, None)
    assert split._GQA_NATIVE["cpu"] is True


@pytest.mark.parametrize("N, P, want", [
    (4096, 512, "cudnn"), (4096, 0, "cudnn"), (4096, 4096, "cudnn"),
    (1000, 999, "flash"),   # pass B of one row: cuDNN refused s_q = s_kv = 1 on the H100
    (1000, 1, "flash"), (1, 0, "flash"), (1, 1, "flash"), (15, 0, "flash"), (16, 0, "cudnn"),
])
def test_group_backend_keeps_tiny_passes_off_cudnn(N, P, want):
    assert split._group_backend("cudnn", N, P, True) == want
    assert split._group_backend("flash", N, P, True) == "flash"


@pytest.mark.parametrize("route, N, backend, want", [
    ("auto", 4096, "cudnn", True), ("auto", 4095, "cudnn", False), ("auto", 8192, "flash", False),
    ("split", 1024, "flash", True), ("triton", 8192, "cudnn", False),
])
def test_auto_route_takes_split_only_where_it_was_measured_faster(monkeypatch, route, N, backend, want):
    """auto: split on cuDNN passes from N = 4096 (H100: 1.08-1.34x SDPA vs the Triton kernel's 1.6-1.8x)."""
    monkeypatch.setenv(attn_op.ROUTE_ENV, route)
    monkeypatch.setattr(split, "eligible", lambda q, k: True)
    monkeypatch.setattr(split, "pass_backend", lambda q, k: backend)
    q = torch.empty(1, 2, N, 8)
    assert attn_op._use_split(q, q) is want


def test_host_values_follow_the_tensor_not_its_address(monkeypatch):
    """A device prefix_len is read once per tensor (one sync per forward, not per layer); an in-place
    write or a new tensor is read again. Exercised on a fake device type: the cache is device-agnostic."""
    reads = []

    class Fake(torch.Tensor):
        pass

    t = torch.tensor([3, 5]).as_subclass(Fake)
    monkeypatch.setattr(Fake, "device", property(lambda self: torch.device("meta")))
    real_tolist = torch.Tensor.tolist
    monkeypatch.setattr(Fake, "tolist", lambda self: reads.append(1) or real_tolist(self))
    assert split._host_values(t) == [3, 5] and split._host_values(t) == [3, 5]
    assert len(reads) == 1
    t.add_(1)  # in place: version bump
    assert split._host_values(t) == [4, 6] and len(reads) == 2
    u = torch.tensor([7, 7]).as_subclass(Fake)
    assert split._host_values(u) == [7, 7] and len(reads) == 3
