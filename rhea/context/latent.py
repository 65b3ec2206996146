"""`Latent`: compressed vectors standing in for a turn's text inside a message."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from rhea.errors import InvalidTurnError


@dataclass(eq=False)
class Latent:
    """`vectors[n, hidden]` placed at n `<mem>` slots when a plan is rendered.

    >>> Latent(torch.zeros(4, 8), source_turn=2).n_slots
    4
    """

    vectors: torch.Tensor
    source_turn: int

    def __post_init__(self) -> None:
        if not isinstance(self.vectors, torch.Tensor) or self.vectors.dim() != 2 or self.vectors.shape[0] == 0:
            shape = tuple(self.vectors.shape) if isinstance(self.vectors, torch.Tensor) else type(self.vectors).__name__
            raise InvalidTurnError(f"Latent.vectors must be a tensor [n>=1, hidden], got {shape}")
        if not self.vectors.is_floating_point():
            raise InvalidTurnError(f"Latent.vectors must be floating point, got {self.vectors.dtype}")
        if isinstance(self.source_turn, bool) or not isinstance(self.source_turn, int) or self.source_turn < 0:
            raise InvalidTurnError(f"Latent.source_turn={self.source_turn!r} must be a turn index >= 0")

    @property
    def n_slots(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def hidden_size(self) -> int:
        return int(self.vectors.shape[1])

    def __repr__(self) -> str:
        return f"Latent(n={self.n_slots}, hidden={self.hidden_size}, source_turn={self.source_turn})"


def stack_rows(latents: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[T, n, d]`` from turns' ``[rows_i, d]`` latents; a turn with fewer rows (a reply compressed in fewer chunks)
    is padded with copies of its own first row, which leaves its max-cosine score unchanged.

    >>> stack_rows([torch.ones(2, 3), torch.zeros(4, 3)]).shape
    torch.Size([2, 4, 3])
    """
    n = max(x.shape[0] for x in latents)
    return torch.stack([x if x.shape[0] == n else torch.cat([x, x[:1].expand(n - x.shape[0], -1)]) for x in latents])


def latent_bytes(n_mem: int, hidden: int, *, layers: int = 1, injection: str = "raw", dtype_bytes: int = 4,
                 chunks: int = 1) -> int:
    """Bytes one reply's latent holds: ``chunks × n_mem`` rows of ``latent_width`` values of
    `dtype_bytes` each, where ``latent_width`` is `hidden`, or ``layers × hidden`` under
    ``injection="states"`` (the slot state at every layer's input). The rhea policies' memory and the
    server's latent cache keep latents in the model's dtype by default (`RheaPolicy(latent_dtype=)`):
    4 bytes a value in fp32, 2 in bf16 or fp16.

    >>> latent_bytes(24, 576, layers=30, injection="states")   # SmolLM2-135M's shipped compressor
    1658880
    >>> latent_bytes(8, 576)
    18432
    """
    for name, value in (("n_mem", n_mem), ("hidden", hidden), ("layers", layers), ("dtype_bytes", dtype_bytes),
                        ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            from rhea.errors import RheaConfigError

            raise RheaConfigError(f"{name}={value!r} must be an int >= 1")
    width = hidden * layers if injection == "states" else hidden
    return chunks * n_mem * width * dtype_bytes


def model_latent_bytes(model, *, dtype_bytes: int = 4, chunks: int = 1) -> int:
    """`latent_bytes` for a `RheaForCausalLM` (its ``n_mem`` and ``latent_width``)."""
    return chunks * model.n_mem * model.latent_width * dtype_bytes


def tensor_bytes(x) -> int:
    """Bytes held by the tensors in `x` (a tensor, or nested lists/tuples/dicts of them)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, dict):
        return sum(tensor_bytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(tensor_bytes(v) for v in x)
    return 0
