"""Training samples in the paper's layout, built through `rhea.context` like inference.

For turn t of a conversation the sample is (H<t, u_t, b_t): past user turns stay raw text,
past replies become `Latent`s (compressed inside the training step, with gradient), some
past replies stay raw and some turns are dropped (``TierMix``) so training sees the same
mixture HCR produces at inference. Loss falls on b_t's tokens only. The prompt is an
`assemble_plan` + `render` of exactly the plan a policy would build.

>>> from rhea.testing import tiny_rhea
>>> model = tiny_rhea()
>>> convs = [("", Conversation([Turn("what is the capital", "paris"), Turn("which city", "paris")]))]
>>> ds = build_conversation_samples(convs, model.tokenizer, n_mem=model.n_mem, tiers=TierMix(raw=0.0, drop=0.0))
>>> len(ds.samples), ds.samples[1].compress_texts
(2, ['paris'])
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from rhea.context import ContextPlan, Conversation, Latent, Turn, TurnDecision, render
from rhea.policies import assemble_plan
from rhea.training.errors import TrainingDataError

IGNORE_INDEX = -100


@dataclass(frozen=True)
class TierMix:
    """Share of past turns kept as raw text and share dropped; the rest become latents.

    >>> TierMix(raw=0.2, drop=0.1).latent
    0.7
    """

    raw: float = 0.2
    drop: float = 0.1

    def __post_init__(self) -> None:
        if not (0 <= self.raw <= 1 and 0 <= self.drop <= 1 and self.raw + self.drop <= 1):
            raise TrainingDataError(f"tier shares raw={self.raw}, drop={self.drop} must be in [0, 1] and sum to <= 1")

    @property
    def latent(self) -> float:
        return round(1.0 - self.raw - self.drop, 10)

    def draw(self, rng: random.Random) -> str:
        x = rng.random()
        return "raw" if x < self.raw else "drop" if x < self.raw + self.drop else "latent"


@dataclass
class Sample:
    """One training example: token ids, labels (-100 = no loss) and the texts to compress,
    in the order their `<mem>` blocks appear in `input_ids`."""

    input_ids: list[int]
    labels: list[int]
    compress_texts: list[str] = field(default_factory=list)
    source: str = ""


@dataclass
class SkipRecord:
    """Why an example was left out (never silently truncated)."""

    source: str
    reason: str
    tokens: int


@dataclass
class SampleSet:
    samples: list[Sample]
    skipped: list[SkipRecord]

    def report(self) -> str:
        """One line: kept and skipped counts, with the reasons."""
        reasons: dict[str, int] = {}
        for s in self.skipped:
            key = s.reason.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        return f"{len(self.samples)} samples kept, {len(self.skipped)} skipped" + (f" ({reasons})" if reasons else "")


class _VocabCachedTokenizer:
    """Delegates to a tokenizer but computes ``get_vocab()`` once: `render` asks for it on every
    call (~0.1 s for a 49k vocabulary), which dominates building thousands of samples."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._vocab = tokenizer.get_vocab()

    def get_vocab(self):
        return self._vocab

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def _encode_completion(tokenizer, prompt_plan: ContextPlan, full_plan: ContextPlan, where: str) -> tuple[list[int], list[int]]:
    """Render the plan without and with the reply; labels cover only the reply's tokens."""
    prompt = render(prompt_plan, tokenizer, add_generation_prompt=True, literal_mem="escape").input_ids[0].tolist()
    full = render(full_plan, tokenizer, add_generation_prompt=False, literal_mem="escape").input_ids[0].tolist()
    if full[: len(prompt)] != prompt:
        raise TrainingDataError(
            f"{where}: the chat template does not render the prompt as a prefix of prompt + reply, so the reply's "
            "tokens cannot be located; use a template whose generation prompt equals the assistant header"
        )
    return full, [IGNORE_INDEX] * len(prompt) + full[len(prompt):]


def _placeholder_latent(n_mem: int, turn: int) -> Latent:
    # Only the slot count matters when rendering; the step fills the slots with real latents.
    return Latent(torch.zeros(n_mem, 1), turn)


def build_turn_sample(system: str, history: Conversation, turn: Turn, tiers: list[str], tokenizer, n_mem: int,
                      where: str) -> Sample:
    """The sample for one turn: `history` tiered by `tiers`, then ``turn.user`` → ``turn.assistant``."""
    decisions = [TurnDecision(i, tier) for i, tier in enumerate(tiers)]
    latents = {i: _placeholder_latent(n_mem, i) for i, tier in enumerate(tiers) if tier == "latent"}
    plan = assemble_plan("training", history, turn.user, decisions, system_source=system or None, latents=latents)
    full = ContextPlan(plan.messages + [{"role": "assistant", "content": turn.assistant}], plan.decisions, plan.ledger, plan.policy)
    input_ids, labels = _encode_completion(tokenizer, plan, full, where)
    texts = [history[i].assistant for i in sorted(latents)]
    return Sample(input_ids, labels, texts, where)


