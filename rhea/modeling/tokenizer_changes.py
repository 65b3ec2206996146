"""A Rhea tokenizer stored as what it changes in the base model's tokenizer, rebuilt at load.

A Rhea tokenizer is the base model's tokenizer plus what rhea adds to it: the `<mem>` special token, a pad
token where the base has none, any other added token, chat template or setting a user gave it. Copying the
whole tokenizer into every adapter directory costs megabytes (11.4 MB for Qwen2.5's ``tokenizer.json``) that
the installed base model already holds, so a directory may instead carry ``tokenizer_changes.json``: the
difference between the files ``save_pretrained`` writes for the Rhea tokenizer and those it writes for the
base tokenizer, file by file and, for JSON files, top-level key by key (added tokens as the list appended to
the base's). `rebuild_tokenizer` applies it to the base tokenizer's files and loads the result the way a
``tokenizer/`` folder is loaded, so the rebuilt tokenizer is the saved one.

The base vocabulary and merges (``tokenizer.json``'s ``model``) are not stored; their SHA-256 is, and a base
tokenizer whose vocabulary differs is refused (`CheckpointError`) instead of giving other token ids.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from rhea.errors import CheckpointError
from rhea.storage import sha256_bytes

TOKENIZER_CHANGES_NAME = "tokenizer_changes.json"
FORMAT = 1
_BACKEND_FILE = "tokenizer.json"


def tokenizer_files(tokenizer) -> dict[str, str]:
    """The files ``tokenizer.save_pretrained`` writes (name -> text)."""
    with tempfile.TemporaryDirectory(prefix="rhea-tokenizer-") as tmp:
        tokenizer.save_pretrained(tmp)
        files = {}
        for path in sorted(Path(tmp).rglob("*")):
            if path.is_file():
                name = path.relative_to(tmp).as_posix()
                try:
                    files[name] = path.read_text(encoding="utf-8")
                except UnicodeDecodeError as e:
                    raise CheckpointError(f"the tokenizer writes a binary file {name!r}, which a tokenizer change "
                                          "record cannot hold; save the tokenizer in full (save_pretrained("
                                          "..., tokenizer_copy=True))") from e
        return files


def _json_object(text: str):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def vocabulary_digest(backend_json: dict) -> str:
    """SHA-256 of a ``tokenizer.json``'s ``model`` (vocabulary, merges, tokenizer type), keys sorted."""
    model = backend_json.get("model")
    return sha256_bytes(json.dumps(model, sort_keys=True, ensure_ascii=False).encode("utf-8"))


def _file_change(name: str, mine: str, base: str | None) -> dict:
    mine_json = _json_object(mine)
    base_json = _json_object(base) if base is not None else None
    if mine_json is None or base_json is None:
        return {"text": mine}
    change: dict = {}
    set_keys = {k: v for k, v in mine_json.items() if k not in base_json or base_json[k] != v}
    removed = sorted(k for k in base_json if k not in mine_json)
    if name == _BACKEND_FILE and "added_tokens" in set_keys:
        ours, theirs = mine_json.get("added_tokens") or [], base_json.get("added_tokens") or []
        if isinstance(ours, list) and isinstance(theirs, list) and ours[:len(theirs)] == theirs:
            change["append_added_tokens"] = ours[len(theirs):]
            del set_keys["added_tokens"]
    if set_keys:
        change["set"] = set_keys
    if removed:
        change["remove"] = removed
    # keep the key order of the saved file, so the rebuilt file reads as the saved one did
    change["key_order"] = list(mine_json)
    return change


