"""Loading Rhea models offline: a zoo model (with its shipped adapters, when any), a saved Rhea
directory, or any base (see `rhea.modeling.zoo`).

Zoo models are GGUF files shipped on PyPI, dequantized by transformers on first load (~25 s for
SmolLM2-135M, ~70 s for Qwen2.5-Coder-1.5B) and cached as safetensors under ``$RHEA_CACHE``
(default ``~/.cache/rhea``); later loads read the cache.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from rhea.errors import DeviceError
# The zoo (and loading a plain base model from it) lives in rhea.modeling.zoo; these names stay importable from here.
from rhea.modeling.zoo import (  # noqa: F401
    DEFAULT_MODEL,
    MODEL_ZOO,
    ZooModel,
    cache_dir,
    check_model_path,
    load_base_model,
    resolve_model_path,
)


#: trained adapters shipped in the package, one Rhea directory per model-zoo name
SHIPPED_ADAPTERS = Path(__file__).resolve().parent.parent / "data" / "adapters"


def shipped_adapters(name: str) -> Path | None:
    """The Rhea directory of the adapters shipped for zoo model `name`, or None when none are.

    >>> shipped_adapters("smollm2-135m").name
    'smollm2-135m'
    >>> shipped_adapters("no-such-model") is None
    True
    """
    if name not in MODEL_ZOO:
        return None
    path = SHIPPED_ADAPTERS / name
    return path if (path / "rhea_config.json").is_file() else None


def load_zoo_model(name: str = DEFAULT_MODEL, *, trained: bool = True, dtype: torch.dtype = torch.float32):
    """Return ``(RheaForCausalLM, tokenizer)`` on zoo model `name`.

    With ``trained=True`` the adapters shipped in the package for it (`shipped_adapters`) are
    loaded; otherwise, or when none are shipped, fresh (untrained) ``compress``/``generate``
    adapters are created and ``model.adapters_trained`` is False. Loads in `dtype` (float32
    unless given); `load_rhea_model(name)` picks the zoo entry's dtype for the device instead.
    """
    from rhea.modeling.rhea_model import RheaForCausalLM

    shipped = shipped_adapters(name) if trained else None
    if shipped is not None:
        model = RheaForCausalLM.from_pretrained(shipped, base_model=name, dtype=dtype)
    else:
        base, tokenizer = load_base_model(name, dtype=dtype)
        model = RheaForCausalLM.from_base(base, tokenizer)
    return model, model.tokenizer


def load_default_model(*, trained: bool = True, dtype: torch.dtype = torch.float32):
    """Return ``(RheaForCausalLM, tokenizer)`` on the embedded SmolLM2-135M-Instruct (`load_zoo_model`).

    >>> model, tokenizer = load_default_model()      # doctest: +SKIP
    >>> model.compress(["The capital of France is Paris."]).shape   # doctest: +SKIP
    torch.Size([1, 8, 576])
    """
    return load_zoo_model(DEFAULT_MODEL, trained=trained, dtype=dtype)


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` (or None): the first CUDA GPU if torch sees one, else the CPU; otherwise the
    named device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...), checked to exist.

    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise DeviceError(f"device={device!r} is not a torch device ({e}); use 'auto', 'cpu', 'cuda' or 'cuda:N'") \
            from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device={device!r} was asked for but torch.cuda.is_available() is False (torch "
                              f"{torch.__version__}); use --device cpu, or install a CUDA build of torch on a GPU machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                              f"numbered from 0")
    elif dev.type != "cpu":
        raise DeviceError(f"device={device!r}: rhea runs on 'cpu' or 'cuda' devices")
    return dev


def add_device_argument(parser) -> None:
    """The CLIs' shared ``--device`` option (resolved by `resolve_device` once the command runs)."""
    parser.add_argument("--device", default="auto",
                        help="where the model runs: auto (a CUDA GPU if torch sees one, else the CPU), cpu, cuda, cuda:N")


#: ``--dtype`` names the CLIs take; "auto" is the zoo entry's dtype on this device (`default_dtype`)
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


def add_dtype_argument(parser) -> None:
    """The CLIs' shared ``--dtype`` option: what the model computes in (`resolve_dtype`)."""
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                        help="what the model computes in: auto (default: the zoo entry's dtype, bfloat16 for "
                             "qwen2.5-coder-1.5b where the device computes bf16 natively, else float32), float32, "
                             "bfloat16, float16. Replies differ between dtypes: a run resumes in the dtype it began in")


