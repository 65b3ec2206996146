"""score_tiers and the fused turn_scores_and_tiers op: the rule, its boundaries, and the fused
path giving exactly what the two-step path (turn_scores, then score_tiers) gives."""
import numpy as np
import pytest
import torch

import rhea_kernels as rk
from rhea_kernels import reference as R
from tests.kernels.harness import score_inputs


def test_tier_boundaries():
    s = torch.tensor([0.49, 0.5, 0.8, 0.81])
    assert R.score_tiers(s, 0.5, 0.8).tolist() == [0, 1, 1, 2]
    assert rk.score_tiers(torch.tensor([[0.1, 0.6, 0.9, float("-inf")]]), 0.5, 0.8).tolist() == [[0, 1, 2, 0]]


def test_masked_turns_are_dropped():
    scores = R.turn_scores(torch.randn(1, 2, 8), torch.randn(1, 3, 2, 8), torch.tensor([[True, False, True]]))
    assert R.score_tiers(scores, -1.0, 1.0)[0].tolist() == [1, 0, 1]


def test_fused_equals_two_steps_with_all_three_tiers():
    vq, vk, mask, center = score_inputs(2, 33, 8, 2, 60, True, torch.bfloat16)
    scores, tiers = rk.turn_scores_and_tiers(vq, vk, 0.05, 0.5, mask, center)
    assert torch.equal(scores, rk.turn_scores(vq, vk, mask, center))
    assert torch.equal(tiers, rk.score_tiers(scores, 0.05, 0.5)) and set(tiers.unique().tolist()) == {0, 1, 2}


def test_fused_tiers_compare_thresholds_in_fp32():
    """Thresholds a quarter-ulp away from a score: compared in fp32 (as torch compares an fp32
    tensor with a Python float) the score sits on the threshold, so it is LATENT on every path;
    a float64 comparison would make it RAW (and DROP at tau_low)."""
    vq, vk, mask, center = score_inputs(1, 40, 4, 4, 32, False, torch.float32, seed=5)
    scores = rk.turn_scores(vq, vk)
    finite = scores[0].sort().values
    s_lo, s_hi = float(finite[5]), float(finite[-5])
    quarter = lambda x: float(np.spacing(np.float32(x))) / 4  # noqa: E731
    tau_low, tau_high = s_lo + quarter(s_lo), s_hi - quarter(s_hi)
    assert s_hi > tau_high and s_lo < tau_low  # in float64 ...
    fused_scores, tiers = rk.turn_scores_and_tiers(vq, vk, tau_low, tau_high)
    assert torch.equal(fused_scores, scores)
    want = R.score_tiers(scores, tau_low, tau_high)
    at = lambda s: (scores[0] == s).nonzero()[0, 0]  # noqa: E731
    assert want[0, at(s_hi)] == 1 and want[0, at(s_lo)] == 1  # ... but on the threshold in fp32
    assert torch.equal(tiers, want)


def test_numpy_thresholds_are_accepted():
    vq, vk, mask, center = score_inputs(1, 9, 2, 2, 16, False, torch.float32)
    scores, tiers = rk.turn_scores_and_tiers(vq, vk, np.float32(0.1), np.float64(0.4))
    assert torch.equal(tiers, rk.score_tiers(scores, 0.1, 0.4))
    with pytest.raises(ValueError, match="tau_low=True"):
        rk.score_tiers(scores, True, 0.4)


def test_empty_history_scores_nothing():
    scores, tiers = rk.turn_scores_and_tiers(torch.randn(1, 2, 8), torch.randn(1, 0, 2, 8), 0.1, 0.5)
    assert scores.shape == tiers.shape == (1, 0)


def test_episodic_call_shape():
    """The call a retrieval policy makes per turn: one session's [T, n, d] latents, a [n, d] query,
    a centre; [T] scores and tiers as the two-step path gives them."""
    g = torch.Generator().manual_seed(3)
    entries, query, center = torch.randn(12, 8, 64, generator=g), torch.randn(8, 64, generator=g), torch.randn(64)
    scores, tiers = rk.turn_scores_and_tiers(query[None], entries[None], 0.0, 0.2, center=center)
    two_step = rk.turn_scores(query[None], entries[None], center=center)
    assert torch.equal(scores, two_step) and torch.equal(tiers, rk.score_tiers(two_step, 0.0, 0.2))
    assert scores[0].shape == tiers[0].shape == (12,)


@pytest.mark.parametrize("bad, match", [
    (lambda vq, vk: rk.turn_scores_and_tiers(vq, vk, 0.9, 0.8), "tau_low=0.9 must be <= tau_high=0.8"),
    (lambda vq, vk: rk.turn_scores_and_tiers(vq, vk, float("nan"), 0.8), "tau_low"),
    (lambda vq, vk: rk.turn_scores_and_tiers(vq[0], vk, 0.1, 0.8), "vq must be"),
    (lambda vq, vk: rk.score_tiers(torch.zeros(2), float("nan"), 1.0), "tau_low"),
])
def test_bad_input(bad, match):
    vq, vk, _, _ = score_inputs(2, 7, 3, 5, 60, False, torch.float32)
    with pytest.raises(ValueError, match=match):
        bad(vq, vk)
