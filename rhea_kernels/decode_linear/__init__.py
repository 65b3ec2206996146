"""A linear layer for a few rows at a time (decoding), and a switch that routes a model's layers to it.

* `decode_linear(x, weight, bias=None)`: ``F.linear`` through the op ``rhea_kernels::decode_linear``
  (C++ entry ``csrc/decode_linear.cpp`` on CPU; the reference elsewhere). On a CPU, a decoding
  step's product of a few rows (one token per sequence) by a weight matrix is where BLAS is
  weakest: MKL's sgemm at 8 rows ran Qwen2.5-1.5B's MLP projections at a fraction of the
  memory bandwidth one row's GEMV reaches (`benchmarks/decode_linear.py`, docs/guides/kernels.md).
* `decode_linears(module, min_rows=1, max_rows=16)`: inside the block, every plain ``nn.Linear``
  of `module` with fp32 CPU weights sends calls of `min_rows` to `max_rows` rows (and no
  autograd) to the op, one row only for a layer of at least ``ONE_ROW_MIN_WEIGHTS`` weights (on a
  small layer BLAS's GEMV is as fast); longer inputs (a prompt's prefill) and anything else keep
  ``F.linear``. Nothing is
  copied: the layers read their current weights at each call (a merged adapter swapped in by
  `RheaForCausalLM.merged` included). Outputs equal ``F.linear``'s up to float reassociation
  (another summation order), so a greedy token can differ where two logits nearly tie, as
  batching does.
"""
from __future__ import annotations

import contextlib

import torch

from rhea_kernels.decode_linear import reference
from rhea_kernels.decode_linear.op import OP

#: rows (tokens x sequences) from which and up to which `decode_linears` routes a call to the op: a decoding
#: step of 1 to 16 sequences; a prompt's prefill (more rows) stays with BLAS (benchmarks/decode_linear.py,
#: docs/guides/kernels.md)
MIN_ROWS, MAX_ROWS = 1, 16
#: a call of one row goes to the op only for a layer with at least this many weights: on Qwen2.5-1.5B's layers
#: of 2.4M weights and more the op's one-row loop (8 weight rows at a time) streamed 1.5-2.4x faster than BLAS's
#: GEMV, but on SmolLM2's small ones (0.1-0.9M) its fixed cost of a few µs made it 0.75-1.1x
ONE_ROW_MIN_WEIGHTS = 1 << 20


def decode_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` through ``rhea_kernels::decode_linear`` (x [..., K], weight [N, K], bias [N]).

    Not differentiable (inference). fp32 runs the C++ kernel on CPU; other dtypes give ``F.linear``'s result.

    Example:
        >>> decode_linear(torch.ones(1, 3), torch.eye(3), torch.tensor([0.0, 1.0, 2.0])).tolist()
        [[1.0, 2.0, 3.0]]
    """
    if weight.dim() != 2:
        raise ValueError(f"weight must be [N, K], got shape {tuple(weight.shape)}")
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x {tuple(x.shape)} and weight {tuple(weight.shape)} disagree on K (x's last dimension "
                         f"must equal weight's second)")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must be [N] = [{weight.shape[0]}], got shape {tuple(bias.shape)}")
    return torch.ops.rhea_kernels.decode_linear(x, weight, bias)


def available() -> bool:
    """Whether CPU calls run the C++ kernel (the extension is built with this op)."""
    return OP.cpu_backend == "cpp"


def serves(module: torch.nn.Module) -> bool:
    """Whether `decode_linears` over `module` is worth entering: the C++ kernel is built and the module's weights
    are fp32 on a CPU (judged by its first parameter; layers are still checked call by call)."""
    first = next(iter(module.parameters()), None)
    return first is not None and first.device.type == "cpu" and first.dtype == torch.float32 and available()


def _kernel(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.rhea_kernels.decode_linear(x, weight, bias)


def _routed_forward(layer: torch.nn.Linear, min_rows: int, max_rows: int, one_row_min_weights: int):
    def forward(x: torch.Tensor) -> torch.Tensor:
        weight, bias = layer.weight, layer.bias
        k = weight.shape[1]
        if (x.dtype == torch.float32 and weight.dtype == torch.float32 and x.device.type == "cpu"
                and weight.device.type == "cpu" and min_rows * k <= x.numel() <= max_rows * k
                and (x.numel() > k or weight.numel() >= one_row_min_weights)
                and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
            return _kernel(x, weight, bias)
        return torch.nn.functional.linear(x, weight, bias)

    return forward


@contextlib.contextmanager
def decode_linears(module: torch.nn.Module, *, min_rows: int = MIN_ROWS, max_rows: int = MAX_ROWS,
                   one_row_min_weights: int = ONE_ROW_MIN_WEIGHTS):
    """Inside the block, `module`'s plain ``nn.Linear`` layers send calls of `min_rows` to `max_rows` rows to
    `decode_linear` (a call of one row only for a layer of at least `one_row_min_weights` weights).

    Yields how many layers were routed: 0 when the C++ kernel is not built (nothing to gain
    from the reference), for layers whose ``forward`` is already replaced (hooks of other
    libraries are left alone) and for subclasses that override ``forward``. Nested blocks over
    the same layers route them once. Restores every layer on exit, also on an exception.

    >>> layer = torch.nn.Linear(4, 2)
    >>> with decode_linears(layer) as n:
    ...     y = layer(torch.ones(1, 4))
    >>> "forward" in vars(layer)
    False
    """
    for name, value in (("min_rows", min_rows), ("max_rows", max_rows)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1 (rows routed to the op)")
    if not isinstance(one_row_min_weights, int) or isinstance(one_row_min_weights, bool) or one_row_min_weights < 0:
        raise ValueError(f"one_row_min_weights={one_row_min_weights!r} must be an integer >= 0 (weights of the "
                         "smallest layer whose one-row calls go to the op)")
    if min_rows > max_rows:
        raise ValueError(f"min_rows={min_rows} > max_rows={max_rows}: no call would be routed; pass min_rows <= max_rows")
    routed: list[torch.nn.Linear] = []
    if available():
        for layer in module.modules():
            if (isinstance(layer, torch.nn.Linear) and type(layer).forward is torch.nn.Linear.forward
                    and "forward" not in vars(layer)):
                layer.forward = _routed_forward(layer, min_rows, max_rows, one_row_min_weights)
                routed.append(layer)
    try:
        yield len(routed)
    finally:
        for layer in routed:
            del layer.forward


__all__ = ["MAX_ROWS", "MIN_ROWS", "ONE_ROW_MIN_WEIGHTS", "OP", "available", "decode_linear", "decode_linears", "reference", "serves"]
