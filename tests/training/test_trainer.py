import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from rhea.context import Conversation, Turn
from rhea.training import JointStep, TierMix, TrainConfig, Trainer, build_conversation_samples, collate
from rhea.training.errors import TrainConfigError

TURNS = [("what is the capital", "paris"), ("which city", "paris is the city"), ("what color", "blue")]


def _samples(model):
    convs = [("", Conversation([Turn(u, a) for u, a in TURNS]))] * 3
    return build_conversation_samples(convs, model.tokenizer, n_mem=model.n_mem, tiers=TierMix(0.0, 0.0))


def _config(out, **optim):
    return TrainConfig.from_dict({
        "optim": {"lr": 3e-2, "grad_accum": 2, "epochs": 2, "warmup_ratio": 0.0, **optim},
        "run": {"output_dir": str(out), "save_every": 2, "keep_checkpoints": 0, "log_with": "none", "seed": 0},
    })


def test_both_adapters_and_mem_slots_get_gradients(tiny_model):
    sample = _samples(tiny_model).samples[-1]
    total, _ = JointStep(tiny_model)(collate([sample], tiny_model.tokenizer.pad_token_id))
    total.backward()
    grads = {n: p.grad for n, p in tiny_model.named_parameters() if p.requires_grad}
    for part in ("lora_A.compress", "lora_B.compress", "lora_A.generate", "lora_B.generate", "mem_slot_embeds"):
        assert any(part in n and g is not None and g.abs().sum() > 0 for n, g in grads.items()), part


def test_a_few_steps_reduce_the_loss_and_save_a_trained_model(tmp_path, tiny_model):
    from rhea.training import SampleSet

    one = _samples(tiny_model).samples[-1]  # the same sample every step: its loss must fall
    result = Trainer(_config(tmp_path, grad_accum=1, lr=3e-2), model=tiny_model, samples=SampleSet([one] * 5, [])).train()
    losses = [h["loss/lm"] for h in result.history]
    assert len(losses) == 10 and losses[-1] < losses[0] - 0.2
    saved = json.loads((tmp_path / "final" / "rhea_config.json").read_text())
    assert saved["extra"]["adapters_trained"] is True
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 10


class _Crash(Exception):
    pass


def test_resume_continues_the_same_loss_curve(tmp_path):
    from rhea.testing import tiny_rhea

    full = Trainer(_config(tmp_path / "a", epochs=1), model=tiny_rhea(), samples=_samples(tiny_rhea())).train()
    crashing = Trainer(_config(tmp_path / "b", epochs=1), model=tiny_rhea(), samples=_samples(tiny_rhea()))
    save = crashing.save_checkpoint

    def save_then_crash(epoch, batch, step):  # the process dies right after checkpoint 4
        save(epoch, batch, step)
        if step == 4:
            raise _Crash

    crashing.save_checkpoint = save_then_crash
    with pytest.raises(_Crash):
        crashing.train()
    assert (tmp_path / "b" / "checkpoint-4" / "progress.json").is_file()
    cfg = _config(tmp_path / "b", epochs=1)
    cfg.run.resume_from = "latest"
    resumed = Trainer(cfg, model=tiny_rhea(), samples=_samples(tiny_rhea())).train()
    a = [h["loss/lm"] for h in full.history]
    b = [h["loss/lm"] for h in resumed.history]  # steps 1-4 from the metrics file, 5.. trained after resuming
    assert [h["step"] for h in resumed.history] == list(range(1, len(a) + 1))
    assert b == pytest.approx(a, rel=1e-5)


def test_autoencode_aux_loss_is_logged(tmp_path, tiny_model):
    cfg = _config(tmp_path, max_steps=1)
    cfg.run.autoencode_weight = 0.5
    result = Trainer(cfg, model=tiny_model, samples=_samples(tiny_model)).train()
    assert result.history[0]["loss/autoencode"] > 0


def _infinite_norm_at(monkeypatch, steps):
    """Make the accelerator report a non-finite gradient norm at the given optimizer steps (1-based)."""
    import accelerate

    real = accelerate.Accelerator.clip_grad_norm_
    calls = []

    def clip(self, params, max_norm, norm_type=2):
        calls.append(1)
        norm = real(self, params, max_norm, norm_type)
        return torch.tensor(float("inf")) if steps == "all" or len(calls) in steps else norm

    monkeypatch.setattr(accelerate.Accelerator, "clip_grad_norm_", clip)


def test_a_step_with_a_non_finite_gradient_is_skipped_and_logged(tmp_path, tiny_model, monkeypatch):
    from rhea.training import SampleSet

    one = _samples(tiny_model).samples[-1]
    _infinite_norm_at(monkeypatch, {2})
    trainer = Trainer(_config(tmp_path, grad_accum=1, lr=3e-2, max_steps=3), model=tiny_model,
                      samples=SampleSet([one] * 5, []))
    result = trainer.train()
    assert [h.get("skipped", False) for h in result.history] == [False, True, False]
    assert all(h["grad_norm"] is not None and h["grad_norm"] > 0 for h in result.history)
    assert result.history[1]["grad_norm"] == float("inf")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("skipped", False) for r in rows] == [False, True, False]
    assert all(torch.isfinite(p).all() for p in tiny_model.parameters())


