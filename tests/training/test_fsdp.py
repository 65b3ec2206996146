"""Sharded training: FSDP2 through `accelerate launch` on CPU (2 gloo processes) equals one process.

Also the adapter-pinned activation checkpointing the joint step needs (both adapters in one graph).
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rhea.training import JointStep, TrainConfig, Trainer, collate
from rhea.training.data import Sample
from rhea.training.losses import AuxiliaryLoss, autoencode_loss
from rhea.training.recompute import enable_activation_checkpointing
from rhea.training.trainer import export_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TURNS = [("what is the capital", "paris"), ("which city", "paris is the city"), ("what color", "blue"),
         ("and the sky", "grey today")]


def _grads(checkpointing: bool) -> dict:
    from rhea.testing import tiny_rhea

    model = tiny_rhea().train()
    if checkpointing:
        enable_activation_checkpointing(model)
    ids = [5, 6] + [model.mem_token_id] * 4 + [7, 8]
    batch = collate([Sample(ids, [-100] * 6 + [7, 8], ["paris is the city"])], model.tokenizer.pad_token_id)
    total, _ = JointStep(model, [AuxiliaryLoss("autoencode", autoencode_loss, 0.5)])(batch)
    total.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


def test_checkpointed_gradients_equal_plain_ones_for_both_adapters():
    plain, checkpointed = _grads(False), _grads(True)
    assert set(plain) == set(checkpointed)
    for part in ("lora_A.compress", "lora_B.compress", "lora_A.generate", "lora_B.generate", "mem_slot_embeds"):
        names = [n for n in plain if part in n]
        assert names and any(plain[n].abs().sum() > 0 for n in names), part
        for n in names:  # unpinned recomputation (the old bug) differed by ~1.9 here
            torch.testing.assert_close(checkpointed[n], plain[n], rtol=1e-5, atol=1e-6, msg=n)


def _setup(tmp_path):
    from rhea.testing import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    base = tiny_llama(len(tok))
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    data = tmp_path / "d.jsonl"  # 12 samples; some have no history, so one process compresses nothing
    data.write_text("".join(json.dumps({"data": [x for p in TURNS[i % 2: i % 2 + 3] for x in p]}) + "\n" for i in range(4)))


def _config(tmp_path, name, *, grad_accum, checkpointing) -> dict:
    return {
        "model": {"base_model": str(tmp_path / "base"), "n_mem": 4, "lora_r": 4, "lora_dropout": 0.0},
        "data": {"path": str(tmp_path / "d.jsonl"), "tier_raw": 0.0, "tier_drop": 0.0},
        "optim": {"lr": 0.01, "grad_accum": grad_accum, "epochs": 1, "warmup_ratio": 0.0},
        "run": {"output_dir": str(tmp_path / name), "save_every": 1, "keep_checkpoints": 0, "log_with": "none",
                "cpu": True, "num_threads": 1, "gradient_checkpointing": checkpointing, "autoencode_weight": 0.5},
    }


def _launch(cfg_path, *extra, timeout=240):
    proc = _launch_once(cfg_path, *extra, timeout=timeout)
    if "address already in use" in (proc.stdout + proc.stderr).lower():  # another job took the free port meanwhile
        proc = _launch_once(cfg_path, *extra, timeout=timeout)
    return proc


def _launch_once(cfg_path, *extra, timeout):
    with socket.socket() as probe:  # a free port per launch
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "configs/accelerate/fsdp.yaml"),
           "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(port),
           str(ROOT / "tests/training/fsdp_run.py"), str(cfg_path), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RHEA_TEST_WATCHDOG_S": str(timeout - 30),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))


def _adapters(directory: Path) -> dict:
    out = {}
    for path in sorted(directory.rglob("*.safetensors")):
        for k, v in load_file(str(path)).items():
            out[f"{path.relative_to(directory)}:{k}"] = v
    return out


def _assert_same_adapters(a: Path, b: Path):
    """Every safetensors tensor under `a` and `b` (adapters, <mem> rows, merged weights) agrees."""
    ta, tb = _adapters(a), _adapters(b)
    assert ta.keys() == tb.keys() and len(ta) >= 4
    for k in ta:
        # measured: sharded and single runs 1.5e-8 apart at most; two optimizer steps move the weights 1e-2
        torch.testing.assert_close(tb[k], ta[k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.slow
def test_fsdp_two_processes_killed_and_resumed_match_one_process(tmp_path):
    """FSDP2 (accelerate launch, 2 gloo processes, gradient checkpointing on) vs one unsharded process.

    Per optimizer step the two processes see the same 4 micro-batches as the single process
    (2 each, grad_accum 2 vs 4), so losses, checkpoints and exported adapters must agree. The
    sharded run is killed right after checkpoint 2 and resumed from it.
    """
    _setup(tmp_path)
    single_cfg = TrainConfig.from_dict(_config(tmp_path, "single", grad_accum=4, checkpointing=False))
    single = Trainer(single_cfg).train()
    assert len(single.history) == 3

    cfg = _config(tmp_path, "fsdp", grad_accum=2, checkpointing=True)
    cfg_path = tmp_path / "fsdp.json"
    cfg_path.write_text(json.dumps(cfg))
    killed = _launch(cfg_path, "2")
    assert killed.returncode != 0 and "killed after checkpoint 2" in killed.stdout, killed.stderr[-3000:]
    log = killed.stdout + killed.stderr
    assert "2 process(es), FSDP2, 3 sharded units" in log  # root + one unit per decoder layer
    assert (tmp_path / "fsdp" / "checkpoint-2" / "pytorch_model_fsdp_0").is_dir()  # accelerate's sharded state
    assert not (tmp_path / "fsdp" / "final").exists()

    cfg["run"]["resume_from"] = "latest"
    cfg_path.write_text(json.dumps(cfg))
    resumed = _launch(cfg_path)
    # Rarely (2 runs in ~15 under a loaded xdist CI), a gloo process aborts in C++ at exit, after the run finished
    # and destroyed its process group ("terminate called without an active exception", SIGABRT): the launcher
    # then fails although every file is written. Only that exit is forgiven; what the run wrote is checked below.
    teardown_abort = ("terminate called without an active exception" in resumed.stderr
                      and (tmp_path / "fsdp" / "final").is_dir() and (tmp_path / "fsdp" / "checkpoint-3").is_dir())
    assert resumed.returncode == 0 or teardown_abort, resumed.stderr[-3000:]

    rows = [json.loads(line) for line in (tmp_path / "fsdp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for mine, ref in zip(rows, single.history):
        for key in ("loss/lm", "loss/autoencode"):
            assert mine[key] == pytest.approx(ref[key], rel=1e-4), (mine["step"], key)
    # save_pretrained at the end, and `export_checkpoint` (rhea export's input) of a sharded checkpoint
    _assert_same_adapters(tmp_path / "single" / "final", tmp_path / "fsdp" / "final")
    export_checkpoint(tmp_path / "fsdp" / "checkpoint-3", single_cfg, tmp_path / "exp-fsdp")
    export_checkpoint(tmp_path / "single" / "checkpoint-3", single_cfg, tmp_path / "exp-single")
    _assert_same_adapters(tmp_path / "exp-single", tmp_path / "exp-fsdp")
    _assert_same_adapters(tmp_path / "exp-single", tmp_path / "single" / "final")
    # `rhea export` (generate adapter merged into the base) of the sharded run's final directory
    from rhea.modeling.export import export_model

    export_model(tmp_path / "fsdp" / "final", tmp_path / "merged-fsdp")
    export_model(tmp_path / "single" / "final", tmp_path / "merged-single")
    _assert_same_adapters(tmp_path / "merged-single", tmp_path / "merged-fsdp")


def test_fsdp1_is_refused_with_a_named_error(monkeypatch, tmp_path):
    from rhea.training.errors import TrainConfigError

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "1")
    cfg = TrainConfig.from_dict({"run": {"output_dir": str(tmp_path), "log_with": "none", "cpu": True}})
    with pytest.raises(TrainConfigError, match="FSDP2 only"):
        Trainer(cfg)
