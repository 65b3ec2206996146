"""The compressor stage of `rhea train` (``run.stage: compressor``): ICAE-style pre-training of the compress side.

Each optimizer step auto-encodes chunks of real replies through the `<mem>` latents: the compress LoRA writes a
chunk's latents, and the frozen decoder (the generate adapter, which at a fresh start is the plain base model)
reconstructs the chunk from them alone. With the decoder frozen the loss can only fall through what the latents
carry, so the generate side cannot learn to ignore them. ``compressor.qa_share`` of each batch is fact-QA
instead (`rhea.training.factqa`: answer a question about a reply from its latents, ICAE's fine-tuning stage).
Trained: the compress LoRA, the `<mem>` read-out queries (initialised distinct at a fresh start) and the latent
injector; the generate adapter only with ``compressor.train_generate``.

The `Trainer` runs it like the joint stage (AdamW, clipping, the non-finite guard, checkpoints, resume,
``run.max_minutes``); this module supplies the data (`CompressorData`), the one-step module (`CompressorStep`),
the held-apart measure (`evaluate`, into ``OUTPUT_DIR/curve.jsonl``) and the training record saved with the
weights. The shipped compressors' settings are ``configs/compressor-<model>.yaml``.

>>> from rhea.testing import tiny_rhea
>>> from rhea.training.config import TrainConfig
>>> cfg = TrainConfig.from_dict({"run": {"stage": "compressor"}, "data": {"batch_size": 2}})
>>> step = CompressorStep(tiny_rhea(), cfg)
>>> total, parts = step(["the cat is blue", "paris is the capital of france"])
>>> sorted(parts)
['autoencode', 'total']
"""
from __future__ import annotations

import contextlib
import itertools
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from rhea.training.errors import TrainConfigError, TrainingDataError

#: the losses a compressor step reports, the first being the one optimised and shown
LOSS_NAMES = ("total", "autoencode", "factqa")


def preflight(config) -> None:
    """What the compressor stage reads, checked before any model loads: ``data.path`` a directory,
    ``compressor.self_replies`` files, ``compressor.babi`` a directory."""
    c, path = config.compressor, config.data.path
    if not path:
        raise TrainConfigError("data.path is not set; the compressor stage reads a directory in the shared/data "
                               "layout (e.g. --set data.path=/path/to/shared/data)")
    if not Path(path).is_dir():
        raise TrainConfigError(f"data.path {path} is not a directory; the compressor stage reads the real replies of "
                               "a directory in the shared/data layout (--set data.path=DIR)")
    for f in c.self_replies:
        if not Path(f).is_file():
            raise TrainConfigError(f"compressor.self_replies file {f} does not exist; write it with "
                                   "scripts/generate_replies.py or remove it from the list")
    if c.babi and not Path(c.babi).is_dir():
        raise TrainConfigError(f"compressor.babi {c.babi} is not a directory; pass the folder holding qa1_*_test.txt "
                               "(babi_en_1k), or null for cloze questions only")


