"""The joint training step's losses: the LM loss on b_t, plus pluggable auxiliary losses.

An auxiliary loss is any callable ``fn(model, batch, latents, outputs) -> Tensor | None``
(None = nothing to add for this batch), wrapped in `AuxiliaryLoss` with a name and weight.
`latents` is ``[R, n_mem, hidden]`` for ``batch["compress_texts"]`` (None if the batch
compresses nothing) and is part of the step's graph, so an aux loss trains the compressor
too. The contrastive retrieval loss (`ContrastiveRetrievalLoss`) plugs in the same way, without touching the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from rhea.constants import AUTOENCODE_PROMPT  # noqa: F401 (the reconstruction prompt, also imported from here)
from rhea.context import ContextPlan, Latent

AuxFn = Callable[..., Optional[torch.Tensor]]



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


def max_cosine(queries: torch.Tensor, replies: torch.Tensor, center: torch.Tensor | None = None) -> torch.Tensor:
    """Differentiable HCR score matrix: ``[Q, R]`` max cosine over the ``n×n`` latent pairs.

    The same score as ``rhea_kernels.turn_scores`` (which is inference-only), for training.

    >>> q, r = torch.randn(2, 4, 8), torch.randn(3, 4, 8)
    >>> max_cosine(q, r).shape
    torch.Size([2, 3])
    """
    if center is not None:
        queries, replies = queries - center, replies - center
    q = torch.nn.functional.normalize(queries.float(), dim=-1)
    r = torch.nn.functional.normalize(replies.float(), dim=-1)
    return torch.einsum("aid,bjd->abij", q, r).flatten(2).amax(-1)


class ContrastiveRetrievalLoss:
    """InfoNCE over HCR scores: a reply's latents score high against the query that needs it.

    Every call draws `per_step` (reply, needing query, unrelated query) triples (from torch's
    global RNG, so a resumed run draws the same ones), compresses all three with the compress
    adapter exactly as inference does (`EpisodicMemory` compresses the query too), and averages

    * query → reply: each needing query must pick its reply among the drawn replies;
    * reply → query: each reply must pick its needing query among all drawn queries, the
      unrelated ones included.

    Scores are max cosines divided by `temperature`; with ``center=True`` the detached mean
    latent of the draw is subtracted first (matching the centred scoring of ``RheaConfig``).

    >>> from rhea.calibration.data import triples
    >>> loss = ContrastiveRetrievalLoss(triples("train", 16), per_step=4)
    >>> from rhea.testing import tiny_rhea
    >>> float(loss(tiny_rhea(), {}, None, None).detach()) > 0
    True
    """

    def __init__(self, triples, *, per_step: int = 8, temperature: float = 0.05, center: bool = True):
        from rhea.training.errors import TrainConfigError

        if len(triples) < 2:
            raise TrainConfigError(f"the contrastive loss needs at least 2 triples, got {len(triples)}")
        if per_step < 2:
            raise TrainConfigError(f"contrastive per_step={per_step} must be >= 2 (in-batch negatives)")
        if temperature <= 0:
            raise TrainConfigError(f"contrastive temperature={temperature} must be > 0")
        self.triples = list(triples)
        self.per_step = min(per_step, len(self.triples))
        self.temperature = temperature
        self.center = center
        self.rank, self.world, self.seed, self.calls = 0, 1, 0, 0

    def shard(self, rank: int, world: int, *, seed: int, calls: int = 0) -> "ContrastiveRetrievalLoss":
        """Draw this process's share of each step's triples when `world` processes train together.

        Every process permutes the pool with the same generator (seeded by `seed` and the call
        count) and takes its own `per_step` slice, so the ranks' triples differ within a step and
        the step sees ``world x per_step`` distinct pairs (one process's draw from the global RNG
        would repeat on every rank seeded alike). `calls` is the micro-batches already trained,
        so a resumed run draws as an unbroken one.
        """
        self.rank, self.world, self.seed, self.calls = int(rank), int(world), int(seed), int(calls)
        return self

    def draw(self) -> list[int]:
        """The indices of this call's triples (one process: the global RNG, as before sharding existed)."""
        n = len(self.triples)
        if self.world <= 1:
            return torch.randperm(n)[: self.per_step].tolist()
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.calls)).tolist()
        self.calls += 1
        start = self.rank * self.per_step  # the pool wraps when it holds fewer than world x per_step triples
        return [order[(start + j) % n] for j in range(self.per_step)]

    def __call__(self, model, batch: dict, latents: torch.Tensor | None, outputs) -> torch.Tensor:
        drawn = [self.triples[i] for i in self.draw()]
        k = len(drawn)
        # the read-out is what is scored: the final-state view
        lat = model.score_view(model.compress([t.reply for t in drawn] + [t.query for t in drawn] + [t.unrelated for t in drawn]))
        center = lat.detach().float().reshape(-1, lat.shape[-1]).mean(0) if self.center else None
        replies, queries = lat[:k], lat[k:]
        target = torch.arange(k, device=lat.device)
        f = torch.nn.functional
        q_to_r = f.cross_entropy(max_cosine(queries[:k], replies, center) / self.temperature, target)
        r_to_q = f.cross_entropy(max_cosine(replies, queries, center) / self.temperature, target)
        return (q_to_r + r_to_q) / 2
