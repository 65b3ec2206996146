"""The shared harness every op package registers through: one `torch.library` op per kernel.

An op (``rhea_kernels::<name>``) is defined once here, from its package's ``op.py``:

* its schema, once (`LIB.define`);
* its fake kernel, once (`torch.library.register_fake`), so `torch.compile(fullgraph=True)`
  traces it and `torch.library.opcheck` passes;
* its CPU kernel under the op's own name, for the ``CPU`` dispatch key: the C++ entry in
  ``csrc/<op>.cpp`` (``TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m)``, loaded with the extension
  `rhea_kernels._C`), else the op's plain-torch reference, registered here (one warning);
* its CUDA kernel for the ``CUDA`` key: the op's Triton launcher, imported on the first CUDA
  call (the reference on the GPU when Triton is not installed);
* autograd, when the op has one, once (`torch.library.register_autograd`, in the op's package).

So the dispatcher, not Python, picks the implementation, and each op has one name. `OPS`
lists the ops and what serves them on each device (`backend_for`, `rhea kernels info`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch

from rhea_kernels import _ext

NAMESPACE = "rhea_kernels"
# Module-level: a Library deregisters everything it registered when garbage-collected.
LIB = torch.library.Library(NAMESPACE, "FRAGMENT")


@dataclass
class KernelOp:
    """One registered op: its name, schema, implementations and where its sources live."""

    name: str
    schema: str
    reference: Callable  # plain torch, the op's own signature (ground truth; CPU fallback)
    triton: Callable | None  # CUDA launcher, the op's own signature (imports triton lazily)
    fake: Callable
    package: str  # rhea_kernels/<package>/
    cpp_source: str  # the C++ entry that registers the CPU kernel
    cpu_backend: str = field(default="reference")  # "cpp" or "reference", set at registration

    @property
    def qualname(self) -> str:
        return f"{NAMESPACE}::{self.name}"

    @property
    def overload(self):
        """``torch.ops.rhea_kernels.<name>.default`` (what opcheck takes)."""
        return getattr(torch.ops.rhea_kernels, self.name).default

    def backend(self, device: torch.device | str) -> str:
        """Which implementation serves a call with tensors on `device`: "cpp", "triton" or "reference"."""
        kind = torch.device(device).type
        if kind == "cuda":
            return "triton" if self.triton is not None and _has_triton() else "reference"
        if kind == "cpu":
            return self.cpu_backend
        return "none"


OPS: dict[str, KernelOp] = {}


@functools.lru_cache(maxsize=None)
def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _cpu_reference(op: KernelOp) -> Callable:
    def kernel(*args):
        _ext.warn_missing_ext(op.name)
        return op.reference(*args)

    kernel.__name__ = f"{op.name}_cpu_reference"
    return kernel


def _cuda_kernel(op: KernelOp) -> Callable:
    def kernel(*args):
        if op.triton is not None and _has_triton():
            return op.triton(*args)
        return op.reference(*args)

    kernel.__name__ = f"{op.name}_cuda"
    return kernel


def define(name: str, schema: str, *, reference: Callable, triton: Callable | None, fake: Callable,
           package: str, cpp_source: str) -> KernelOp:
    """Define ``rhea_kernels::<name><schema>`` and register its fake, CPU and CUDA kernels.

    `schema` is the part after the name, e.g. ``"(Tensor x, float a) -> Tensor"``. Returns the
    `KernelOp` (also recorded in `OPS`); call it through ``torch.ops.rhea_kernels.<name>``.
    """
    if name in OPS:
        raise RuntimeError(f"op {NAMESPACE}::{name} is defined twice")
    op = KernelOp(name, schema, reference, triton, fake, package, cpp_source)
    _ext.load()  # the extension's CPU kernels may register before or after the schema
    LIB.define(name + schema)
    torch.library.register_fake(op.qualname, fake, lib=LIB)
    if _ext.HAS_EXT and torch._C._dispatch_has_kernel_for_dispatch_key(op.qualname, "CPU"):
        op.cpu_backend = "cpp"
    else:  # no extension, or one built from older sources without this op's CPU kernel
        _ext.note_missing_kernel(name)
        LIB.impl(name, _cpu_reference(op), "CPU")
    LIB.impl(name, _cuda_kernel(op), "CUDA")
    OPS[name] = op
    return op


def backend_for(t: torch.Tensor, op: str = "turn_scores") -> str:
    """Which implementation of `op` runs for tensors on t's device: "triton", "cpp" or "reference"."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; rhea_kernels ops: {', '.join(sorted(OPS))}")
    return OPS[op].backend(t.device)
