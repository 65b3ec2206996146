"""Runs Triton kernels in a child process started with TRITON_INTERPRET=1.

The interpreter must be chosen before triton is first imported, process-wide; running
it in a child keeps the pytest process (and other test directories sharing an xdist
worker) free of TRITON_INTERPRET. Nothing here imports triton at module level.
"""
from __future__ import annotations

import os


def init() -> None:
    """Pool initializer: select the interpreter before anything imports triton."""
    os.environ["TRITON_INTERPRET"] = "1"
    import torch

    torch.set_num_threads(1)  # the parent runs beside it on a shared 2-core machine


def run(op: str, args: tuple):
    """The op's Triton implementation (what its CUDA dispatch key runs), on CPU tensors."""
    from rhea_kernels._library import OPS

    return OPS[op].triton(*args)