def resolve_dtype(name: str | None) -> torch.dtype | None:
    """The torch dtype a ``--dtype`` name asks for; None for "auto" (the loader decides).

    >>> resolve_dtype("bfloat16"), resolve_dtype("auto")
    (torch.bfloat16, None)
    """
    if name in (None, "auto"):
        return None
    if name not in DTYPE_CHOICES:
        raise DeviceError(f"dtype {name!r} is not one of {', '.join(DTYPE_CHOICES)}")
    return getattr(torch, name)


#: the largest count a command-line option takes (what torch and the C libraries below it hold in an int32)
MAX_COUNT = 2 ** 31 - 1


def int_at_least(minimum: int, meaning: str, maximum: int = MAX_COUNT):
    """An argparse ``type=`` that takes an int >= `minimum`, so a count like ``--turns 0`` is a usage
    error before any model loads; `meaning` says what the number counts.

    >>> int_at_least(1, "user turns per episode")("3")
    3
    >>> int_at_least(0, "raw turns")("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: '-1' must be an int >= 0 (raw turns)
    """
    import argparse

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < minimum:
            raise argparse.ArgumentTypeError(f"{value!r} must be an int >= {minimum} ({meaning})")
        if n > maximum:
            raise argparse.ArgumentTypeError(f"{value[:20]}{'...' if len(value) > 20 else ''} is too large: pass an "
                                             f"int from {minimum} to {maximum:,} ({meaning})")
        return n

    parse.__name__ = f"int >= {minimum}"
    return parse


def number_in(low: float, high: float, meaning: str):
    """An argparse ``type=`` that takes a finite number in [`low`, `high`] (no nan, no inf).

    >>> number_in(-1, 1, "cosine threshold")("0.5")
    0.5
    >>> number_in(-1, 1, "cosine threshold")("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'nan' must be a number from -1 to 1 (cosine threshold)
    """
    import argparse
    import math

    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            x = math.nan
        if not math.isfinite(x) or not low <= x <= high:
            raise argparse.ArgumentTypeError(f"{value[:40]!r} must be a number from {low} to {high} ({meaning})")
        return x

    parse.__name__ = f"number in [{low}, {high}]"
    return parse


#: ``--tau-low`` / ``--tau-high``: cosine thresholds
cosine_threshold = number_in(-1, 1, "a cosine threshold")


_thread_count = int_at_least(1, "torch CPU threads")


def add_threads_argument(parser) -> None:
    """The ``--threads N`` option of the single-sequence commands (``rhea.cli.apply_threads`` sets it)."""
    parser.add_argument("--threads", type=_thread_count, default=None,
                        help="torch CPU threads (default: 1, fastest for one conversation at a time; "
                             "OMP_NUM_THREADS, when set, is kept)")


def load_rhea_model(name_or_path: str = DEFAULT_MODEL, *, dtype: torch.dtype | None = None,
                    device: str | torch.device | None = "cpu"):
    """A `RheaForCausalLM` from a Rhea directory, a zoo name (its shipped adapters when there are
    any, `load_zoo_model`), or any base (fresh adapters).

    `dtype=None` picks the zoo entry's dtype (bfloat16 for ``qwen2.5-coder-1.5b``, where `device`
    computes bf16 natively; float32 on a device without it: `rhea.modeling.zoo.native_bf16`),
    else float32.
    `device`: where the model runs (see `resolve_device`; ``"auto"`` takes a GPU when there is one).
    """
    device = resolve_device(device)
    model = _load_rhea_model(name_or_path, dtype, device)
    return model if device.type == "cpu" else model.to(device)


def _load_rhea_model(name_or_path: str, dtype: torch.dtype | None, device: torch.device | None = None):
    from rhea.modeling.config import CONFIG_NAME
    from rhea.modeling.rhea_model import RheaForCausalLM
    from rhea.modeling.zoo import default_dtype

    check_model_path(name_or_path)
    dtype = dtype or default_dtype(name_or_path, device)

    if os.path.isfile(os.path.join(name_or_path, CONFIG_NAME)):
        return RheaForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    if name_or_path in MODEL_ZOO:
        return load_zoo_model(name_or_path, dtype=dtype)[0]
    base, tokenizer = load_base_model(name_or_path, dtype=dtype)
    return RheaForCausalLM.from_base(base, tokenizer)


def peek_rhea_config(name_or_path: str):
    """The `RheaConfig` that `load_rhea_model(name_or_path)` would use, read without loading any
    weights: a Rhea directory's ``rhea_config.json``, the shipped adapters' for a zoo name,
    else the defaults that fresh adapters get. For checking options before a model loads."""
    from rhea.modeling.config import CONFIG_NAME, RheaConfig

    for directory in (Path(name_or_path), shipped_adapters(name_or_path)):
        if directory is not None and (directory / CONFIG_NAME).is_file():
            return RheaConfig.load(directory)
    return RheaConfig()
