"""scripts/gpu_compressor.sh, the device calls that train a compressor on a lent GPU, run dry here: the
Python steps are `true` or a logging stand-in for `rhea train`, so what is checked is the shell's own work (pieces
gathered, the newest checkpoint's weights cast to bf16 and split into parts a device call can return, joined back
with its SHA-256 checked, and exported into a loadable directory)."""
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, *args, **env):
    full = {**os.environ, "PYTHON": "true", "STAGED": str(tmp_path / "staged"), "RUNS": str(tmp_path / "runs"), **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_compressor.sh"), *map(str, args)], cwd=ROOT,
                          env=full, capture_output=True, text=True, timeout=120)


def _fake_trainer(tmp_path):
    """A PYTHON that logs a `-m rhea.cli ...` call instead of training and runs every other call (the bf16 cast,
    the export) with this interpreter."""
    log = tmp_path / "argv"
    fake = tmp_path / "fakepy"
    fake.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\n'
                    f'if [ "$1" = -m ]; then exit 0; fi\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    return fake, log


def test_train_returns_the_checkpoint_in_parts_and_join_rebuilds_it(tmp_path):
    fake, _ = _fake_trainer(tmp_path)
    run = tmp_path / "runs" / "qa"
    for step in (5, 10):  # the newest checkpoint is the one returned (by number, not by name order)
        (run / f"checkpoint-{step}").mkdir(parents=True)
        (run / f"checkpoint-{step}" / "progress.json").write_text(f'{{"global_step": {step}}}')
    weights = {"a": torch.randn(5 << 20), "b": torch.randn(3)}  # 20 MiB fp32 -> 10 MiB bf16
    save_file(weights, str(run / "checkpoint-10" / "trainable.safetensors"))
    save_file({"a": torch.zeros(1)}, str(run / "checkpoint-5" / "trainable.safetensors"))
    (run / "metrics.jsonl").write_text('{"step": 10}\n')
    (run / "curve.jsonl").write_text('{"step": 0}\n')
    out = tmp_path / "out"
    out.mkdir()
    res = _run(tmp_path, "train", "qwen2.5-coder-1.5b", "qa", "3", "--set", "data.batch_size=32", PYTHON=str(fake),
               OUT=str(out))
    assert res.returncode == 0, res.stderr
    parts = sorted(out.glob("trainable.part-*"))
    assert [p.name for p in parts] == ["trainable.part-00"]
    assert all(p.stat().st_size <= 15 * 2**20 for p in parts)  # a device call returns files of <= 16 MiB
    assert len(list(out.iterdir())) <= 8  # ... and at most 8 of them
    res = _run(tmp_path, "join", out, tmp_path / "back")
    assert res.returncode == 0, res.stderr
    back = load_file(str(tmp_path / "back" / "trainable.safetensors"))
    assert all(back[k].dtype == torch.bfloat16 and torch.equal(back[k], weights[k].to(torch.bfloat16)) for k in weights)
    assert (tmp_path / "back" / "progress.json").read_text() == '{"global_step": 10}'
    assert (tmp_path / "back" / "curve.jsonl").is_file() and (tmp_path / "back" / "metrics.jsonl").is_file()
    # a damaged part: join refuses and leaves no weights file behind
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    with open(bad / "trainable.part-00", "r+b") as f:
        f.truncate(1000)
    res = _run(tmp_path, "join", bad, tmp_path / "back2")
    assert res.returncode == 3 and "missing or damaged" in res.stderr
    assert not (tmp_path / "back2" / "trainable.safetensors").exists()


def test_piece_gathers_carried_pieces_and_needs_the_manifest(tmp_path):
    src = tmp_path / "stage"
    src.mkdir()
    (src / "piece-003.bin").write_bytes(b"x")
    res = _run(tmp_path, "piece", src)
    assert res.returncode == 2 and "manifest.json" in res.stderr
    (src / "manifest.json").write_text("{}")
    res = _run(tmp_path, "piece", src)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "staged" / "piece-003.bin").read_bytes() == b"x" and "copied 1 piece(s)" in res.stdout


