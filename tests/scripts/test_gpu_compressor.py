"""scripts/gpu_compressor.sh, the device calls that train a compressor on a lent GPU, run dry here: the
Python steps are `true`, so what is checked is the shell's own work (pieces gathered, the snapshot split into
parts a device call can return, and joined back with its SHA-256 checked)."""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, *args, **env):
    full = {**os.environ, "PYTHON": "true", "STAGED": str(tmp_path / "staged"), "RUNS": str(tmp_path / "runs"), **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_compressor.sh"), *map(str, args)], cwd=ROOT,
                          env=full, capture_output=True, text=True, timeout=120)


def test_train_returns_the_snapshot_in_parts_and_join_rebuilds_it(tmp_path):
    snap = tmp_path / "runs" / "qa.snapshot"
    snap.mkdir(parents=True)
    data = os.urandom(1 << 20) * 33  # 33 MiB: three parts of at most 15 MiB
    (snap / "trainable.safetensors").write_bytes(data)
    (snap / "state.json").write_text('{"step": 7}')
    (snap / "curve.jsonl").write_text('{"step": 0}\n')
    out = tmp_path / "out"
    out.mkdir()
    res = _run(tmp_path, "train", "qwen2.5-coder-1.5b", "qa", "3", "--batch", "32", OUT=str(out))
    assert res.returncode == 0, res.stderr
    parts = sorted(out.glob("trainable.part-*"))
    assert [p.name for p in parts] == ["trainable.part-00", "trainable.part-01", "trainable.part-02"]
    assert all(p.stat().st_size <= 15 * 2**20 for p in parts)  # a device call returns files of <= 16 MiB
    assert len(list(out.iterdir())) <= 8  # ... and at most 8 of them
    res = _run(tmp_path, "join", out, tmp_path / "back")
    assert res.returncode == 0, res.stderr
    assert hashlib.sha256((tmp_path / "back" / "trainable.safetensors").read_bytes()).digest() == \
        hashlib.sha256(data).digest()
    assert (tmp_path / "back" / "state.json").read_text() == '{"step": 7}'
    # a damaged part: join refuses and leaves no snapshot file behind
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    with open(bad / "trainable.part-01", "r+b") as f:
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


def test_seed_puts_a_carried_snapshot_where_train_resumes_it(tmp_path):
    src = tmp_path / "parked"
    src.mkdir()
    res = _run(tmp_path, "seed", "qa", src)
    assert res.returncode == 2 and "trainable.safetensors is not here" in res.stderr
    (src / "trainable.safetensors").write_bytes(b"w" * 100)
    (src / "state.json").write_text('{"step": 374}')
    (src / "curve.jsonl").write_text('{"step": 0}\n')
    res = _run(tmp_path, "seed", "qa", src)
    assert res.returncode == 0, res.stderr
    seeded = tmp_path / "runs" / "qa.snapshot"
    assert (seeded / "trainable.safetensors").read_bytes() == b"w" * 100
    assert (seeded / "state.json").read_text() == '{"step": 374}' and (seeded / "curve.jsonl").is_file()
    # a run with its own checkpoint would resume that, not the seed: refused
    (tmp_path / "runs" / "qa" / "checkpoint").mkdir(parents=True)
    res = _run(tmp_path, "seed", "qa", src)
    assert res.returncode == 2 and "already has a checkpoint" in res.stderr


def test_train_precision_defaults_to_tf32_on_cuda_and_is_checked(tmp_path):
    log = tmp_path / "argv"
    fake = tmp_path / "fakepy"
    fake.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    assert _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake)).returncode == 0
    assert _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake), PRECISION="bf16").returncode == 0
    assert _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake), DEVICE="cpu").returncode == 0
    lines = [line for line in log.read_text().splitlines() if "train_compressor.py" in line]
    assert "--tf32" in lines[0] and "--bf16" not in lines[0]
    assert "--bf16" in lines[1] and "--tf32" not in lines[1]
    assert "--tf32" not in lines[2] and "--bf16" not in lines[2]
    res = _run(tmp_path, "train", "smollm2-135m", "r", "1", PYTHON=str(fake), PRECISION="fp16")
    assert res.returncode == 2 and "PRECISION=fp16 is not tf32 or bf16" in res.stderr


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
    (tmp_path / "runs" / "qa" / "latest").mkdir(parents=True)
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
    res = _run(tmp_path, "finish", src, "qwen2.5-coder-1.5b", "qa", "430", "--batch", "32", PYTHON=str(fake), OUT=str(out))
    assert res.returncode == 0, res.stderr  # training's status, not measure's
    calls = [line for line in log.read_text().splitlines() if not line.startswith("-m pip")]
    assert [c.split()[0] for c in calls] == ["scripts/stage_model.py"] * 3 + ["scripts/train_compressor.py"]
    assert "assemble" in calls[2] and "--convert" in calls[2]
    minutes = float(calls[3].split("--max-minutes ")[1].split()[0])
    assert 7.0 < minutes <= 430 / 60 and calls[3].endswith("--batch 32") and "--tf32" in calls[3]
    assert (tmp_path / "staged" / "piece-018.bin").read_bytes() == b"p"
    assert "measure failed" in res.stderr  # the fake trained nothing: no latest/ to measure, the call goes on
    (tmp_path / "runs" / "qa" / "latest").mkdir(parents=True)
    assert _run(tmp_path, "finish", src, "n", "qa", "430", PYTHON=str(fake), OUT=str(out)).returncode == 0
    assert "benchmarks/fact_recall.py" in log.read_text().splitlines()[-1]
    res = _run(tmp_path, "finish", src, "n", "qa", "7m", PYTHON=str(fake))
    assert res.returncode == 2 and "whole seconds" in res.stderr
