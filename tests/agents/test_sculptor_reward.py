"""Eq. 4's reward on loop runs, and the GSPO objective (Eqs. 1-3) on a tiny model."""
from __future__ import annotations

import pytest
import torch

from rhea.agents.sculptor.gspo import GSPOConfig, group_advantages, gspo_loss, sequence_log_ratios, token_logprobs
from rhea.agents.sculptor.reward import run_reward, sculptor_reward
from rhea.testing import tiny_llama

from .sculptor_helpers import hermes, make_loop

QUERY = "What is the latest value of key_1?"


@pytest.mark.parametrize("kwargs,expected", [
    ({"correct": True}, 1.0),
    ({"correct": False}, 0.0),
    ({"correct": True, "format_error": True}, -1.0),
    ({"correct": True, "n_tools": 20}, 1.0),
    ({"correct": True, "n_tools": 21}, -1.0),
    ({"correct": False, "trajectory_tokens": 128_000}, 0.0),
    ({"correct": True, "trajectory_tokens": 128_001}, -1.0),
])
def test_eq4_cases(kwargs, expected):
    assert sculptor_reward(**kwargs) == expected


def test_run_reward_reads_the_run(conversation):
    loop, _ = make_loop(conversation, [hermes("search_context", query="key_1"), "value_10"])
    good = run_reward(loop.run(conversation, QUERY), correct=True)
    assert (good.reward, good.reason, good.n_tools, good.format_error) == (1.0, "correct", 1, False)
    assert good.trajectory_tokens > 50
    # A well-formed call the store refuses is a wrong move, not a format error.
    loop, _ = make_loop(conversation, [hermes("fold_fragment", fragment_id="f00000"), "value_10"])
    assert run_reward(loop.run(conversation, QUERY), correct=False).reason == "incorrect"
    # Unreadable call, or arguments that break the schema: format error, even if correct.
    for bad in ('<tool_call>{"name": "search_context", "arguments": {"query": </tool_call>',
                hermes("search_context", query="key_1", max_results=99)):
        loop, _ = make_loop(conversation, [bad, "value_10"])
        assert run_reward(loop.run(conversation, QUERY), correct=True).reason == "format_error"
    # Over the limits: the loop stops at 2 calls here, the model writes a 3rd in its final answer.
    loop, _ = make_loop(conversation, [hermes("search_context", query="a"), hermes("search_context", query="b"),
                                       hermes("search_context", query="c") + " value_10"], max_tool_calls=2)
    over = run_reward(loop.run(conversation, QUERY), correct=True, max_tools=2)
    assert (over.n_tools, over.reason, over.reward) == (3, "too_many_tools", -1.0)
    loop, _ = make_loop(conversation, ["value_10"])
    assert run_reward(loop.run(conversation, QUERY), correct=True, max_tokens=10).reason == "too_long"
    with pytest.raises(TypeError, match="LoopResult"):
        run_reward({"answer": "x"}, correct=True)


def test_group_advantages_eq3():
    adv = group_advantages(torch.tensor([1.0, -1.0, 0.0, 0.0]))
    assert abs(float(adv.mean())) < 1e-6 and abs(float(adv.std(unbiased=False)) - 1) < 1e-5
    assert adv[0] > 0 > adv[1] and adv[2] == adv[3] == 0
    assert group_advantages(torch.tensor([1.0, 1.0])).tolist() == [0.0, 0.0]  # no signal in a uniform group


def test_sequence_ratio_is_length_normalized_over_loss_tokens():
    old = torch.zeros(2, 4)
    new = torch.tensor([[0.4, 0.4, 9.0, 9.0], [0.1, 0.2, 0.3, 0.4]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    # Tokens without loss (the 9.0s: prompt, tool results, earlier completions) do not count.
    assert torch.allclose(sequence_log_ratios(new, old, mask), torch.tensor([0.4, 0.25]))
    with pytest.raises(ValueError, match="at least one loss token"):
        sequence_log_ratios(new, old, torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]]))


def test_clipping_stops_the_gradient_outside_the_trust_region():
    old = torch.zeros(2, 3)
    mask = torch.ones(2, 3)
    adv = torch.tensor([1.0, -1.0])
    cfg = GSPOConfig()
    # Inside [1 - 3e-4, 1 + 4e-4]: both sequences get a gradient.
    inside = torch.full((2, 3), 1e-4, requires_grad=True)
    loss, stats = gspo_loss(inside, old, mask, adv, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
    loss.backward()
    assert stats["clip_fraction"] == 0 and (inside.grad[0] < 0).all() and (inside.grad[1] > 0).all()
    # Ratio above 1 + clip_high with A > 0, and below 1 - clip_low with A < 0: clipped, no gradient.
    outside = torch.tensor([[1e-2] * 3, [-1e-2] * 3], requires_grad=True)
    loss, stats = gspo_loss(outside, old, mask, adv, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
    loss.backward()
    assert stats["clip_fraction"] == 1 and torch.count_nonzero(outside.grad) == 0
    assert abs(loss.detach().item() + ((1 + cfg.clip_high) - (1 - cfg.clip_low)) / 2) < 1e-6
    # ... but a ratio on the other side of 1 is not clipped away: min() keeps the worse surrogate.
    wrong_way = torch.tensor([[-1e-2] * 3, [1e-2] * 3], requires_grad=True)
    gspo_loss(wrong_way, old, mask, adv)[0].backward()
    assert torch.count_nonzero(wrong_way.grad) == 6


def test_gspo_step_on_a_tiny_model_moves_likelihood_toward_the_better_rollout():
    torch.manual_seed(0)
    model = tiny_llama(64)
    seqs = torch.randint(3, 64, (2, 12))
    mask = torch.zeros(2, 11)
    mask[:, 5:] = 1  # loss on the completion part only
    with torch.no_grad():
        old = token_logprobs(model, seqs)
    adv = group_advantages(torch.tensor([1.0, -1.0]))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    new = token_logprobs(model, seqs)
    loss, stats = gspo_loss(new, old, mask, adv, clip_low=0.2, clip_high=0.2, lm_regularization=0.0)
    assert abs(stats["ratio_mean"] - 1) < 1e-5 and abs(loss.detach().item()) < 1e-5  # θ = θ_old: s = 1, mean(A) = 0
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    opt.step()
    with torch.no_grad():
        ratios = torch.exp(sequence_log_ratios(token_logprobs(model, seqs), old, mask))
    assert ratios[0] > 1 > ratios[1]  # the rewarded rollout became likelier, the punished one less
    # LM regularization adds the NLL of the trained tokens.
    base, _ = gspo_loss(new.detach(), old, mask, adv)
    reg, _ = gspo_loss(new.detach(), old, mask, adv, lm_regularization=0.1)
    assert torch.isclose(reg - base, 0.1 * -(new.detach() * mask).sum() / mask.sum())


def test_config_is_table_4():
    cfg = GSPOConfig()
    assert (cfg.learning_rate, cfg.iterations, cfg.clip_low, cfg.clip_high, cfg.kl_coef, cfg.lm_regularization,
            cfg.optimizer, cfg.max_sequence_tokens, cfg.max_tool_calls) == (
        1e-6, 200, 3e-4, 4e-4, 0.0, 0.1, "AdamW", 128_000, 20)
    with pytest.raises(ValueError, match="advantages has shape"):
        gspo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(3))
