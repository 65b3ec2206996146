"""Keep training snapshots in git history, out of the working tree.

A training snapshot (the folder ``scripts/gpu_compressor.sh join`` rebuilds from a device call: a `rhea train`
checkpoint's trainable weights in bf16, ``progress.json``, ``metrics.jsonl``, ``curve.jsonl``; or an older
snapshot with ``state.json``) must be committed so that a later run on another machine can continue from it.
But the working tree travels with every call to the GPU machine and counts towards its 64 MiB
(docs/reports/gpu.md): a 15 MB SmolLM2 snapshot cost staging three extra calls, and a Qwen2.5-Coder-1.5B
one (~50 MB at r=16 on all linear layers) would not fit beside the tree at all. So a snapshot is
*parked*: committed once under ``checkpoints/NAME/``, then removed from the tree in a second
commit that records the first in ``checkpoints/parked.json`` (commit, each file's size and
SHA-256, the snapshot's step and settings). The weights stay in the history every clone has;
``restore`` writes them back, verified, into an ignored folder.

    python scripts/snapshot_store.py park runs/compressor_deep_snapshot --name compressor-smollm2-135m
    python scripts/snapshot_store.py list
    python scripts/snapshot_store.py restore compressor-smollm2-135m     # -> runs/snapshots/compressor-smollm2-135m
    python scripts/snapshot_store.py restore NAME --to DIR
    python scripts/snapshot_store.py restore NAME --step 534                   # an earlier parked version

``park`` makes its two commits with only its own paths (``git commit -- PATHS``): anything else
staged stays staged and uncommitted. Parking a name again replaces its entry; the earlier
commits stay listed under ``history``. ``restore`` reads each file with ``git show
COMMIT:PATH``, checks size and SHA-256, and refuses to overwrite a file that differs
(``--force`` overwrites). Errors are named (`SnapshotStoreError`) and raised before anything is
written or committed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rhea.errors import RheaError  # noqa: E402

INDEX = "checkpoints/parked.json"
DEFAULT_RESTORE = "runs/snapshots"


class SnapshotStoreError(RheaError, ValueError):
    """A park or restore that cannot be done as asked (the message says why and what to do)."""


def _git(repo: Path, *args: str, binary: bool = False) -> str | bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    if proc.returncode != 0:
        raise SnapshotStoreError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout if binary else proc.stdout.decode()


def repo_root(start: Path) -> Path:
    proc = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SnapshotStoreError(f"{start} is not inside a git checkout; run this from the repository")
    return Path(proc.stdout.strip())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_index(repo: Path) -> dict:
    path = repo / INDEX
    if not path.is_file():
        return {"note": "training snapshots kept in git history, out of the working tree: "
                        "python scripts/snapshot_store.py restore NAME", "snapshots": {}}
    try:
        index = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SnapshotStoreError(f"{path} is not valid JSON ({e}); restore it with `git checkout -- {INDEX}`") from e
    if not isinstance(index.get("snapshots"), dict):
        raise SnapshotStoreError(f"{path} has no 'snapshots' object; restore it with `git checkout -- {INDEX}`")
    return index


def _snapshot_files(src: Path) -> list[Path]:
    if not src.is_dir():
        raise SnapshotStoreError(f"snapshot folder {src} does not exist")
    if not (src / "state.json").is_file() and not (src / "progress.json").is_file():
        raise SnapshotStoreError(f"{src} has neither progress.json nor state.json: not a training snapshot "
                                 "(pass the folder `scripts/gpu_compressor.sh join` wrote)")
    return sorted(p for p in src.rglob("*") if p.is_file())


def park(repo: Path, src: Path, name: str, message: str | None = None) -> dict:
    """Commit `src` as ``checkpoints/NAME/``, then remove it from the tree and record it; returns the entry."""
    if not name or "/" in name or name.startswith("."):
        raise SnapshotStoreError(f"--name {name!r}: use a plain folder name such as compressor-smollm2-135m")
    src = src.resolve()
    files = _snapshot_files(src)
    state_file = src / ("state.json" if (src / "state.json").is_file() else "progress.json")
    try:
        state = json.loads(state_file.read_text())
    except json.JSONDecodeError as e:
        raise SnapshotStoreError(f"{state_file} is not valid JSON ({e})") from e
    if "global_step" in state:  # a trainer checkpoint's progress
        state = {"step": state["global_step"], "settings": None}
    rel_dir = f"checkpoints/{name}"
    dest = repo / rel_dir
    index = load_index(repo)
    blobs = {p.relative_to(src).as_posix(): p.read_bytes() for p in files}
    entry_files = {rel: {"bytes": len(b), "sha256": _sha256(b)} for rel, b in blobs.items()}
    step = state.get("step")
    msg = message or f"snapshot {name}: step {step}"
    # 1. the files under checkpoints/NAME (a commit only if they differ from HEAD)
    if src != dest.resolve():
        if dest.exists():
            shutil.rmtree(dest)
        for rel, b in blobs.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(b)
    _git(repo, "add", "-A", "--", rel_dir)
    if _git(repo, "status", "--porcelain", "--", rel_dir).strip():
        _git(repo, "commit", "-q", "-m", msg, "--", rel_dir)
    commit = _git(repo, "rev-parse", "HEAD").strip()
    for rel, meta in entry_files.items():  # what the commit holds is what was asked for
        held = _git(repo, "show", f"{commit}:{rel_dir}/{rel}", binary=True)
        if _sha256(held) != meta["sha256"]:
            raise SnapshotStoreError(f"{rel_dir}/{rel} at {commit[:12]} differs from {src / rel}")
    # 2. out of the tree, into the index
    old = index["snapshots"].get(name)
    history = ([{"commit": old["commit"], "step": old.get("step")}] + old.get("history", [])) if old else []
    entry = {"commit": commit, "path": rel_dir, "step": step, "settings": state.get("settings"),
             "files": entry_files, "history": history}
    index["snapshots"][name] = entry
    _git(repo, "rm", "-r", "-q", "--", rel_dir)
    shutil.rmtree(dest, ignore_errors=True)
    (repo / INDEX).parent.mkdir(parents=True, exist_ok=True)
    (repo / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    _git(repo, "add", "--", INDEX)
    _git(repo, "commit", "-q", "-m", f"park {name} (step {step}): the weights stay in {commit[:12]}, out of the tree; "
                                      f"python scripts/snapshot_store.py restore {name}", "--", rel_dir, INDEX)
    return entry


def restore(repo: Path, name: str, to: Path | None = None, force: bool = False, step: int | None = None) -> Path:
    """Write parked snapshot `name` into `to` (default runs/snapshots/NAME), each file checked; returns the folder.

    `step`: an earlier version of `name` (one listed under its ``history``) instead of the latest. The index
    records sizes and SHA-256 for the latest only; an earlier one is read whole from its commit, whose blobs
    git itself verifies."""
    index = load_index(repo)
    entry = index["snapshots"].get(name)
    if entry is None:
        known = ", ".join(sorted(index["snapshots"])) or "none"
        raise SnapshotStoreError(f"no parked snapshot named {name!r} in {INDEX} (parked: {known})")
    files = entry["files"]
    if step is not None and step != entry.get("step"):
        earlier = [h for h in entry.get("history", []) if h.get("step") == step]
        if not earlier:
            steps = [entry.get("step")] + [h.get("step") for h in entry.get("history", [])]
            raise SnapshotStoreError(f"snapshot {name!r} has no step {step} (parked steps: {steps})")
        entry, files = {**entry, "commit": earlier[0]["commit"]}, None
    commit = entry["commit"]
    if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                      capture_output=True).returncode != 0:
        raise SnapshotStoreError(f"commit {commit} of snapshot {name!r} is not in this clone "
                                 "(a shallow clone? `git fetch --unshallow`)")
    to = (to if to is not None else repo / DEFAULT_RESTORE / name)
    blobs = {}
    if files is None:  # an earlier version: every file its commit holds under the snapshot's folder
        listed = _git(repo, "ls-tree", "-r", "--name-only", commit, "--", entry["path"]).split("\n")
        files = {f[len(entry["path"]) + 1:]: None for f in listed if f.strip()}
        if not files:
            raise SnapshotStoreError(f"commit {commit[:12]} holds nothing under {entry['path']}; the index was edited")
    for rel, meta in files.items():
        data = _git(repo, "show", f"{commit}:{entry['path']}/{rel}", binary=True)
        if meta is not None and (len(data) != meta["bytes"] or _sha256(data) != meta["sha256"]):
            raise SnapshotStoreError(f"{entry['path']}/{rel} at {commit[:12]} does not match {INDEX} "
                                     f"({len(data)} bytes, expected {meta['bytes']}); the index or history was edited")
        blobs[rel] = data
    clash = [rel for rel, data in blobs.items() if (to / rel).is_file() and (to / rel).read_bytes() != data]
    if clash and not force:
        raise SnapshotStoreError(f"{to} already holds different {', '.join(clash)} (a run that went on from the "
                                 "snapshot?); park it first, pass another --to, or --force to overwrite")
    for rel, data in blobs.items():
        (to / rel).parent.mkdir(parents=True, exist_ok=True)
        (to / rel).write_bytes(data)
    return to


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("park", help="commit a snapshot folder, then move it out of the tree")
    pk.add_argument("src")
    pk.add_argument("--name", required=True)
    pk.add_argument("--message", default=None)
    rs = sub.add_parser("restore", help="write a parked snapshot into an ignored folder")
    rs.add_argument("name")
    rs.add_argument("--to", default=None)
    rs.add_argument("--force", action="store_true")
    rs.add_argument("--step", type=int, default=None, help="an earlier parked version of NAME (see `list`)")
    sub.add_parser("list", help="the parked snapshots")
    args = p.parse_args(argv)
    try:
        repo = repo_root(Path.cwd())
        if args.cmd == "park":
            e = park(repo, Path(args.src), args.name, args.message)
            print(f"parked {args.name}: step {e['step']}, {len(e['files'])} files in {e['commit'][:12]}")
        elif args.cmd == "restore":
            out = restore(repo, args.name, Path(args.to) if args.to else None, args.force, args.step)
            print(f"restored {args.name}" + (f" at step {args.step}" if args.step is not None else "") + f" into {out}")
        else:
            for name, e in sorted(load_index(repo)["snapshots"].items()):
                size = sum(f["bytes"] for f in e["files"].values())
                earlier = ", ".join(f"step {h.get('step')} at {h['commit'][:12]}" for h in e.get("history", []))
                print(f"{name}: step {e['step']} at {e['commit'][:12]}, {size / 1e6:.1f} MB, "
                      f"{len(e.get('history', []))} earlier" + (f" ({earlier}; restore --step N)" if earlier else ""))
    except SnapshotStoreError as e:
        print(f"snapshot_store: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
