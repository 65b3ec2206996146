"""Checkpoint I/O of a Rhea directory: what `RheaForCausalLM.save_pretrained` writes and
`RheaForCausalLM.from_pretrained` reads, with every file checked before it is used.

A Rhea directory holds ``rhea_config.json``, ``mem_tokens.safetensors`` (the `<mem>` read-out slots and
the `<mem>` token's embedding row), the tokenizer (``tokenizer/`` in full, or ``tokenizer_changes.json``: what
rhea changes in the base model's tokenizer, `rhea.modeling.tokenizer_changes`), the PEFT adapters ``compress/``
and ``generate/``, ``latent_injector.safetensors`` and ``score_head.safetensors`` when the config has them, a
model card (``README.md``) and ``rhea_manifest.json``, the SHA-256 of every file the save wrote
(`rhea.modeling.manifest`), checked before a file is read. The base model's weights are not copied:
``rhea_config.json`` names the base.

`save_checkpoint` is atomic: it writes a temporary sibling directory, fsyncs it and renames it into
place, so a failure part-way leaves the previous save as it was. Files of an existing directory that a
save does not write (a user's notes, a training log) are kept.
"""
from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Callable, Mapping

import torch
from torch import nn

from rhea.constants import MEM_TOKEN
from rhea.errors import CheckpointError
from rhea.modeling.adapters import ADAPTERS, quiet_peft
from rhea.modeling.card import CARD_NAME, write_model_card
from rhea.modeling.config import CONFIG_NAME, RheaConfig
from rhea.modeling.manifest import MANIFEST_NAME, verify_manifest, write_manifest
from rhea.modeling.score_head import SCORE_HEAD_WEIGHTS_NAME
from rhea.modeling.tokenizer_changes import TOKENIZER_CHANGES_NAME, read_changes, rebuild_tokenizer, tokenizer_changes
from rhea.storage import atomic_write_text, fsync_directory

MEM_WEIGHTS_NAME = "mem_tokens.safetensors"
INJECTOR_WEIGHTS_NAME = "latent_injector.safetensors"
TOKENIZER_DIR = "tokenizer"
#: the entries a save writes (or removes, when the model has no such part): a re-save replaces exactly these
SAVED_ENTRIES = frozenset({CONFIG_NAME, MEM_WEIGHTS_NAME, INJECTOR_WEIGHTS_NAME, SCORE_HEAD_WEIGHTS_NAME,
                           TOKENIZER_DIR, TOKENIZER_CHANGES_NAME, CARD_NAME, MANIFEST_NAME, *ADAPTERS})