def test_bad_subcommands_and_missing_arguments_are_named(tmp_path):
    res = _run(tmp_path, "fly")
    assert res.returncode == 2 and "unknown subcommand 'fly'" in res.stderr
    res = _run(tmp_path, "join", tmp_path)
    assert res.returncode != 0 and "DEST" in res.stderr
    res = _run(tmp_path, "join", tmp_path, tmp_path / "d")
    assert res.returncode == 2 and "no trainable.part-*" in res.stderr


def test_export_turns_a_joined_checkpoint_into_a_loadable_directory(tmp_path):
    """A checkpoint of a tiny compressor run, joined as the device's parts would be, exported with its config."""
    import yaml

    from rhea.modeling import RheaForCausalLM
    from rhea.testing import save_tiny_base
    from rhea.training import TrainConfig, Trainer
    from tests.training.test_compressor import _write_data

    data, base = tmp_path / "data", tmp_path / "base"
    _write_data(data, extra_replies=12)
    save_tiny_base(base)
    cfg = {"model": {"base_model": str(base), "n_mem": 2, "lora_r": 2, "lora_alpha": 4, "lora_dropout": 0.0,
                     "target_modules": ["q_proj", "v_proj"], "latent_injection": "states"},
           "data": {"path": str(data), "batch_size": 2},
           "optim": {"lr": 0.01, "epochs": None, "max_steps": 1, "grad_accum": 1, "schedule": "constant"},
           "run": {"stage": "compressor", "output_dir": str(tmp_path / "run"), "save_every": 1, "log_with": "none"},
           "compressor": {"chunk_tokens": 8, "eval_every": 0, "eval_n": 2}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    Trainer(TrainConfig.from_dict(cfg)).train()
    joined = tmp_path / "joined"
    joined.mkdir()
    res = _run(tmp_path, "export", joined, tmp_path / "dir", PYTHON=sys.executable, CONFIG=str(config))
    assert res.returncode == 2 and "join the returned parts first" in res.stderr
    for f in ("trainable.safetensors", "progress.json"):
        shutil.copy(tmp_path / "run" / "checkpoint-1" / f, joined / f)
    res = _run(tmp_path, "export", joined, tmp_path / "dir", PYTHON=sys.executable)
    assert res.returncode != 0 and "CONFIG" in res.stderr
    res = _run(tmp_path, "export", joined, tmp_path / "dir", "--set", "model.lora_dropout=0.0",
               PYTHON=sys.executable, CONFIG=str(config))
    assert res.returncode == 0, res.stderr
    exported = RheaForCausalLM.from_pretrained(tmp_path / "dir", base_model=str(base))
    final = RheaForCausalLM.from_pretrained(tmp_path / "run" / "final", base_model=str(base))
    assert exported.config.extra["training"]["optimizer_steps"] == 1
    assert torch.equal(exported.mem_slot_embeds, final.mem_slot_embeds)
    # a snapshot parked before the trainer stage (the model's own parameter names, state.json) exports the same
    old = tmp_path / "parked"
    old.mkdir()
    weights = load_file(str(joined / "trainable.safetensors"))
    save_file({n[len("model."):]: w for n, w in weights.items()}, str(old / "trainable.safetensors"))
    (old / "state.json").write_text('{"step": 1, "settings": {}}')
    res = _run(tmp_path, "export", old, tmp_path / "dir_old", PYTHON=sys.executable, CONFIG=str(config))
    assert res.returncode == 0, res.stderr
    assert torch.equal(RheaForCausalLM.from_pretrained(tmp_path / "dir_old", base_model=str(base)).mem_slot_embeds,
                       final.mem_slot_embeds)


def test_train_precision_defaults_to_tf32_on_cuda_and_is_checked(tmp_path):
    fake, log = _fake_trainer(tmp_path)
    assert _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake)).returncode == 0
    assert _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake), PRECISION="bf16").returncode == 0
    assert _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake), DEVICE="cpu").returncode == 0
    lines = [line for line in log.read_text().splitlines() if line.startswith("-m rhea.cli train")]
    assert all("--config configs/compressor-smollm2-135m.yaml --model smollm2-135m" in x for x in lines)
    assert all("run.resume_from=latest" in x and "run.max_minutes=1" in x for x in lines)
    assert "run.tf32=true" in lines[0] and "mixed_precision" not in lines[0]
    assert "run.mixed_precision=bf16" in lines[1] and "run.tf32=false" in lines[1]
    assert "run.tf32=false" in lines[2] and "run.cpu=true" in lines[2]
    res = _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake), PRECISION="fp16")
    assert res.returncode == 2 and "PRECISION=fp16 is not tf32 or bf16" in res.stderr
    res = _run(tmp_path, "train", "no-such-model", "r", "1", PYTHON=str(fake))
    assert res.returncode == 2 and "configs/compressor-no-such-model.yaml does not exist" in res.stderr


