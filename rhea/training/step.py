"""One joint training step as a module, so DDP/FSDP/DeepSpeed wrap one `forward`.

compress the history replies (compress adapter, with grad) → inject them at the `<mem>`
slots → LM loss on b_t (generate adapter) → + weighted auxiliary losses. Both adapters and
``model.mem_slot_embeds`` sit in this one graph.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from rhea.training.losses import AuxiliaryLoss

#: What `JointStep.uniform_calls` compresses for a batch without history (its result is weighted by zero).
PLACEHOLDER_TEXT = "."


class JointStep(nn.Module):
    """``forward(batch) -> (total_loss, {name: loss})``.

    >>> from rhea.testing import tiny_rhea
    >>> from rhea.training.data import Sample, collate
    >>> model = tiny_rhea()
    >>> batch = collate([Sample([5, 6, model.mem_token_id, model.mem_token_id, model.mem_token_id, model.mem_token_id, 7],
    ...                         [-100] * 6 + [7], ["paris"])], model.tokenizer.pad_token_id)
    >>> total, parts = JointStep(model)(batch)
    >>> sorted(parts)
    ['lm']
    """

    def __init__(self, model: nn.Module, aux_losses: Sequence[AuxiliaryLoss] = ()):
        super().__init__()
        self.model = model
        self.aux_losses = list(aux_losses)
        #: Set under FSDP: every process must run the same sequence of sharded-layer calls, so a batch
        #: with no history to compress still runs the compress pass (and each aux loss) on a placeholder
        #: text, weighted by zero. Off otherwise (no wasted compute on one process).
        self.uniform_calls = False

    @property
    def _no_split_modules(self) -> list[str]:
        """The backbone's decoder-layer classes: accelerate's TRANSFORMER_BASED_WRAP shards one unit per layer."""
        return list(getattr(self.model.base_model, "_no_split_modules", None) or [])

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = self.model.device
        texts = batch["compress_texts"]
        latents = self.model.compress(texts) if texts else None
        outputs = self.model(
            input_ids=batch["input_ids"].to(device),
            latent_embeds=latents,
            attention_mask=batch["attention_mask"].to(device),
            labels=batch["labels"].to(device),
        )
        parts = {"lm": outputs.loss}
        total = outputs.loss
        if latents is None and self.uniform_calls:
            # Same layer calls as a batch with history (FSDP all-gathers per call), contributing nothing.
            placeholder = {**batch, "compress_texts": [PLACEHOLDER_TEXT]}
            dummy = self.model.compress(placeholder["compress_texts"])
            total = total + 0.0 * dummy.sum()
            for aux in self.aux_losses:
                value = aux(self.model, placeholder, dummy, outputs)
                if value is not None:
                    total = total + 0.0 * value
            return total, parts
        if latents is None:
            # Keep the compress adapter and <mem> slots in the graph (zero gradient) so DDP
            # sees every parameter used in every step, whatever the batch holds.
            total = total + 0.0 * self.model.mem_slot_embeds.sum()
        pieces = getattr(self.model, "mem_piece_embeds", None)
        if pieces is not None:  # only the offset of piece 0 is read when replies are compressed whole
            total = total + 0.0 * pieces.sum()
        for aux in self.aux_losses:
            value = aux(self.model, batch, latents, outputs)
            if value is not None:
                parts[aux.name] = value
                total = total + aux.weight * value
        return total, parts
