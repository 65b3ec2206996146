"""Triton kernels under the interpreter (child process with TRITON_INTERPRET=1) vs the references."""
import pytest
import torch

from rhea_kernels import reference as R
from tests.kernels.cases import ATTN_TOL, DTYPES, attn_inputs, attn_params, score_inputs, score_params
from tests.kernels.conftest import rel_rms

pytestmark = pytest.mark.xdist_group("triton_interpreter")


@pytest.mark.parametrize("B,T,nq,nk,d,with_center,dt", score_params())
def test_turn_scores(interp, B, T, nq, nk, d, with_center, dt):
    vq, vk, mask, center = score_inputs(B, T, nq, nk, d, with_center, DTYPES[dt])
    scores, tiers = interp.turn_scores(vq, vk, mask, center, 0.05, 0.5)
    want = R.turn_scores(vq, vk, mask, center)
    assert scores.dtype == torch.float32 and tiers.dtype == torch.int8
    assert torch.equal(scores.isinf(), want.isinf()) and not scores.isnan().any()
    assert torch.allclose(scores[~want.isinf()], want[~want.isinf()], atol=1e-5)
    clear = ((want - 0.05).abs() > 1e-5) & ((want - 0.5).abs() > 1e-5)
    assert torch.equal(tiers[clear], R.score_tiers(want, 0.05, 0.5)[clear])
    assert (tiers[~mask] == 0).all()


@pytest.mark.parametrize("B,H,Hkv,N,D,prefix,causal,dt", attn_params())
def test_anchored_attention_fwd_bwd(interp, B, H, Hkv, N, D, prefix, causal, dt):
    q, k, v, pl, g = attn_inputs(B, H, Hkv, N, D, prefix, DTYPES[dt])
    scale = D ** -0.5
    out, lse, dq, dk, dv = interp.anchored_attention(q, k, v, pl, 1.3, causal, scale, g)
    want, want_lse = R.anchored_attention(q, k, v, pl, 1.3, causal, scale, return_lse=True)
    tol = ATTN_TOL[dt]
    assert out.dtype == q.dtype and rel_rms(out, want) < tol
    assert rel_rms(lse, want_lse) < 1e-5
    for name, got, ref in zip("qkv", (dq, dk, dv), R.anchored_attention_bwd(g, q, k, v, pl, 1.3, causal, scale)):
        assert got.dtype == ref.dtype and rel_rms(got, ref, floor=0.1) < 2 * tol, f"d{name}"