def test_measure_runs_teacher_forced_fact_recall_and_returns_one_file(tmp_path):
    import tarfile

    log = tmp_path / "argv"
    fake = tmp_path / "fakepy"  # writes the three outputs fact_recall.py would, at the --out stem
    fake.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\n'
                    'prev=""; for a in "$@"; do if [ "$prev" = --out ]; then stem=$a; fi; prev=$a; done\n'
                    '[ -n "$stem" ] || exit 0\n'  # e.g. the pip install of carried wheels: writes nothing
                    'echo "{}" > "$stem.json"; echo x > "$stem.png"; echo "{}" > "$stem.rows.jsonl"\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    res = _run(tmp_path, "measure", "qa", PYTHON=str(fake), OUT=str(out))
    assert res.returncode == 2 and "train the run first" in res.stderr
    (tmp_path / "runs" / "qa" / "final").mkdir(parents=True)
    res = _run(tmp_path, "measure", "qa", "--limit", "24", PYTHON=str(fake), OUT=str(out))
    assert res.returncode == 0, res.stderr
    argv = log.read_text().splitlines()[-1]
    assert "benchmarks/fact_recall.py" in argv and "--device cuda" in argv and "--mode teacher-forced" in argv
    assert "latent,latent_other,dropped,raw" in argv and argv.endswith("--limit 24")
    assert [p.name for p in out.iterdir()] == ["fact_recall_qa.tar.gz"]
    with tarfile.open(out / "fact_recall_qa.tar.gz") as t:
        names = {n.lstrip("./") for n in t.getnames()} - {""}
    assert names == {"fact_recall_qa.json", "fact_recall_qa.png", "fact_recall_qa.rows.jsonl"}


def test_finish_runs_the_last_call_in_order_and_measures_even_if_training_left_nothing(tmp_path):
    log = tmp_path / "argv"
    fake = tmp_path / "fakepy"
    fake.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    src = tmp_path / "stage"
    src.mkdir()
    (src / "manifest.json").write_text("{}")
    (src / "piece-018.bin").write_bytes(b"p")
    out = tmp_path / "out"
    out.mkdir()
    res = _run(tmp_path, "finish", src, "qwen2.5-coder-1.5b", "qa", "430", "--set", "data.batch_size=32",
               PYTHON=str(fake), OUT=str(out))
    assert res.returncode == 0, res.stderr  # training's status, not measure's
    calls = [line for line in log.read_text().splitlines() if not line.startswith("-m pip")]
    assert [c.split()[0] for c in calls] == ["scripts/stage_model.py"] * 3 + ["-m"]
    assert "assemble" in calls[2] and "--convert" in calls[2]
    assert calls[3].startswith("-m rhea.cli train --config configs/compressor-qwen2.5-coder-1.5b.yaml")
    minutes = float(calls[3].split("run.max_minutes=")[1].split()[0])
    assert 7.0 < minutes <= 430 / 60 and calls[3].endswith("--set data.batch_size=32") and "run.tf32=true" in calls[3]
    assert (tmp_path / "staged" / "piece-018.bin").read_bytes() == b"p"
    assert "measure failed" in res.stderr  # the fake trained nothing: no final/ to measure, the call goes on
    (tmp_path / "runs" / "qa" / "final").mkdir(parents=True)
    assert _run(tmp_path, "finish", src, "smollm2-135m", "qa", "430", PYTHON=str(fake), OUT=str(out)).returncode == 0
    assert "benchmarks/fact_recall.py" in log.read_text().splitlines()[-1]
    res = _run(tmp_path, "finish", src, "n", "qa", "7m", PYTHON=str(fake))
    assert res.returncode == 2 and "whole seconds" in res.stderr
