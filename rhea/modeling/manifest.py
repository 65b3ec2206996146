"""SHA-256 digests of the files of a Rhea directory, recorded at save and checked at load.

``save_pretrained`` writes ``rhea_manifest.json``: for every file it writes (relative path), its size and
SHA-256. ``from_pretrained`` checks every listed file before any of them is read, so a file altered on disk
(a flipped bit in a safetensors file, a truncated copy) is a `CorruptedCheckpointError` naming the file instead
of weights that load silently. Files the manifest does not list (a user's notes) are not checked. A directory
without a manifest (saved before digests were recorded) loads without the check.

Tools that rewrite a file of a saved directory in place (``rhea calibrate`` on ``rhea_config.json``, the model
card, a dtype cast of the weights) record the new digest with `record_files`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from rhea.errors import CheckpointError, CorruptedCheckpointError
from rhea.storage import atomic_write_text, file_digest

MANIFEST_NAME = "rhea_manifest.json"
FORMAT = 1


def _entry(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "sha256": file_digest(path)}


def _files_under(directory: Path, names) -> list[str]:
    out = []
    for name in names:
        path = directory / name
        if path.is_dir():
            out += [p.relative_to(directory).as_posix() for p in sorted(path.rglob("*")) if p.is_file()]
        elif path.is_file():
            out.append(name)
    return sorted(out)


def write_manifest(directory: str | os.PathLike, names) -> Path:
    """Write ``rhea_manifest.json`` in `directory` for the files and folders `names` (relative to it)."""
    directory = Path(directory)
    files = {rel: _entry(directory / rel) for rel in _files_under(directory, names) if rel != MANIFEST_NAME}
    return atomic_write_text(directory / MANIFEST_NAME,
                             json.dumps({"format": FORMAT, "algorithm": "sha256", "files": files}, indent=1) + "\n")


def read_manifest(directory: str | os.PathLike) -> dict[str, dict] | None:
    """The ``files`` table of `directory`'s manifest; None when it has none. `CheckpointError` when unreadable."""
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptedCheckpointError(f"{path} is unreadable or not JSON ({e}); restore the directory from the copy "
                                       "you saved, or save / export the model again") from e
    files = data.get("files") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(files, dict)
            or not all(isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values())):
        raise CorruptedCheckpointError(f"{path} is not a manifest of format {FORMAT} (an object whose 'files' map "
                                       "each path to its 'sha256'); restore it or save the model again")
    return files


def verify_manifest(directory: str | os.PathLike) -> int:
    """Check every file `directory`'s manifest lists; the number checked (0 without a manifest).

    `CorruptedCheckpointError` naming the first file that is missing, of another size or another digest."""
    directory = Path(directory)
    files = read_manifest(directory)
    if files is None:
        return 0
    fix = ("the file was altered or damaged after the save: restore the directory from the copy you saved, "
           "re-install the package that ships it (for a zoo model's adapters: pip install --force-reinstall rhea), "
           "or save / export the model again")
    for rel, want in sorted(files.items()):
        path = directory / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise CorruptedCheckpointError(f"{directory / MANIFEST_NAME} lists {rel!r}, a path outside the directory; "
                                           "restore the manifest or save the model again")
        if not path.is_file():
            raise CorruptedCheckpointError(f"{path} is listed in {MANIFEST_NAME} but missing; {fix}")
        size = path.stat().st_size
        if "bytes" in want and size != want["bytes"]:
            raise CorruptedCheckpointError(f"{path} has {size} bytes, but {want['bytes']} were saved; {fix}")
        if file_digest(path) != want["sha256"]:
            raise CorruptedCheckpointError(f"{path} does not match the SHA-256 recorded when it was saved "
                                           f"({want['sha256'][:16]}...); {fix}")
    return len(files)


def record_files(directory: str | os.PathLike, names) -> None:
    """Record the current digests of `names` (files or folders of `directory`) in its manifest, when it has one.

    For tools that rewrite a saved directory's file in place; a directory without a manifest is left without."""
    directory = Path(directory)
    try:
        files = read_manifest(directory)
    except CheckpointError:
        return  # a damaged manifest stays as it is: the next load reports it
    if files is None:
        return
    names = list(names)
    for name in names:  # a folder rewritten: drop its old entries, the ones still there are recorded below
        files = {rel: v for rel, v in files.items() if rel != name and not rel.startswith(name.rstrip("/") + "/")}
    files.update({rel: _entry(directory / rel) for rel in _files_under(directory, names) if rel != MANIFEST_NAME})
    atomic_write_text(directory / MANIFEST_NAME,
                      json.dumps({"format": FORMAT, "algorithm": "sha256", "files": dict(sorted(files.items()))},
                                 indent=1) + "\n")


__all__ = ["MANIFEST_NAME", "read_manifest", "record_files", "verify_manifest", "write_manifest"]
