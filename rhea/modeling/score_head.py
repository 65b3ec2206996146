"""A learned read-out for retrieval: the map from a turn's latents to the vectors HCR scores.

A compressor trained to reconstruct (``rhea train`` with ``run.stage: compressor``) writes latents the decoder can read
back, but their final states, cosine-compared as they are, do not say which turn a question needs
(docs/reports/compressor.md: ``rhea calibrate`` misses its targets on them). `ScoreHead` is a linear map, trained
contrastively on real (question, reply) pairs with everything else frozen (``scripts/train_score_head.py``,
`rhea.training.score_head`), from a chosen set of the latent's per-layer blocks to ``RheaConfig.score_head``
dimensions; ``RheaForCausalLM.score_view`` applies it, so the policy, ``rhea calibrate`` and the retrieval
benchmark all score what it outputs. The scoring rule is unchanged: max cosine over the slot pairs.

>>> head = ScoreHead(hidden=4, dim=3, layers=[0, 2])
>>> head(torch.randn(2, 5, 12)).shape       # [texts, slots, 3 layers x hidden 4] -> [texts, slots, dim]
torch.Size([2, 5, 3])
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

SCORE_HEAD_WEIGHTS_NAME = "score_head.safetensors"


def gather_blocks(latents: torch.Tensor, hidden: int, layers: Sequence[int]) -> torch.Tensor:
    """Blocks `layers` of `hidden` columns each of ``[..., width]`` latents, side by side, in fp32."""
    blocks = latents.shape[-1] // hidden
    bad = [i for i in layers if i >= blocks]
    if latents.shape[-1] % hidden or bad:
        raise ValueError(f"latents of width {latents.shape[-1]} hold {blocks} blocks of {hidden}; the score head "
                         f"reads blocks {list(layers)} (RheaConfig.score_head_layers)")
    if tuple(layers) == tuple(range(len(layers))):
        return latents[..., : hidden * len(layers)].float()
    return torch.cat([latents[..., i * hidden:(i + 1) * hidden] for i in layers], dim=-1).float()


class ScoreHead(nn.Module):
    """``W · concat(latent blocks at `layers`) + b``; kept in fp32 whatever the model's dtype (it is small).

    `layers` index the latent's blocks of `hidden` columns: 0 is the final states (every latent has it);
    ``i >= 1`` is, under ``latent_injection="states"``, the slot's state at the input of decoder layer i.
    """

    def __init__(self, hidden: int, dim: int, layers: Sequence[int] = (0,), *, device=None):
        super().__init__()
        self.hidden, self.dim, self.layers = int(hidden), int(dim), tuple(int(i) for i in layers)
        self.proj = nn.Linear(self.hidden * len(self.layers), self.dim, bias=True, device=device, dtype=torch.float32)

    @property
    def in_features(self) -> int:
        return self.proj.in_features

    def gather(self, latents: torch.Tensor) -> torch.Tensor:
        """The blocks the head reads, side by side: ``[..., len(layers) * hidden]`` (fp32)."""
        return gather_blocks(latents, self.hidden, self.layers)

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        """``[..., dim]`` fp32 (a model cast to bf16 casts the head too; the scores stay fp32)."""
        x = self.gather(latents)
        return self.proj(x.to(self.proj.weight)).float()

    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().contiguous() for k, v in self.proj.state_dict().items()}
