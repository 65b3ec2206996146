"""anchored_attention: the references against each other and written-out definitions, the
public function's checks, and autograd through the op. (Each backend against the reference:
test_backends.py / test_cuda.py over the shared harness.)"""
import pytest
import torch
import torch.nn.functional as F

import rhea_kernels as rk
from rhea_kernels import reference as R
from tests.kernels.harness import attn_inputs, rel_rms


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("prefix", [[0, 0], [1, 9], [5, 37], [37, 37]], ids=lambda p: f"P{p[0]}_{p[1]}")
def test_lse_merge_equals_materialised(prefix, causal):
    q, k, v, pl, _ = attn_inputs(2, 4, 2, 37, 16, prefix, torch.float32)
    want = R.anchored_attention(q, k, v, pl, 1.7, causal)
    assert torch.allclose(R.anchored_attention_lse_merge(q, k, v, pl, 1.7, causal), want, atol=1e-5)


def test_beta_zero_no_prefix_is_causal_sdpa():
    q, k, v, pl, _ = attn_inputs(2, 4, 2, 23, 16, [0, 0], torch.float32)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert torch.allclose(R.anchored_attention(q, k, v, pl, 0.0), want, atol=1e-5)


def test_prefix_is_visible_and_biased():
    bias = R.anchored_bias(torch.tensor([3]), 6, 6, 2.0)[0, 0]
    assert bias[0, 2] == 2.0 and bias[0, 3] == float("-inf") and bias[5, 4] == 0.0 and bias[4, 1] == 2.0


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_analytic_backward_equals_autograd(causal):
    q, k, v, pl, g = attn_inputs(2, 4, 2, 19, 16, [3, 19], torch.float32)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    R.anchored_attention(q, k, v, pl, 0.9, causal).backward(g)
    for got, want in zip(R.anchored_attention_bwd(g, q.detach(), k.detach(), v.detach(), pl, 0.9, causal),
                         (q.grad, k.grad, v.grad)):
        assert torch.allclose(got, want, atol=1e-5)


def test_public_function_autograd_matches_reference():
    q, k, v, pl, g = attn_inputs(2, 4, 2, 37, 16, [5, 37], torch.float32)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = rk.anchored_attention(*leaves, pl, 1.3)
    out.backward(g)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    want = R.anchored_attention(*ref, pl, 1.3)
    want.backward(g)
    assert rel_rms(out, want) < 1e-5
    for a, b in zip(leaves, ref):
        assert rel_rms(a.grad, b.grad, floor=0.1) < 1e-5
    assert torch.equal(rk.anchored_attention(q, k, v, 5, 1.3)[0], rk.anchored_attention(q, k, v, torch.tensor([5, 5]),
                                                                                          1.3)[0])


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v, pl: rk.anchored_attention(q, k[:, :, :-1], v[:, :, :-1], pl, 1.0), "agree on B, N and D"),
    (lambda q, k, v, pl: rk.anchored_attention(q[:, :3], k, v, pl, 1.0), "multiple of kv heads"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl.float(), 1.0), "prefix_len.dtype"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl[:1], 1.0), r"prefix_len shape"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl + 100, 1.0), r"\[0, N=9\]"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl, float("inf")), "beta"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k.half(), v.half(), pl, 1.0), "dtypes"),
])
def test_bad_input(bad, match):
    q, k, v, pl, _ = attn_inputs(2, 4, 2, 9, 16, [3, 9], torch.float32)
    with pytest.raises(ValueError, match=match):
        bad(q, k, v, pl)
