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