def tokenizer_changes(tokenizer, base_tokenizer, base_model: str | None = None) -> dict:
    """What `tokenizer` changes in `base_tokenizer`'s saved files: the content of ``tokenizer_changes.json``.

    `CheckpointError` when the two do not share a ``tokenizer.json`` (a slow tokenizer): save it in full."""
    mine, base = tokenizer_files(tokenizer), tokenizer_files(base_tokenizer)
    base_backend = _json_object(base.get(_BACKEND_FILE, ""))
    if base_backend is None or _json_object(mine.get(_BACKEND_FILE, "")) is None:
        raise CheckpointError(f"the tokenizer or its base has no {_BACKEND_FILE} (not a fast tokenizer); save the "
                              "tokenizer in full (save_pretrained(..., tokenizer_copy=True))")
    files = {name: _file_change(name, text, base.get(name)) for name, text in mine.items() if base.get(name) != text}
    removed = sorted(name for name in base if name not in mine)
    return {"format": FORMAT, "base_model": base_model, "vocabulary_sha256": vocabulary_digest(base_backend),
            "files": files, "removed_files": removed}


def _apply_json(name: str, base_text: str, change: dict, record: Path) -> str:
    data = _json_object(base_text)
    if data is None:
        raise CheckpointError(f"{record} changes keys of {name}, but the base tokenizer's {name} is not a JSON "
                              "object; load the directory onto the base model it was saved for")
    for key in change.get("remove", []):
        data.pop(key, None)
    data.update(change.get("set", {}))
    if "append_added_tokens" in change:
        data["added_tokens"] = list(data.get("added_tokens") or []) + list(change["append_added_tokens"])
    order = [k for k in change.get("key_order", []) if k in data]
    data = {**{k: data[k] for k in order}, **{k: v for k, v in data.items() if k not in order}}
    return json.dumps(data, indent=2 if name != _BACKEND_FILE else None, ensure_ascii=False)


def read_changes(path: Path) -> dict:
    """``tokenizer_changes.json`` at `path`, its shape checked (`CheckpointError`)."""
    try:
        changes = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is unreadable or not JSON ({e}); restore it from the directory you saved "
                              "(or save the model again)") from e
    ok = (isinstance(changes, dict) and changes.get("format") == FORMAT and isinstance(changes.get("files"), dict)
          and isinstance(changes.get("vocabulary_sha256"), str)
          and all(isinstance(c, dict) for c in changes["files"].values())
          and isinstance(changes.get("removed_files", []), list))
    if not ok:
        raise CheckpointError(f"{path} is not a tokenizer change record of format {FORMAT} (an object with "
                              "'format', 'vocabulary_sha256' and 'files'); restore it or save the model again")
    return changes


def rebuild_tokenizer(base_tokenizer, changes: dict, record: Path):
    """The tokenizer `changes` (read from `record`) describes, built on `base_tokenizer`'s saved files.

    `CheckpointError` when the base tokenizer's vocabulary is not the one the record was made on."""
    from transformers import AutoTokenizer

    files = tokenizer_files(base_tokenizer)
    backend = _json_object(files.get(_BACKEND_FILE, ""))
    got = vocabulary_digest(backend) if backend is not None else None
    if got != changes["vocabulary_sha256"]:
        base = changes.get("base_model") or "the recorded base model"
        raise CheckpointError(
            f"{record} was saved on a base tokenizer whose vocabulary has SHA-256 {changes['vocabulary_sha256'][:12]}..., "
            f"but the base tokenizer given has {str(got)[:12]}...; load the directory onto {base} (reinstall it with "
            "`rhea models install NAME --reinstall` if its files changed), or save the model with its tokenizer in "
            "full (save_pretrained(..., tokenizer_copy=True))")
    for name in changes.get("removed_files", []):
        files.pop(name, None)
    for name, change in changes["files"].items():
        if "text" in change:
            files[name] = change["text"]
        else:
            if name not in files:
                raise CheckpointError(f"{record} changes keys of {name}, which the base tokenizer does not write; "
                                      "load the directory onto the base model it was saved for")
            files[name] = _apply_json(name, files[name], change, record)
    with tempfile.TemporaryDirectory(prefix="rhea-tokenizer-") as tmp:
        for name, text in files.items():
            path = Path(tmp) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return AutoTokenizer.from_pretrained(tmp)


__all__ = ["TOKENIZER_CHANGES_NAME", "read_changes", "rebuild_tokenizer", "tokenizer_changes", "tokenizer_files",
           "vocabulary_digest"]