def text_config(config):
    """The text model's part of a Hugging Face config (multimodal configs nest it)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


# ---------------------------------------------------------------------------------------------- reading
def check_checkpoint(directory: Path) -> RheaConfig:
    """The config of Rhea directory `directory`, after checking that every required entry is there and that
    every file its manifest lists has the recorded SHA-256 (`CorruptedCheckpointError` otherwise)."""
    if not directory.is_dir():
        kept = sorted(directory.parent.glob(f".{directory.name}.replaced-*")) if directory.name else []
        hint = (f"; a save into it was cut off between its two renames: the previous save is intact at {kept[-1]}, "
                f"rename it to {directory}" if kept else "")
        raise CheckpointError(f"{directory} is not a directory; pass the folder written by save_pretrained(){hint}")
    verify_manifest(directory)
    config = RheaConfig.load(directory)
    required = [CONFIG_NAME, MEM_WEIGHTS_NAME, *(f"{a}/adapter_config.json" for a in ADAPTERS)]
    missing = [r for r in required if not (directory / r).exists()]
    if not (directory / TOKENIZER_DIR).is_dir() and not (directory / TOKENIZER_CHANGES_NAME).is_file():
        missing.append(f"{TOKENIZER_DIR}/ (or {TOKENIZER_CHANGES_NAME})")
    if missing:
        raise CheckpointError(f"{directory} is missing {missing}; it was not fully written by save_pretrained()")
    return config


def load_tokenizer(directory: Path, base_tokenizer: Callable[[], object]):
    """The tokenizer of `directory`: its ``tokenizer/`` folder, or else the base tokenizer (``base_tokenizer()``,
    called only then) rebuilt with ``tokenizer_changes.json``."""
    from transformers import AutoTokenizer

    if (directory / TOKENIZER_DIR).is_dir():
        try:
            return AutoTokenizer.from_pretrained(directory / TOKENIZER_DIR)
        except Exception as e:
            raise CheckpointError(f"the tokenizer in {directory / TOKENIZER_DIR} could not be loaded ({type(e).__name__}: "
                                  f"{e}); restore it from the directory you saved (or save the model again)") from e
    record = directory / TOKENIZER_CHANGES_NAME
    return rebuild_tokenizer(base_tokenizer(), read_changes(record), record)


def recorded_base(directory: Path, config: RheaConfig):
    """The base model `config` records (`CheckpointError` when it records none)."""
    if not config.base_model:
        raise CheckpointError(f"{directory / CONFIG_NAME} records no base_model; pass base_model=")
    return config.base_model


def check_base(base: nn.Module, config: RheaConfig, directory: Path) -> None:
    """`CheckpointError` unless `base` has the hidden size and vocabulary `directory` was saved for."""
    hidden = int(text_config(base.config).hidden_size)
    if config.base_hidden_size is not None and hidden != config.base_hidden_size:
        raise CheckpointError(
            f"base model has hidden size {hidden}, but {directory} was saved for hidden size "
            f"{config.base_hidden_size} (base {config.base_model!r}); load it onto that base model"
        )
    rows = int(base.get_input_embeddings().weight.shape[0])
    # rows == vocab + 1: a base that already carries the <mem> row (e.g. an exported merge)
    if config.base_vocab_size is not None and rows not in (config.base_vocab_size, config.base_vocab_size + 1):
        raise CheckpointError(
            f"base model has {rows} embedding rows, but {directory} was saved for a vocabulary of "
            f"{config.base_vocab_size} (base {config.base_model!r}); load it onto that base model"
        )


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises its own error type on corrupt headers
        raise CheckpointError(f"{path} is corrupted or unreadable ({e})") from e


def read_mem_weights(directory: Path, config: RheaConfig, hidden: int) -> dict[str, torch.Tensor]:
    """``mem_tokens.safetensors``, every tensor checked against the shape `config` describes."""
    mem = _read_safetensors(directory / MEM_WEIGHTS_NAME)
    expected = {"mem_slot_embeds": (config.n_mem, hidden), "mem_token_row": (hidden,)}
    if config.compress_piece_embeddings:
        expected["mem_piece_embeds"] = (config.compress_piece_embeddings, hidden)
    for key, shape in expected.items():
        if key not in mem or tuple(mem[key].shape) != shape:
            got = tuple(mem[key].shape) if key in mem else "missing"
            raise CheckpointError(f"{directory / MEM_WEIGHTS_NAME}: {key} should have shape {shape}, got {got}")
    if set(mem) - set(expected):
        raise CheckpointError(f"{directory / MEM_WEIGHTS_NAME} holds {sorted(set(mem) - set(expected))}, which "
                              f"{directory / CONFIG_NAME} does not describe (compress_piece_embeddings="
                              f"{config.compress_piece_embeddings}); the two files come from different saves")
    return mem


def load_adapters(base: nn.Module, directory: Path):
    """The PEFT model of `base` with both adapters of `directory` loaded, trainable."""
    from peft import PeftModel

    peft_model = None
    for name in ADAPTERS:  # one at a time, so a bad file is reported with the adapter it belongs to
        try:
            with quiet_peft():
                if peft_model is None:
                    peft_model = PeftModel.from_pretrained(base, str(directory / name), adapter_name=name, is_trainable=True)
                else:
                    peft_model.load_adapter(str(directory / name), adapter_name=name, is_trainable=True)
        except Exception as e:
            raise CheckpointError(
                f"the {name!r} LoRA adapter in {directory / name} could not be loaded ({type(e).__name__}: {e}); "
                f"that folder is corrupted or was not written by save_pretrained(): restore {directory / name} "
                "from the directory you saved (or save the model again)"
            ) from e
    return peft_model


def load_module_weights(module: nn.Module, path: Path, *, missing: str, mismatch: str,
                        cast: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> None:
    """Load safetensors file `path` into `module`, every tensor's name and shape checked first.

    `missing` is the error text when the file is absent, `mismatch` what the tensors should match (both
    follow the path in the message); `cast(value, expected)` converts a stored tensor (default: to the
    module tensor's dtype)."""
    if not path.is_file():
        raise CheckpointError(missing)
    state = _read_safetensors(path)
    expected = module.state_dict()
    bad = sorted(k for k in expected if k not in state or tuple(state[k].shape) != tuple(expected[k].shape))
    if bad or set(state) - set(expected):
        raise CheckpointError(f"{path}: tensors {bad or sorted(set(state) - set(expected))} do not match {mismatch}")
    cast = cast or (lambda value, want: value.to(want.dtype))
    with torch.no_grad():
        module.load_state_dict({k: cast(v, expected[k]) for k, v in state.items()})


# ---------------------------------------------------------------------------------------------- writing
def save_checkpoint(directory: str | os.PathLike, *, config: RheaConfig, tokenizer, peft_model,
                    weights: Mapping[str, tuple[dict[str, torch.Tensor], dict[str, str]]],
                    base_tokenizer=None) -> Path:
    """Write a Rhea directory atomically: `config`, `tokenizer`, both adapters of `peft_model`, and each
    ``weights[file name] = (tensors, metadata)`` as a safetensors file, then the model card and the manifest
    (the SHA-256 of every file written). With `base_tokenizer` (the base model's own tokenizer) the tokenizer
    is stored as ``tokenizer_changes.json``, what it changes in `base_tokenizer`, instead of ``tokenizer/``.

    Everything goes into a temporary sibling of `directory`, is fsynced and renamed into place (an existing
    `directory` is renamed aside first and removed once the new one is in), so an error or a crash
    part-way leaves the previous save intact. Entries of an existing `directory` outside `SAVED_ENTRIES`
    are carried into the new one (hard links where the file system allows, else copies)."""
    import json

    from safetensors.torch import save_file

    changes = tokenizer_changes(tokenizer, base_tokenizer, config.base_model) if base_tokenizer is not None else None
    target = Path(os.path.abspath(directory))
    if target.is_symlink():
        target = target.resolve()
    if target.exists() and not target.is_dir():
        raise CheckpointError(f"{target} is a file; save_pretrained() writes a directory: pass a new or existing "
                              "folder path")
    cwd = Path.cwd().resolve()
    if target.resolve() == cwd or target.resolve() in cwd.parents:
        raise CheckpointError(f"{directory} is the working directory (or holds it); a save replaces the whole "
                              "directory, so pass a folder below it, e.g. save_pretrained('my-rhea')")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.saving-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        config.save(tmp)
        for name, (tensors, metadata) in weights.items():
            save_file(tensors, str(tmp / name), metadata=metadata)
        if changes is None:
            tokenizer.save_pretrained(tmp / TOKENIZER_DIR)
        else:
            atomic_write_text(tmp / TOKENIZER_CHANGES_NAME, json.dumps(changes, indent=1, ensure_ascii=False) + "\n")
        # Non-default adapter names go to subfolders; the <mem> rows are ours, never PEFT's
        # (save_embedding_layers="auto" could write the whole resized embedding matrix).
        peft_model.save_pretrained(str(tmp), save_embedding_layers=False)
        if target.is_dir():
            _carry_over(target, tmp)
        write_manifest(tmp, sorted(SAVED_ENTRIES - {MANIFEST_NAME, CARD_NAME}))
        # PEFT leaves its template card ("More Information Needed"); the directory gets a card that describes
        # it, which lists the manifest and records its own digest in it.
        write_model_card(tmp)
        _fsync_tree(tmp)
        _replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _carry_over(old: Path, new: Path) -> None:
    """Put every entry of `old` outside `SAVED_ENTRIES` (and not written into `new`) into `new`."""
    for entry in old.iterdir():
        if entry.name in SAVED_ENTRIES or (new / entry.name).exists():
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry), new / entry.name)
        elif entry.is_dir():
            shutil.copytree(entry, new / entry.name, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, new / entry.name)


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (and `root`), so the renamed directory is on disk."""
    for path, dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(path, name)
            if os.path.islink(full):
                continue
            fd = os.open(full, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(path)


def _replace_dir(new: Path, target: Path) -> None:
    """Rename `new` to `target`; an existing `target` is renamed aside first, put back if the rename
    fails, and removed once `new` is in place."""
    if not target.exists():
        os.rename(new, target)
        fsync_directory(target.parent)
        return
    aside = target.parent / f".{target.name}.replaced-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(target, aside)
    try:
        os.rename(new, target)
    except BaseException as e:
        try:
            os.rename(aside, target)
        except OSError as again:
            raise CheckpointError(f"could not rename the new save into {target} ({e}) nor the previous one back "
                                  f"({again}); the previous save is intact at {aside}: rename it to {target}") from e
        raise
    fsync_directory(target.parent)
    shutil.rmtree(aside, ignore_errors=True)


def mem_weights(slots: torch.Tensor, token_row: torch.Tensor, piece_offsets: torch.Tensor | None,
                mem_token_id: int) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of ``mem_tokens.safetensors``."""
    mem = {"mem_slot_embeds": slots.detach().cpu().contiguous(), "mem_token_row": token_row.detach().cpu().contiguous()}
    if piece_offsets is not None:
        mem["mem_piece_embeds"] = piece_offsets.detach().cpu().contiguous()
    return mem, {"mem_token": MEM_TOKEN, "mem_token_id": str(mem_token_id)}


__all__ = ["INJECTOR_WEIGHTS_NAME", "MANIFEST_NAME", "MEM_WEIGHTS_NAME", "SAVED_ENTRIES", "TOKENIZER_CHANGES_NAME",
           "TOKENIZER_DIR", "check_base", "check_checkpoint", "load_adapters", "load_tokenizer", "load_module_weights", "mem_weights", "read_mem_weights",
           "recorded_base", "save_checkpoint", "text_config"]