@dataclass
class CompressorData:
    """The stage's texts: training chunks (`samples`, what the trainer's epochs shuffle), the held-apart texts
    measured at each eval, and the fact-QA items of each side (empty when ``compressor.qa_share`` is 0)."""

    samples: list
    eval_texts: list[str]
    qa_train: list = field(default_factory=list)
    qa_eval: list = field(default_factory=list)
    #: nothing is skipped: chunks shorter than the minimum are not cut in the first place
    skipped: list = field(default_factory=list)

    def report(self) -> str:
        return (f"{len(self.samples)} train chunks, {len(self.eval_texts)} held-apart eval chunks, "
                f"{len(self.qa_train)} fact-QA items ({len(self.qa_eval)} held apart)")

    @classmethod
    def build(cls, config, tokenizer) -> "CompressorData":
        """Chunks of the replies under ``data.path`` (the held-apart share split off by source, so no chunk of a
        held-apart reply trains), plus the model's own replies (training only), plus the fact-QA items."""
        from rhea.training.compressor import chunk_texts, load_reply_texts, load_self_replies, split_held_apart

        c = config.compressor
        train_src, test_src = split_held_apart(load_reply_texts(config.data.path))
        # the model's own replies answer prompts whose real replies are not in the data, so all of them may train
        train_src = train_src + [t for path in c.self_replies for t in load_self_replies(path)]
        least = min(8, c.chunk_tokens)  # chunk_texts leaves out pieces shorter than this
        train = chunk_texts(tokenizer, train_src, max_tokens=c.chunk_tokens, min_tokens=least, stride=c.chunk_stride)
        test = chunk_texts(tokenizer, test_src, max_tokens=c.chunk_tokens, min_tokens=least, first_only=True)
        if not train or not test:
            raise TrainingDataError(f"data.path {config.data.path} gives {len(train)} training and {len(test)} "
                                    f"held-apart chunks of at least {least} tokens; both must be non-empty (more "
                                    "replies, or a smaller compressor.chunk_tokens)")
        random.Random(1234).shuffle(test)
        held = chunk_texts(tokenizer, test_src, max_tokens=c.chunk_tokens, min_tokens=least)
        qa_train, qa_eval = build_qa(config, train, held)
        return cls(train, [t.text for t in test[: c.eval_n]], qa_train, qa_eval)


def build_qa(config, train_chunks: Sequence, held_chunks: Sequence) -> tuple[list, list]:
    """(training, held-apart) fact-QA items: cloze questions on the chunks of each side, plus bAbI questions split
    by story (at most as many as cloze items, when there are any, so bAbI's few people and places do not dominate);
    the held-apart list alternates the two sources. Empty when ``compressor.qa_share`` is 0."""
    from rhea.training.factqa import cloze_qa, load_babi_qa, split_items

    c, seed = config.compressor, config.run.seed
    if c.qa_share == 0:
        return [], []
    train = cloze_qa(train_chunks, seed=seed)
    held = cloze_qa(held_chunks, seed=seed)
    babi_train, babi_held = split_items(load_babi_qa(c.babi, c.babi_tasks)) if c.babi else ([], [])
    rng = random.Random(4321)
    if train:
        babi_train = rng.sample(babi_train, min(len(babi_train), len(train)))
    rng.shuffle(held)
    rng.shuffle(babi_held)
    alternating = itertools.chain.from_iterable(itertools.zip_longest(held, babi_held))
    qa_eval = [it for it in alternating if it is not None][: c.qa_eval_n]
    if not train + babi_train or len(qa_eval) < 2:
        raise TrainingDataError(f"compressor.qa_share {c.qa_share}: {len(train) + len(babi_train)} training and "
                                f"{len(qa_eval)} held-apart fact-QA items; need training items and at least 2 held "
                                "apart (more replies, or compressor.babi)")
    return train + babi_train, qa_eval


def prepare_model(model, data: CompressorData, config, *, fresh: bool) -> None:
    """Freeze the generate adapter (unless ``compressor.train_generate``) and, for `fresh` adapters, give the
    `<mem>` read-out queries distinct starting points and centre the latent injector (`fresh_init`)."""
    freeze_decoder(model, train_generate=config.compressor.train_generate)
    if fresh:
        fresh_init(model, data.samples, config.run.seed)


def freeze_decoder(model, *, train_generate: bool = False) -> None:
    """Mark the generate adapter's LoRA weights trainable only with `train_generate` (the decoder stays frozen)."""
    for name, p in model.peft_model.named_parameters():
        if "lora_" in name and ".generate." in name:
            p.requires_grad_(train_generate)


