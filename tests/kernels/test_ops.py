"""Public ops: validation errors, opcheck, torch.compile(fullgraph=True), autograd."""
import pytest
import torch

import rhea_kernels as rk
from rhea_kernels import reference as R
from tests.kernels.cases import attn_inputs, score_inputs
from tests.kernels.conftest import rel_rms


@pytest.mark.parametrize("bad, match", [
    (lambda vq, vk: rk.turn_scores(vq[0], vk), "vq must be"),
    (lambda vq, vk: rk.turn_scores(vq, vk[..., :5]), "agree on B and d"),
    (lambda vq, vk: rk.turn_scores(vq.half(), vk), "dtype"),
    (lambda vq, vk: rk.turn_scores(vq.double(), vk.double()), "float64"),
    (lambda vq, vk: rk.turn_scores(vq, vk, torch.ones(2, 3)), "turn_mask"),
    (lambda vq, vk: rk.turn_scores(vq, vk, center=torch.zeros(3)), "center shape"),
    (lambda vq, vk: rk.turn_scores_and_tiers(vq, vk, 0.9, 0.8), "tau_low=0.9 must be <= tau_high=0.8"),
    (lambda vq, vk: rk.score_tiers(torch.zeros(2), float("nan"), 1.0), "tau_low"),
])
def test_turn_scores_bad_input(bad, match):
    vq, vk, _, _ = score_inputs(2, 7, 3, 5, 60, False, torch.float32)
    with pytest.raises(ValueError, match=match):
        bad(vq, vk)


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v, pl: rk.anchored_attention(q, k[:, :, :-1], v[:, :, :-1], pl, 1.0), "agree on B, N and D"),
    (lambda q, k, v, pl: rk.anchored_attention(q[:, :3], k, v, pl, 1.0), "multiple of kv heads"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl.float(), 1.0), "prefix_len.dtype"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl[:1], 1.0), r"prefix_len shape"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl + 100, 1.0), r"\[0, N=9\]"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k, v, pl, float("inf")), "beta"),
    (lambda q, k, v, pl: rk.anchored_attention(q, k.half(), v.half(), pl, 1.0), "dtypes"),
])
def test_anchored_attention_bad_input(bad, match):
    q, k, v, pl, _ = attn_inputs(2, 4, 2, 9, 16, [3, 9], torch.float32)
    with pytest.raises(ValueError, match=match):
        bad(q, k, v, pl)


def test_turn_scores_ops_match_reference_and_tiers():
    vq, vk, mask, center = score_inputs(2, 33, 8, 2, 60, True, torch.bfloat16)
    scores, tiers = rk.turn_scores_and_tiers(vq, vk, 0.05, 0.5, mask, center)
    want = R.turn_scores(vq, vk, mask, center)
    assert torch.allclose(scores, want, atol=1e-5) and torch.equal(rk.turn_scores(vq, vk, mask, center), scores)
    assert torch.equal(tiers, rk.score_tiers(scores, 0.05, 0.5)) and set(tiers.unique().tolist()) == {0, 1, 2}


def test_empty_history_scores_nothing():
    scores, tiers = rk.turn_scores_and_tiers(torch.randn(1, 2, 8), torch.randn(1, 0, 2, 8), 0.1, 0.5)
    assert scores.shape == tiers.shape == (1, 0)


def test_opcheck_public_ops():
    vq, vk, mask, center = score_inputs(2, 7, 3, 5, 60, True, torch.float32)
    torch.library.opcheck(torch.ops.rhea_kernels.turn_scores.default, (vq, vk, mask, center))
    torch.library.opcheck(torch.ops.rhea_kernels.turn_scores_and_tiers.default, (vq, vk, None, None, 0.1, 0.4))
    q, k, v, pl, g = attn_inputs(2, 4, 2, 9, 16, [3, 9], torch.float32)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch.ops.rhea_kernels.anchored_attention_fwd.default, (q, k, v, pl, 1.0, True, 0.25))
    out, lse = torch.ops.rhea_kernels.anchored_attention_fwd(q, k, v, pl, 1.0, True, 0.25)
    torch.library.opcheck(torch.ops.rhea_kernels.anchored_attention_bwd.default,
                          (g, q.detach(), k.detach(), v.detach(), out.detach(), lse, pl, 1.0, True, 0.25))


def test_compile_fullgraph_forward_and_backward():
    torch._dynamo.reset()
    q, k, v, pl, g = attn_inputs(2, 4, 2, 21, 16, [4, 0], torch.float32)
    vq, vk, mask, center = score_inputs(2, 7, 3, 5, 16, True, torch.float32)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(q, k, v, vq, vk):
        scores, tiers = rk.turn_scores_and_tiers(vq, vk, 0.1, 0.5, mask, center)
        return rk.anchored_attention(q, k, v, pl, 1.5), scores, tiers

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, scores, tiers = step(*leaves, vq, vk)
    out.backward(g)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    R.anchored_attention(*ref_leaves, pl, 1.5).backward(g)
    assert rel_rms(out, R.anchored_attention(q, k, v, pl, 1.5)) < 1e-5
    assert torch.allclose(scores, R.turn_scores(vq, vk, mask, center), atol=1e-5)
    for got, ref in zip(leaves, ref_leaves):
        assert rel_rms(got.grad, ref.grad, floor=0.1) < 1e-5


def test_backend_choice_on_cpu():
    assert rk.backend_for(torch.zeros(1)) == ("cpp" if rk.HAS_EXT else "reference")