def build_conversation_samples(
    conversations: list[tuple[str, Conversation]],
    tokenizer,
    *,
    n_mem: int,
    tiers: TierMix = TierMix(),
    max_length: int = 2048,
    max_compress_length: int = 512,
    min_turn: int = 0,
    seed: int = 0,
) -> SampleSet:
    """One sample per (conversation, turn >= min_turn); tiers drawn from `seed` (reproducible).

    Samples longer than `max_length` tokens, or compressing a reply longer than
    `max_compress_length`, are skipped with a `SkipRecord`.
    """
    rng = random.Random(seed)
    tokenizer = _VocabCachedTokenizer(tokenizer)
    samples, skipped = [], []
    for c, (system, conv) in enumerate(conversations):
        for t in range(min_turn, len(conv)):
            where = f"conversation {c} turn {t}"
            if not conv[t].assistant.strip():
                skipped.append(SkipRecord(where, "empty reply: nothing to train on", 0))
                continue
            tiers_t = [tiers.draw(rng) for _ in range(t)]
            sample = build_turn_sample(system, conv[:t], conv[t], tiers_t, tokenizer, n_mem, where)
            too_long = [len(tokenizer(x, add_special_tokens=False)["input_ids"]) for x in sample.compress_texts]
            if len(sample.input_ids) > max_length:
                skipped.append(SkipRecord(where, f"too long: {len(sample.input_ids)} > max_length={max_length}", len(sample.input_ids)))
            elif too_long and max(too_long) > max_compress_length:
                skipped.append(SkipRecord(where, f"reply too long to compress: {max(too_long)} > max_compress_length={max_compress_length}", max(too_long)))
            else:
                samples.append(sample)
    return SampleSet(samples, skipped)


def build_trajectory_samples(trajectories: list[tuple[list[dict], list[bool]]], tokenizer, *, max_length: int = 2048) -> SampleSet:
    """Sculptor instances: loss on exactly the assistant messages their `loss_mask` marks."""
    tokenizer = _VocabCachedTokenizer(tokenizer)
    samples, skipped = [], []
    for n, (messages, mask) in enumerate(trajectories):
        where = f"trajectory {n}"
        full = render(ContextPlan(messages), tokenizer, add_generation_prompt=False, literal_mem="escape").input_ids[0].tolist()
        labels = [IGNORE_INDEX] * len(full)
        for i, on in enumerate(mask):
            if not on:
                continue
            ids, lab = _encode_completion(tokenizer, ContextPlan(messages[:i]), ContextPlan(messages[: i + 1]), f"{where} message {i}")
            if full[: len(ids)] != ids:
                raise TrainingDataError(f"{where}: message {i} does not render as a prefix of the whole trajectory")
            labels[: len(lab)] = [b if b != IGNORE_INDEX else a for a, b in zip(labels[: len(lab)], lab)]
        if len(full) > max_length:
            skipped.append(SkipRecord(where, f"too long: {len(full)} > max_length={max_length}", len(full)))
        elif all(x == IGNORE_INDEX for x in labels):
            skipped.append(SkipRecord(where, "no loss: loss_mask marks no assistant message", len(full)))
        else:
            samples.append(Sample(full, labels, [], where))
    return SampleSet(samples, skipped)


def collate(samples: list[Sample], pad_token_id: int) -> dict:
    """Left-pad a list of samples into a batch (no packing: each row is one sample).

    >>> b = collate([Sample([1, 2, 3], [-100, 2, 3], ["x"]), Sample([4], [4])], pad_token_id=0)
    >>> b["input_ids"].tolist(), b["labels"].tolist(), b["compress_texts"]
    ([[1, 2, 3], [0, 0, 4]], [[-100, 2, 3], [-100, -100, 4]], ['x'])
    """
    width = max(len(s.input_ids) for s in samples)
    input_ids = torch.full((len(samples), width), int(pad_token_id), dtype=torch.long)
    labels = torch.full((len(samples), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
    for row, s in enumerate(samples):
        n = len(s.input_ids)
        input_ids[row, width - n:] = torch.tensor(s.input_ids)
        labels[row, width - n:] = torch.tensor(s.labels)
        attention_mask[row, width - n:] = 1
    texts = [t for s in samples for t in s.compress_texts]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels, "compress_texts": texts}
