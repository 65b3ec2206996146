"""turn_scores: the reference against its written-out definition, and the public function's checks.
(Each backend against the reference: test_backends.py / test_cuda.py over the shared harness.)"""
import pytest
import torch
import torch.nn.functional as F

import rhea_kernels as rk
from rhea_kernels import reference as R
from tests.kernels.harness import score_inputs


def test_reference_matches_loop_definition():
    torch.manual_seed(0)
    vq, vk, c = torch.randn(2, 3, 20), torch.randn(2, 4, 5, 20), torch.randn(20)
    got = R.turn_scores(vq, vk, center=c)
    for b in range(2):
        for t in range(4):
            want = max(F.cosine_similarity(vq[b, i] - c, vk[b, t, j] - c, dim=0).item()
                       for i in range(3) for j in range(5))
            assert got[b, t].item() == pytest.approx(want, abs=1e-6)


def test_zero_vectors_score_zero_and_masked_turns_are_inf():
    vk = torch.randn(1, 3, 2, 8)
    assert torch.equal(R.turn_scores(torch.zeros(1, 2, 8), vk), torch.zeros(1, 3))
    scores = R.turn_scores(torch.randn(1, 2, 8), vk, torch.tensor([[True, False, True]]))
    assert scores[0, 1] == float("-inf") and torch.isfinite(scores[0, [0, 2]]).all()


def test_public_function_matches_reference():
    vq, vk, mask, center = score_inputs(2, 33, 8, 2, 60, True, torch.bfloat16)
    assert torch.allclose(rk.turn_scores(vq, vk, mask, center), R.turn_scores(vq, vk, mask, center), atol=1e-5)


@pytest.mark.parametrize("bad, match", [
    (lambda vq, vk: rk.turn_scores(vq[0], vk), "vq must be"),
    (lambda vq, vk: rk.turn_scores(vq, vk[..., :5]), "agree on B and d"),
    (lambda vq, vk: rk.turn_scores(vq.half(), vk), "dtype"),
    (lambda vq, vk: rk.turn_scores(vq.double(), vk.double()), "float64"),
    (lambda vq, vk: rk.turn_scores(vq, vk, torch.ones(2, 3)), "turn_mask"),
    (lambda vq, vk: rk.turn_scores(vq, vk, center=torch.zeros(3)), "center shape"),
])
def test_bad_input(bad, match):
    vq, vk, _, _ = score_inputs(2, 7, 3, 5, 60, False, torch.float32)
    with pytest.raises(ValueError, match=match):
        bad(vq, vk)
