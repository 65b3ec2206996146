"""Plain-torch ground truth of ``rhea_kernels::decode_linear``: ``F.linear(x, weight, bias)``."""
from __future__ import annotations

import torch


def decode_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` for x [..., K], weight [N, K], bias [N] or None.

    Example:
        >>> decode_linear(torch.ones(2, 3), torch.ones(4, 3), None).tolist()[0]
        [3.0, 3.0, 3.0, 3.0]
    """
    return torch.nn.functional.linear(x, weight, bias)
