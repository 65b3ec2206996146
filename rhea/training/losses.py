"""The joint training step's losses: the LM loss on b_t, plus pluggable auxiliary losses.

An auxiliary loss is any callable ``fn(model, batch, latents, outputs) -> Tensor | None``
(None = nothing to add for this batch), wrapped in `AuxiliaryLoss` with a name and weight.
`latents` is ``[R, n_mem, hidden]`` for ``batch["compress_texts"]`` (None if the batch
compresses nothing) and is part of the step's graph, so an aux loss trains the compressor
too. A contrastive retrieval loss (issue 11) plugs in the same way, without touching the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from rhea.context import ContextPlan, Latent

AuxFn = Callable[..., Optional[torch.Tensor]]

#: The ICAE-style reconstruction prompt: latents, then this instruction, then the reply verbatim.
AUTOENCODE_PROMPT = "Repeat the reply above word for word."


@dataclass
class AuxiliaryLoss:
    """A named, weighted extra loss added to the LM loss in every step.

    >>> aux = AuxiliaryLoss("l2", lambda model, batch, latents, outputs: latents.pow(2).mean(), weight=0.1)
    >>> aux.name
    'l2'
    """

    name: str
    fn: AuxFn
    weight: float = 1.0

    def __call__(self, model, batch: dict, latents: torch.Tensor | None, outputs) -> torch.Tensor | None:
        return self.fn(model, batch, latents, outputs)


def autoencode_loss(model, batch: dict, latents: torch.Tensor | None, outputs) -> torch.Tensor | None:
    """Reconstruct every compressed reply from its own latents (generate adapter), as in ICAE.

    The prompt is rendered through `rhea.context` like any plan: a user message holding the
    latent block and `AUTOENCODE_PROMPT`, then the reply as the assistant message.
    """
    from rhea.training.data import Sample, _encode_completion, collate

    if latents is None or not batch["compress_texts"]:
        return None
    samples = []
    for i, text in enumerate(batch["compress_texts"]):
        placeholder = Latent(torch.zeros(model.n_mem, 1), i)
        prompt = ContextPlan([{"role": "user", "content": [placeholder, "\n" + AUTOENCODE_PROMPT]}])
        full = ContextPlan(prompt.messages + [{"role": "assistant", "content": text}])
        ids, labels = _encode_completion(model.tokenizer, prompt, full, f"autoencode text {i}")
        samples.append(Sample(ids, labels))
    ae = collate(samples, model.tokenizer.pad_token_id)
    device = latents.device
    out = model(
        input_ids=ae["input_ids"].to(device),
        latent_embeds=latents,
        attention_mask=ae["attention_mask"].to(device),
        labels=ae["labels"].to(device),
    )
    return out.loss
