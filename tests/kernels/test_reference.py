"""The references agree with each other and with definitions written out by hand."""
import pytest
import torch
import torch.nn.functional as F

from rhea_kernels import reference as R
from tests.kernels.cases import attn_inputs


def test_turn_scores_matches_loop_definition():
    torch.manual_seed(0)
    vq, vk, c = torch.randn(2, 3, 20), torch.randn(2, 4, 5, 20), torch.randn(20)
    got = R.turn_scores(vq, vk, center=c)
    for b in range(2):
        for t in range(4):
            want = max(F.cosine_similarity(vq[b, i] - c, vk[b, t, j] - c, dim=0).item()
                       for i in range(3) for j in range(5))
            assert got[b, t].item() == pytest.approx(want, abs=1e-6)


def test_zero_vectors_score_zero_and_masked_turns_are_inf_and_dropped():
    vq = torch.zeros(1, 2, 8)
    vk = torch.randn(1, 3, 2, 8)
    assert torch.equal(R.turn_scores(vq, vk), torch.zeros(1, 3))
    scores = R.turn_scores(torch.randn(1, 2, 8), vk, torch.tensor([[True, False, True]]))
    assert scores[0, 1] == float("-inf") and torch.isfinite(scores[0, [0, 2]]).all()
    assert R.score_tiers(scores, -1.0, 1.0)[0].tolist() == [1, 0, 1]


def test_tier_boundaries():
    s = torch.tensor([0.49, 0.5, 0.8, 0.81])
    assert R.score_tiers(s, 0.5, 0.8).tolist() == [0, 1, 1, 2]


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
    # One query in the prefix sees a later prefix key; +beta shifts weight towards the prefix.
    q, k, v, _, _ = attn_inputs(1, 1, 1, 6, 8, [0], torch.float32)
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
