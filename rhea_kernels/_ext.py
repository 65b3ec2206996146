"""Loader for the optional C++ extension `rhea_kernels._C` (built with RHEA_BUILD_EXT=1).

Importing `_C` registers the C++ CPU kernels for the ``CPU`` dispatch key of the ops
(``TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m)`` in ``csrc/<op>.cpp``). `HAS_EXT` records
whether it loaded; an op whose CPU kernel the extension lacks (not built, or built from
older sources) runs its plain-torch reference on CPU, with one warning.
"""
from __future__ import annotations

import warnings

import torch  # noqa: F401  (loads libc10 and libtorch, which rhea_kernels._C links against)

HAS_EXT = False
EXT_ERROR: str | None = "not loaded yet"
_loaded = False
_missing: list[str] = []  # ops whose CPU kernel the extension does not provide
_warned = False


def load() -> bool:
    """Import `rhea_kernels._C` once; returns HAS_EXT."""
    global HAS_EXT, EXT_ERROR, _loaded
    if not _loaded:
        _loaded = True
        try:
            import rhea_kernels._C  # noqa: F401  (registers the CPU kernels)

            HAS_EXT, EXT_ERROR = True, None
        except ImportError as exc:  # not built, or built against another torch
            HAS_EXT, EXT_ERROR = False, str(exc)
    return HAS_EXT


def note_missing_kernel(op: str) -> None:
    """Record that `op` has no C++ CPU kernel (it falls back to the reference)."""
    if op not in _missing:
        _missing.append(op)


def missing_kernels() -> list[str]:
    return list(_missing)


def warn_missing_ext(op: str = "") -> None:
    """Warn once that CPU ops use the slower plain-torch reference, and why."""
    global _warned
    if _warned:
        return
    _warned = True
    why = (f"the C++ extension is not available ({EXT_ERROR})" if not HAS_EXT else
           f"the C++ extension has no CPU kernel for {', '.join(_missing)} (built from older sources?)")
    warnings.warn(
        f"rhea_kernels: {why}; CPU calls of {op or 'these ops'} fall back to the plain-torch reference. "
        "Build it with `RHEA_BUILD_EXT=1 pip install --no-build-isolation -e .` "
        "(or `RHEA_BUILD_EXT=1 python setup.py build_ext --inplace`).",
        RuntimeWarning,
        stacklevel=4,
    )


load()
