"""scripts/snapshot_store.py: park a snapshot in git history and restore it, verified."""
from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "snapshot_store.py"


@pytest.fixture(scope="module")
def store():
    spec = importlib.util.spec_from_file_location("snapshot_store", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / ".gitignore").write_text("/runs/\n")
    (r / "README").write_text("x\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "init")
    return r


def snapshot(folder: Path, step: int, payload: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainable.safetensors").write_bytes(payload)
    (folder / "state.json").write_text(json.dumps({"step": step, "settings": {"n_mem": 8}}))
    (folder / "curve.jsonl").write_text(json.dumps({"step": step, "own": 0.5}) + "\n")
    return folder


def test_park_moves_the_snapshot_into_history_and_restore_brings_it_back(store, repo):
    src = snapshot(repo / "runs" / "snap", 50, b"\x00\x01weights" * 100)
    (repo / "other.txt").write_text("staged, not mine\n")
    git(repo, "add", "other.txt")
    before = int(git(repo, "rev-list", "--count", "HEAD"))
    entry = store.park(repo, src, "cmp")
    assert int(git(repo, "rev-list", "--count", "HEAD")) == before + 2
    assert not (repo / "checkpoints" / "cmp").exists()
    tracked = git(repo, "ls-files").split()
    assert "checkpoints/parked.json" in tracked and not any(t.startswith("checkpoints/cmp") for t in tracked)
    # the unrelated staged file was neither committed nor unstaged
    assert "other.txt" in git(repo, "diff", "--cached", "--name-only")
    assert entry["step"] == 50 and set(entry["files"]) == {"trainable.safetensors", "state.json", "curve.jsonl"}
    out = store.restore(repo, "cmp")
    assert out == repo / "runs" / "snapshots" / "cmp"
    for name in entry["files"]:
        assert (out / name).read_bytes() == (src / name).read_bytes()
    # restoring again over identical files is fine
    store.restore(repo, "cmp")


def test_parking_again_keeps_the_earlier_commit_in_history(store, repo):
    src = snapshot(repo / "runs" / "snap", 50, b"a" * 10)
    first = store.park(repo, src, "cmp")
    snapshot(src, 100, b"b" * 10)
    second = store.park(repo, src, "cmp")
    assert second["step"] == 100 and second["history"][0] == {"commit": first["commit"], "step": 50}
    out = store.restore(repo, "cmp", to=repo / "runs" / "r2")
    assert (out / "trainable.safetensors").read_bytes() == b"b" * 10


def test_restore_of_an_earlier_step(store, repo):
    src = snapshot(repo / "runs" / "snap", 50, b"a" * 10)
    store.park(repo, src, "cmp")
    snapshot(src, 100, b"b" * 10)
    store.park(repo, src, "cmp")
    out = store.restore(repo, "cmp", to=repo / "runs" / "old", step=50)
    assert (out / "trainable.safetensors").read_bytes() == b"a" * 10
    assert json.loads((out / "state.json").read_text())["step"] == 50
    assert sorted(p.name for p in out.iterdir()) == ["curve.jsonl", "state.json", "trainable.safetensors"]
    assert (store.restore(repo, "cmp", to=repo / "runs" / "new", step=100) / "trainable.safetensors").read_bytes() == b"b" * 10
    with pytest.raises(store.SnapshotStoreError, match=r"no step 75 \(parked steps: \[100, 50\]\)"):
        store.restore(repo, "cmp", to=repo / "runs" / "x", step=75)


def test_park_of_a_tracked_folder_reuses_its_commit(store, repo):
    dest = snapshot(repo / "checkpoints" / "cmp", 800, b"c" * 10)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "snapshot")
    head = git(repo, "rev-parse", "HEAD").strip()
    entry = store.park(repo, dest, "cmp")
    assert entry["commit"] == head
    assert not dest.exists()
    assert (store.restore(repo, "cmp") / "trainable.safetensors").read_bytes() == b"c" * 10


def test_restore_refuses_a_different_file_and_an_edited_index(store, repo):
    src = snapshot(repo / "runs" / "snap", 50, b"a" * 10)
    store.park(repo, src, "cmp")
    out = store.restore(repo, "cmp")
    (out / "trainable.safetensors").write_bytes(b"went on training")
    with pytest.raises(store.SnapshotStoreError, match="already holds different trainable.safetensors"):
        store.restore(repo, "cmp")
    store.restore(repo, "cmp", force=True)
    assert (out / "trainable.safetensors").read_bytes() == b"a" * 10
    index = json.loads((repo / store.INDEX).read_text())
    index["snapshots"]["cmp"]["files"]["trainable.safetensors"]["sha256"] = "0" * 64
    (repo / store.INDEX).write_text(json.dumps(index))
    with pytest.raises(store.SnapshotStoreError, match="does not match"):
        store.restore(repo, "cmp", to=repo / "runs" / "elsewhere")
    assert not (repo / "runs" / "elsewhere").exists()


def test_named_errors(store, repo):
    with pytest.raises(store.SnapshotStoreError, match="no parked snapshot named 'nope'"):
        store.restore(repo, "nope")
    (repo / "runs" / "empty").mkdir(parents=True)
    with pytest.raises(store.SnapshotStoreError, match="has neither progress.json nor state.json"):
        store.park(repo, repo / "runs" / "empty", "cmp")
    with pytest.raises(store.SnapshotStoreError, match="does not exist"):
        store.park(repo, repo / "runs" / "missing", "cmp")
    src = snapshot(repo / "runs" / "snap", 1, b"x")
    with pytest.raises(store.SnapshotStoreError, match="plain folder name"):
        store.park(repo, src, "../escape")
    assert store.main(["restore", "nope"]) == 2
