"""Where a run ran: the versions, the machine, the threads, the device and the model's dtype.

A leaf of `rhea.eval` (it imports no other eval module), so the checkpoints, the judge and the
benchmarks can all describe their machine the same way. `cpu_name` is the CPU line benchmarks
write into their JSON.

>>> import torch
>>> dtype_name(torch.bfloat16)
'bfloat16'
>>> sorted(environment(dtype=torch.float32))[:3]
['device', 'dtype', 'machine']
"""
from __future__ import annotations

import os
import platform

from rhea import __version__


def cpu_name() -> str:
    """CPU model and the cores this process may use, e.g. "AMD EPYC (2 cores)" (benchmarks' JSON meta)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name} ({len(os.sched_getaffinity(0))} cores)"


def dtype_name(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: a dtype as config.json and the environments record it."""
    return str(dtype).replace("torch.", "")


#: The peer libraries whose versions an environment records where they are installed (`rhea.peers`).
PEER_LIBRARIES = ("kvpress", "llmlingua")


def peer_versions() -> dict[str, str]:
    """``{library: version}`` of the peer libraries installed here (none in the project's own environment;
    `make peers` builds one with kvpress and llmlingua)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in PEER_LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def environment(device: "torch.device | None" = None, dtype: "torch.dtype | None" = None) -> dict:
    """Where turns run: rhea, torch and transformers versions, the machine, threads and device
    (and the model's dtype, when given; and the versions of the peer libraries, `peer_versions`,
    where any is installed, so a peer's rows say which kvpress or llmlingua made them)."""
    import torch
    import transformers

    device = torch.device(device if device is not None else "cpu")
    where = f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else str(device)

    return {"rhea": __version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "device": where} | ({"dtype": dtype_name(dtype)} if dtype is not None else {}) | peer_versions()
