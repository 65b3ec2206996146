"""Fixtures for the kernel tests.

`interp` is a child process with TRITON_INTERPRET=1 that runs the Triton kernels on CPU
(one per xdist worker, started once per session); this process never sets the variable,
so it cannot leak into other test directories.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch


class Interpreter:
    def __init__(self):
        from tests.kernels import _interp_worker

        self._mod = _interp_worker
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_interp_worker.init)

    def __getattr__(self, name):
        fn = getattr(self._mod, name)
        return lambda *args: self._pool.submit(fn, *args).result(timeout=300)

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def interp():
    pytest.importorskip("triton")
    worker = Interpreter()
    yield worker
    worker.close()


def rel_rms(a: torch.Tensor, b: torch.Tensor, floor: float = 1e-3) -> float:
    """Relative RMS error (flash-linear-attention style), robust to a few rounding outliers.

    The denominator is floored at `floor` so an exactly-zero gradient (e.g. dq when N == 1)
    compares rounding noise against a meaningful scale instead of dividing noise by noise.
    """
    a, b = a.double(), b.double()
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(floor)).item()
