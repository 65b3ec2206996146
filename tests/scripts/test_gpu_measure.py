"""scripts/gpu_measure.sh, the one device call for the GPU measurements, run dry (every step's command is `true`)."""
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, steps, tok=""):
    env = dict(os.environ, PYTHON="true", STEPS=steps, PACK=str(tmp_path / "pack.tgz"))
    args = ["bash", str(ROOT / "scripts" / "gpu_measure.sh"), str(tmp_path / "out")] + ([tok] if tok else [])
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_selected_steps_run_in_order_and_are_packed(tmp_path):
    res = _run(tmp_path, "attention tests_kernels")
    assert res.returncode == 0, res.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text().split("\n")
    assert [line.split()[0] for line in summary if line] == ["tests_kernels", "attention"]  # the script's order
    assert all(" rc=0 " in line for line in summary if line)
    with tarfile.open(tmp_path / "pack.tgz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"summary.txt", "tests_kernels.log", "attention.log", "env.txt"} <= names


def test_model_steps_need_a_tokenizer_dir(tmp_path):
    res = _run(tmp_path, "decode train reply")
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "out" / "summary.txt").exists()  # nothing ran without TOKENIZER_DIR
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "config.json").write_text("{}")
    res = _run(tmp_path, "decode train reply", str(tok))
    summary = (tmp_path / "out" / "summary.txt").read_text()
    for name in ("decode", "train_b1", "train_b8", "train_b32", "reply_off", "reply_on"):
        assert f"{name} rc=0" in summary