def fresh_init(model, train: Sequence, seed: int) -> None:
    """Distinct `<mem>` read-out queries (the embeddings of distinct random vocabulary tokens; ICAE's memory tokens
    are distinct) and the injector's centre fitted on the latents of the first 32 training chunks."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.base_vocab_size or model.base_model.get_input_embeddings().weight.shape[0]
    rows = torch.randperm(vocab, generator=g)[: model.n_mem]
    with torch.no_grad():
        model.mem_slot_embeds.copy_(model.base_model.get_input_embeddings().weight[rows].to(model.mem_slot_embeds.dtype))
        if model.latent_injector is not None:
            lat = model.compress([c.text for c in train[:32]], batch_size=8)
            model.latent_injector.fit_center(model.score_view(lat))


def generate_is_identity(model) -> bool:
    """True when every generate-adapter LoRA B matrix is zero (a fresh adapter): the generate pass is then the
    plain base model, and running it with the LoRA branches disabled gives the same loss for less compute."""
    return all(not p.any() for n, p in model.peft_model.named_parameters() if ".generate." in n and "lora_B" in n)


def collate_texts(chunks: Sequence) -> list[str]:
    """A micro-batch of training chunks as their texts (the `DataLoader` collate of the stage)."""
    return [c.text for c in chunks]


class CompressorStep(nn.Module):
    """``forward(texts) -> (total_loss, {name: loss})`` for one micro-batch of ``data.batch_size`` texts.

    The first ``batch_size - round(batch_size * qa_share)`` texts are auto-encoded; the rest of the batch is
    ``round(batch_size * qa_share)`` fact-QA items drawn from `qa_items` by the micro-batch's index (a seeded
    draw, so a resumed run draws the same items: the trainer sets `draws` to the micro-batches already done).
    Each part is weighted by its share of the batch.
    """

    def __init__(self, model: nn.Module, config, qa_items: Sequence = ()):
        super().__init__()
        self.model = model
        c = config.compressor
        self.batch_size = config.data.batch_size
        self.n_qa = round(self.batch_size * c.qa_share)
        self.qa_items = list(qa_items)
        if self.n_qa and not self.qa_items:
            raise TrainConfigError(f"compressor.qa_share {c.qa_share} needs fact-QA items; none were built")
        self.content_weight = c.content_weight
        self.seed = config.run.seed
        #: micro-batches run so far (the fact-QA draw of the next one is seeded by it)
        self.draws = 0
        plain = not c.train_generate and generate_is_identity(model)
        self._decoder = model.peft_model.disable_adapter if plain else contextlib.nullcontext

    def resume_at(self, micro_batches: int) -> None:
        """Continue the fact-QA draws after `micro_batches` already trained (a resumed run)."""
        self.draws = micro_batches

    def forward(self, texts: Sequence[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        from rhea.training.compressor import autoencode_batch
        from rhea.training.factqa import factqa_loss

        model, dev = self.model, self.model.device
        texts = list(texts)[: self.batch_size - self.n_qa]
        if self.n_qa:
            pick = random.Random(self.seed * 7919 + self.draws).sample(range(len(self.qa_items)), self.n_qa)
            qa = [self.qa_items[i] for i in pick]
        else:
            qa = []
        self.draws += 1
        parts: dict[str, torch.Tensor] = {}
        total = torch.zeros((), device=dev)
        if texts:
            latents = model.compress(texts)
            b = autoencode_batch(model, texts)
            with self._decoder():
                if self.content_weight > 0:
                    ae = content_weighted_loss(model, b, latents, self.content_weight)
                else:
                    ae = model(input_ids=b["input_ids"].to(dev), latent_embeds=latents,
                               attention_mask=b["attention_mask"].to(dev), labels=b["labels"].to(dev)).loss
            parts["autoencode"] = ae
            total = ae * (len(texts) / self.batch_size)
        if qa:
            q = factqa_loss(model, qa, decoder=self._decoder)
            parts["factqa"] = q
            total = total + q * (len(qa) / self.batch_size)
        parts["total"] = total
        return total, parts


def content_weighted_loss(model, batch: dict, latents: torch.Tensor, share: float) -> torch.Tensor:
    """Reconstruction loss with each target token weighted by its loss under the control (every row reads the
    next row's latents, no gradient): ``w = (1 - share) + share * c / mean(c)`` over the batch's target tokens.
    A token the decoder predicts from the prompt and prefix alone weighs little; one only the right latents can
    give (a name, a number) weighs more. The mean weight is 1, so the loss keeps the plain loss's scale."""
    import torch.nn.functional as F

    ids, mask = batch["input_ids"].to(model.device), batch["attention_mask"].to(model.device)
    labels = batch["labels"].to(model.device)[:, 1:]
    keep = labels != -100
    with torch.no_grad():
        control = model(input_ids=ids, latent_embeds=latents.detach().roll(1, dims=0), attention_mask=mask).logits
        c = F.cross_entropy(control[:, :-1].float().transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
        weight = (1.0 - share) + share * c / c.mean().clamp(min=1e-6)
    logits = model(input_ids=ids, latent_embeds=latents, attention_mask=mask).logits
    own = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
    return (weight * own).sum() / weight.sum()


def evaluate(model, data: CompressorData, step: int, loss: float | None, curve_path: Path, *,
             raw_reference: bool) -> dict:
    """Measure the held-apart texts (teacher-forced reconstruction with own latents vs another text's, and fact-QA
    answers when there are items), append the row to `curve_path` and return it. `raw_reference` adds the fact-QA
    accuracy with the reply as text (``qa_raw``), what the latents are measured against."""
    from rhea.training.compressor import mean_ci, reconstruction_scores
    from rhea.training.factqa import factqa_scores

    was_training = model.training
    model.eval()
    t = time.perf_counter()
    s = reconstruction_scores(model, data.eval_texts)
    own, ctl = mean_ci(s["own"]), mean_ci(s["control"])
    gap = mean_ci([a - b for a, b in zip(s["own"], s["control"])])
    row = {"step": step, "loss": loss, "own": own["mean"], "control": ctl["mean"], "gap": gap["mean"],
           "gap_lo": gap["lo"], "gap_hi": gap["hi"], "n": own["n"]}
    if data.qa_eval:
        q = factqa_scores(model, data.qa_eval, raw=raw_reference)
        qa_gap = mean_ci([float(a["exact"]) - float(b["exact"]) for a, b in zip(q["own"], q["control"])])
        row.update({"qa_own": mean_ci([float(a["exact"]) for a in q["own"]])["mean"],
                    "qa_control": mean_ci([float(b["exact"]) for b in q["control"]])["mean"],
                    "qa_gap": qa_gap["mean"], "qa_gap_lo": qa_gap["lo"], "qa_gap_hi": qa_gap["hi"],
                    "qa_n": qa_gap["n"]})
        if raw_reference:
            row["qa_raw"] = mean_ci([float(r["exact"]) for r in q["raw"]])["mean"]
    row["eval_s"] = round(time.perf_counter() - t, 1)
    curve_path.parent.mkdir(parents=True, exist_ok=True)
    with open(curve_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    model.train(was_training)
    return row


def training_record(config, data: CompressorData, optimizer_steps: int) -> dict:
    """What the saved directory records of its training (``rhea_config.json`` ``extra.training``)."""
    c = config.compressor
    return {"recipe": "rhea train (run.stage compressor)", "data": config.data.path,
            "self_replies": list(c.self_replies), "optimizer_steps": optimizer_steps,
            "batch_size": config.data.batch_size, "lr": config.optim.lr, "chunk_tokens": c.chunk_tokens,
            "chunk_stride": c.chunk_stride, "train_generate": c.train_generate, "qa_share": c.qa_share,
            "babi": c.babi, "babi_tasks": list(c.babi_tasks) if c.babi else None,
            "content_weight": c.content_weight, "train_chunks": len(data.samples)}
