"""Fixtures for the kernel tests.

`interp` is a child process with TRITON_INTERPRET=1 that runs the Triton kernels on CPU
(one per xdist worker, started once per session); this process never sets the variable,
so it cannot leak into other test directories.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest


class Interpreter:
    def __init__(self):
        from tests.kernels import _interp_worker

        self._mod = _interp_worker
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_interp_worker.init)

    def run(self, op: str, args: tuple):
        """Op `op`'s Triton kernel on `args` (CPU tensors), in the interpreter."""
        return self._pool.submit(self._mod.run, op, args).result(timeout=300)

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def interp():
    pytest.importorskip("triton")
    worker = Interpreter()
    yield worker
    worker.close()
