import pytest
import torch

from rhea.calibration.data import triples
from rhea.training import TrainConfig, Trainer
from rhea.training.errors import TrainConfigError
from rhea.training.losses import ContrastiveRetrievalLoss, max_cosine

from .test_trainer import _config, _samples


def test_max_cosine_matches_the_inference_kernel():
    from rhea_kernels.reference import turn_scores

    q, r, c = torch.randn(3, 4, 16), torch.randn(5, 4, 16), torch.randn(16)
    expected = torch.stack([turn_scores(q[i][None], r[None], center=c)[0] for i in range(3)])
    assert torch.allclose(max_cosine(q, r, c), expected, atol=1e-5)


def test_contrastive_loss_trains_the_compress_adapter_and_falls(tiny_model):
    loss_fn = ContrastiveRetrievalLoss(triples("train", 8, seed=0), per_step=8, temperature=0.1)
    params = [p for n, p in tiny_model.named_parameters() if p.requires_grad and ("compress" in n or "mem_slot" in n)]
    opt = torch.optim.Adam(params, lr=1e-2)
    tiny_model.train()
    losses = []
    for _ in range(12):
        torch.manual_seed(0)  # the same draw every step: its loss must fall
        loss = loss_fn(tiny_model, {}, None, None)
        opt.zero_grad()
        loss.backward()
        losses.append(float(loss.detach()))
        opt.step()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    assert losses[-1] < losses[0] - 0.3


def test_trainer_logs_the_contrastive_loss(tmp_path, tiny_model):
    cfg = _config(tmp_path, max_steps=1)
    cfg.run.contrastive_weight = 0.5
    cfg.run.contrastive_per_step = 4
    result = Trainer(cfg, model=tiny_model, samples=_samples(tiny_model)).train()
    assert "loss/contrastive" in result.history[0] and result.history[0]["loss/contrastive"] > 0


@pytest.mark.parametrize("bad", [{"contrastive_weight": -1}, {"contrastive_temperature": 0}, {"contrastive_per_step": 1}])
def test_bad_contrastive_settings_are_named(bad):
    with pytest.raises(TrainConfigError, match="contrastive"):
        TrainConfig.from_dict({"run": bad})


def test_ranks_draw_disjoint_triples_and_a_resumed_rank_draws_as_an_unbroken_one():
    pool = triples("train", 16, seed=0)
    a = ContrastiveRetrievalLoss(pool, per_step=4).shard(0, 2, seed=3)
    b = ContrastiveRetrievalLoss(pool, per_step=4).shard(1, 2, seed=3)
    draws = [a.draw() for _ in range(3)]
    for da, db in zip(draws, (b.draw() for _ in range(3))):
        assert len(set(da) | set(db)) == 8  # two ranks, eight distinct pairs in one step
    assert draws[0] != draws[1]  # and a new draw each call
    resumed = ContrastiveRetrievalLoss(pool, per_step=4).shard(0, 2, seed=3, calls=2)
    assert resumed.draw() == draws[2]
    small = ContrastiveRetrievalLoss(pool[:5], per_step=4)
    r0, r1 = small.shard(0, 2, seed=0).draw(), ContrastiveRetrievalLoss(pool[:5], per_step=4).shard(1, 2, seed=0).draw()
    assert len(set(r0)) == 4 and len(set(r1)) == 4 and set(r0) | set(r1) == set(range(5))  # the pool wraps
    torch.manual_seed(0)
    single = ContrastiveRetrievalLoss(pool, per_step=4).draw()  # one process: the global RNG, as before
    torch.manual_seed(0)
    assert single == torch.randperm(16)[:4].tolist()
