"""Compile Triton kernels for CUDA targets on a machine without a GPU.

`triton.compile(ASTSource(...), target=GPUTarget(...))` runs the full GPU pipeline
(TTIR -> TTGIR -> LLVM -> PTX -> cubin), catching errors the interpreter accepts
(e.g. tl.dot with a dimension below 16, unsupported dtype casts, non-constexpr globals).
"""
from __future__ import annotations

import inspect

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGETS = [("cuda", 80, 32), ("cuda", 90, 32)]


def compile_for(kernel, target: tuple, constexprs: dict, pointer_types: dict, float_args: set = frozenset()):
    """Compile `kernel` for `target`; args not named are i32 scalars.

    pointer_types: name -> element type ("fp16", "fp32", "i8", ...); float_args: fp32 scalars.
    """
    names = list(inspect.signature(kernel.fn).parameters)
    signature = {}
    for name in names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointer_types:
            signature[name] = "*" + pointer_types[name]
        elif name in float_args:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    return triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                          target=GPUTarget(*target))
