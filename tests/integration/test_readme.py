"""Every ```python block and every command of README.md runs as written.

The commands are the lines of the README's ```bash blocks (```text blocks are synopses, not
commands); each runs in bash from a scratch directory holding what a fresh clone has next to
them (`configs/`, `data/`), with `rhea` being this checkout's console script. The ```python
blocks run in order in one interpreter, as a reader pasting them would. Nothing is skipped:
no README block or command needs Qwen or a GPU (those appear in prose only: `make install-qwen`,
`--model qwen2.5-coder-1.5b`, `--device cuda`).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: `make` targets, mapped to what they run once installed: the test must not rebuild the venv
#: it runs in (the Makefile's `demo: install` then runs `$(VENV)/bin/rhea chat --demo`).
MAKE_TARGETS = {
    "make demo": "rhea chat --demo",  # a README command of its own below: run once, there
    # `make test` is the suite this test belongs to: running it here would recurse.
    "make test": None,
}

#: What each command must leave behind beyond exit status 0: (text in its output, files it writes).
EXPECT = {
    "rhea chat --demo": (["[yes] global instruction captured", "[yes] related turn kept", "trace of turn 5"], []),
    "printf": (["trace of turn 1", "instruction block (1):"], []),
    "rhea export": (["exported to runs/export-smollm2"], ["runs/export-smollm2/merged/model.safetensors",
                                                        "runs/export-smollm2/compress/adapter_config.json"]),
    "rhea shrink": (["-> 4, update kept"], ["runs/shrunk-smollm2/compress/adapter_model.safetensors"]),
    "rhea bench": (["| rhea"], ["runs/ir/summary.md", "runs/ir/tokens_vs_turn.png"]),
    "rhea train --config": (['"optimizer_steps": 2'], ["runs/rhea-example/final/rhea_config.json"]),
    "rhea calibrate": ([], ["runs/calibrated/rhea_config.json"]),
    "rhea train-acr": ([], ["runs/acr/state.json"]),
    "rhea models list": (["smollm2-135m"], []),
    "rhea kernels info": ([], []),
}


def fenced(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, flags=re.M | re.S)


def shell_commands() -> list[str]:
    commands = []
    for block in fenced("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()  # trailing "# comment"
            if line:
                commands.append(line)
    return commands


COMMANDS = shell_commands()


def test_the_readme_has_blocks_and_commands_to_run():
    assert len(fenced("python")) >= 2 and len(COMMANDS) >= 10
    assert set(MAKE_TARGETS) <= set(COMMANDS)
    unknown = [c for c in COMMANDS if c not in MAKE_TARGETS and not any(c.startswith(p) for p in EXPECT)]
    assert not unknown, f"README commands with no expectation here: {unknown}"


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A scratch directory with what the commands read from a fresh clone."""
    where = tmp_path_factory.mktemp("readme")
    for name in ("configs", "data"):
        shutil.copytree(ROOT / name, where / name)
    return where


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # one torch thread per process, as the suite runs (2 xdist workers on 2 cores; tests/conftest.py)
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.mark.parametrize("command", COMMANDS, ids=[re.sub(r"[^\w.=-]+", "_", c)[:60] for c in COMMANDS])
def test_readme_command_runs_as_written(command, clone):
    if command in MAKE_TARGETS:
        if MAKE_TARGETS[command] is None:
            pytest.skip(f"`{command}` runs the test suite this test is part of")
        if MAKE_TARGETS[command] in COMMANDS:
            pytest.skip(f"`{command}` runs `{MAKE_TARGETS[command]}`, which runs here as its own README command")
        command = MAKE_TARGETS[command]
    script = f'rhea() {{ "{sys.executable}" -m rhea.cli "$@"; }}\nset -o pipefail\n{command}\n'
    proc = subprocess.run(["bash", "-c", script], cwd=clone, env=_env(), capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"`{command}` exited {proc.returncode}:\n{output[-3000:]}"
    texts, files = next(v for p, v in EXPECT.items() if command.startswith(p))
    for text in texts:
        assert text in output, f"`{command}` printed no {text!r}:\n{output[-3000:]}"
    for name in files:
        assert (clone / name).exists(), f"`{command}` wrote no {name}"


def test_readme_python_blocks_run_as_written(tmp_path):
    code = "\n\n".join(fenced("python"))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # the instruction block after two turns, then turn 0's decision; the fresh model's adapters are untrained
    assert "['From now on, answer in one sentence.'] [(0, " in proc.stdout
    assert proc.stdout.splitlines()[-1] == "False"
    for name in ("my-session/session.json", "my-rhea/rhea_config.json", "my-rhea-export/merged/model.safetensors"):
        assert (tmp_path / name).exists(), name
