"""The C++ CPU ops (built by `make test`) match the references and pass opcheck."""
import pytest
import torch

from rhea_kernels import HAS_EXT, reference as R
from tests.kernels.cases import DTYPES, attn_inputs, attn_params, score_inputs, score_params
from tests.kernels.conftest import rel_rms

pytestmark = pytest.mark.skipif(not HAS_EXT, reason="C++ extension not built (RHEA_BUILD_EXT=1)")


@pytest.mark.parametrize("B,T,nq,nk,d,with_center,dt", score_params())
def test_turn_scores_and_tiers(B, T, nq, nk, d, with_center, dt):
    vq, vk, mask, center = score_inputs(B, T, nq, nk, d, with_center, DTYPES[dt])
    want = R.turn_scores(vq, vk, mask, center)
    got = torch.ops.rhea_kernels.cpp_turn_scores(vq, vk, mask, center)
    assert torch.equal(got.isinf(), want.isinf())
    assert torch.allclose(got[~got.isinf()], want[~want.isinf()], atol=1e-5)
    scores, tiers = torch.ops.rhea_kernels.cpp_turn_scores_and_tiers(vq, vk, mask, center, 0.05, 0.5)
    assert torch.equal(scores, got)
    # tiers agree wherever the score is not within rounding of a threshold
    clear = ((want - 0.05).abs() > 1e-5) & ((want - 0.5).abs() > 1e-5)
    assert torch.equal(tiers[clear], R.score_tiers(want, 0.05, 0.5)[clear])
    assert (tiers[~mask] == 0).all()


@pytest.mark.parametrize("B,H,Hkv,N,D,prefix,causal,dt", attn_params(dtypes=("fp32", "bf16")))
def test_anchored_attention_fwd_bwd(B, H, Hkv, N, D, prefix, causal, dt):
    q, k, v, pl, g = attn_inputs(B, H, Hkv, N, D, prefix, DTYPES[dt])
    out, lse = torch.ops.rhea_kernels.cpp_anchored_attention_fwd(q, k, v, pl, 1.3, causal, 0.125)
    want, want_lse = R.anchored_attention(q, k, v, pl, 1.3, causal, 0.125, return_lse=True)
    tol = 1e-5 if dt == "fp32" else 1e-2
    assert out.dtype == q.dtype and rel_rms(out, want) < tol and rel_rms(lse, want_lse) < 1e-5
    grads = torch.ops.rhea_kernels.cpp_anchored_attention_bwd(g, q, k, v, out, lse, pl, 1.3, causal, 0.125)
    for got, ref in zip(grads, R.anchored_attention_bwd(g, q, k, v, pl, 1.3, causal, 0.125)):
        assert got.shape == ref.shape and rel_rms(got, ref, floor=0.1) < tol


# Shapes past one tile: several query blocks (256 rows at N >= 768) and key blocks (512),
# the prefix ending inside a block, P=0, GQA; turn scoring over many chunks on all threads.
BIG_ATTN = [(2, 4, 2, 1100, 64, [600, 0], True), (1, 2, 1, 700, 32, [100], False), (1, 2, 2, 520, 128, [520], True)]
BIG_SCORE = [(2, 300, 8, 8, 576, True), (1, 40, 3, 96, 60, False)]


@pytest.mark.parametrize("B,H,Hkv,N,D,prefix,causal,dt", attn_params(dtypes=("fp32",), shapes=BIG_ATTN))
def test_anchored_attention_multi_block(B, H, Hkv, N, D, prefix, causal, dt):
    test_anchored_attention_fwd_bwd(B, H, Hkv, N, D, prefix, causal, dt)


@pytest.mark.parametrize("B,T,nq,nk,d,with_center,dt", score_params(dtypes=("fp32", "bf16"), shapes=BIG_SCORE))
def test_turn_scores_many_chunks(B, T, nq, nk, d, with_center, dt):
    test_turn_scores_and_tiers(B, T, nq, nk, d, with_center, dt)


def test_opcheck_cpp_ops():
    vq, vk, mask, center = score_inputs(2, 7, 3, 5, 60, True, torch.float32)
    torch.library.opcheck(torch.ops.rhea_kernels.cpp_turn_scores.default, (vq, vk, mask, center))
    torch.library.opcheck(torch.ops.rhea_kernels.cpp_turn_scores_and_tiers.default,
                          (vq, vk, None, center, 0.1, 0.5))
    q, k, v, pl, g = attn_inputs(2, 4, 2, 9, 16, [3, 9], torch.float32)
    torch.library.opcheck(torch.ops.rhea_kernels.cpp_anchored_attention_fwd.default, (q, k, v, pl, 1.0, True, 0.25))
    out, lse = torch.ops.rhea_kernels.cpp_anchored_attention_fwd(q, k, v, pl, 1.0, True, 0.25)
    torch.library.opcheck(torch.ops.rhea_kernels.cpp_anchored_attention_bwd.default,
                          (g, q, k, v, out, lse, pl, 1.0, True, 0.25))