def test_a_skipped_step_leaves_weights_and_optimizer_state_untouched(tmp_path, monkeypatch):
    from rhea.testing import tiny_rhea
    from rhea.training import SampleSet

    def trained(max_steps, skip):
        model = tiny_rhea()
        one = _samples(model).samples[-1]
        if skip:
            _infinite_norm_at(monkeypatch, skip)
        Trainer(_config(tmp_path / f"{max_steps}{sorted(skip)}", grad_accum=1, lr=3e-2, max_steps=max_steps),
                model=model, samples=SampleSet([one] * 5, [])).train()
        monkeypatch.undo()
        return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    one_step, skipped_last = trained(1, set()), trained(2, {2})
    assert all(torch.equal(one_step[n], skipped_last[n]) for n in one_step)


def test_too_many_non_finite_steps_in_a_row_stop_the_run(tmp_path, tiny_model, monkeypatch):
    from rhea.training.errors import NonFiniteTrainingError

    _infinite_norm_at(monkeypatch, "all")
    with pytest.raises(NonFiniteTrainingError, match="3 steps in a row up to step 3.*optim.lr"):
        Trainer(_config(tmp_path, grad_accum=1, max_nonfinite_steps=3), model=tiny_model,
                samples=_samples(tiny_model)).train()
    with pytest.raises(TrainConfigError, match="max_nonfinite_steps=-1"):
        TrainConfig.from_dict({"optim": {"max_nonfinite_steps": -1}})


def test_config_rejects_unknown_keys_and_bad_values(tmp_path):
    with pytest.raises(TrainConfigError, match=r"unknown key\(s\) \['lr_max'\] in section 'optim'"):
        TrainConfig.from_dict({"optim": {"lr_max": 1}})
    with pytest.raises(TrainConfigError, match="unknown section"):
        TrainConfig.from_dict({"trainer": {}})
    with pytest.raises(TrainConfigError, match="mixed_precision='fp8'"):
        TrainConfig.from_dict({"run": {"mixed_precision": "fp8"}})


def _tiny_base_dir(tmp_path):
    from rhea.testing import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    base = tiny_llama(len(tok))
    path = tmp_path / "tiny-base"
    base.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_rhea_train_cli_runs_two_processes_under_torchrun(tmp_path):
    """DDP smoke run: 2 CPU processes (gloo) through the real `rhea train` entry point."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"data": [x for pair in TURNS for x in pair]}) + "\n" for _ in range(4)))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"model: {{base_model: {_tiny_base_dir(tmp_path)}, n_mem: 4, lora_r: 4, lora_dropout: 0.0}}\n"
        f"data: {{path: {data}, tier_raw: 0.0, tier_drop: 0.0}}\n"
        "optim: {lr: 0.001, grad_accum: 2, epochs: 1}\n"
        f"run: {{output_dir: {tmp_path / 'out'}, save_every: 1, log_with: tensorboard, cpu: true, num_threads: 1, "
        "contrastive_weight: 0.1, contrastive_per_step: 2}\n"  # each rank draws its own triples (shard)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with socket.socket() as probe:  # a free port: a fixed one collides with another suite running on the machine
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "-m", "rhea.cli", "train", "--config", str(cfg)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout + proc.stderr
    progress = json.loads((tmp_path / "out" / "checkpoint-3" / "progress.json").read_text())
    assert progress["num_processes"] == 2
    assert (tmp_path / "out" / "final" / "rhea_config.json").is_file()
    assert any((tmp_path / "out" / "logs").rglob("events.out.tfevents*"))


def test_config_built_run_exports_a_checkpoint_as_fp16_save_pretrained(tmp_path):
    from rhea.modeling import RheaForCausalLM
    from rhea.training.trainer import export_checkpoint

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"data": [x for pair in TURNS for x in pair]}) + "\n")
    cfg = TrainConfig.from_dict({
        "model": {"base_model": str(_tiny_base_dir(tmp_path)), "n_mem": 4, "lora_r": 4, "lora_dropout": 0.0},
        "data": {"path": str(data), "tier_raw": 0.0, "tier_drop": 0.0},
        "optim": {"lr": 1e-2, "grad_accum": 1, "epochs": 1},
        "run": {"output_dir": str(tmp_path / "out"), "save_every": 1, "log_with": "none"},
    })
    trainer = Trainer(cfg)
    trainer.train()
    shipped = export_checkpoint(tmp_path / "out" / "checkpoint-3", cfg, tmp_path / "ship", dtype=torch.float16)
    loaded = RheaForCausalLM.from_pretrained(shipped)
    assert loaded.adapters_trained and loaded.config.extra["training"]["optimizer_steps"] == 3
    assert torch.allclose(loaded.mem_slot_embeds, trainer.model.mem_slot_embeds.detach(), atol=1e-2)
