"""Compressor pre-training and its measures: auto-encoding of real text through the latents.

* `load_reply_texts` reads assistant replies / documents from a data directory laid out like
  ``shared/data`` (UltraChat, MT-Bench GPT-4 reference answers, MT-Eval replies and documents).
* `chunk_texts` cuts them into token chunks; `split_held_apart` keeps a disjoint split apart by a
  hash of each chunk's *source* (so no chunk of a held-apart reply is ever trained on).
* `autoencode_batch` renders ``user: <mem>×n + AUTOENCODE_PROMPT`` → ``assistant: text`` exactly as
  `rhea.training.losses.autoencode_loss` does, with labels on the text only.
* `reconstruction_scores` measures teacher-forced token accuracy of the reconstruction with each
  text's own latents and with another text's latents (the control), and `greedy_reconstruction`
  the greedy exact-prefix match; the gap own − control is what the latents carry beyond what the
  generate pass guesses from the prompt and the teacher-forced prefix; `own_and_control` is that
  pairing for any per-row score (`rhea.training.factqa.factqa_scores` uses it too).

>>> from rhea.testing import tiny_rhea
>>> model = tiny_rhea()
>>> scores = reconstruction_scores(model, ["the cat is blue", "paris is the capital of france"])
>>> sorted(scores), len(scores["own"])
(['control', 'n_tokens', 'own'], 2)
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from rhea.context import ContextPlan, Latent
from rhea.training.errors import TrainingDataError
from rhea.training.losses import AUTOENCODE_PROMPT

#: files under a data directory that hold real replies / documents, and how to read them
REPLY_SOURCES = (
    "dialogue_corpora/ultrachat_200k_sample20.json",
    "mt_bench/reference_answer_gpt-4.jsonl",
    "mt_eval/raw_mt-bench_extended.jsonl",
    "mt_eval/raw_documents.jsonl",
)


@dataclass(frozen=True)
class TextChunk:
    """A piece of real text to compress; `source` names the reply/document it was cut from."""

    source: str
    text: str


def _records(path: Path) -> list:
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(raw)
        return data if isinstance(data, list) else [data]
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def _replies_of(name: str, record: dict) -> list[str]:
    if name.startswith("dialogue_corpora/ultrachat"):
        return [m["content"] for m in record.get("messages", []) if m.get("role") == "assistant"]
    if name.startswith("mt_bench/reference_answer"):
        return [t for c in record.get("choices", []) for t in c.get("turns", [])]
    if name.endswith("raw_mt-bench_extended.jsonl"):
        return [t["sys"] for t in record.get("conversation", []) if isinstance(t.get("sys"), str)]
    if name.endswith("raw_documents.jsonl"):
        return [record["gen_resp"]] if isinstance(record.get("gen_resp"), str) else []
    return []


def load_self_replies(path: str | os.PathLike) -> list[TextChunk]:
    """The model's own replies written by ``scripts/generate_replies.py`` (``source`` = ``self:<source>``), from a
    JSONL file, plain or gzipped (``.jsonl.gz``).

    Raises `TrainingDataError` for a missing file, a malformed row, or a file with no reply.
    """
    p = Path(path)
    if not p.is_file():
        raise TrainingDataError(f"self-replies file {p} does not exist; write it with scripts/generate_replies.py")
    out = []
    from rhea.storage import read_text_file

    for n, line in enumerate(read_text_file(p, TrainingDataError, "self-replies file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            source, reply = row["source"], row["reply"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise TrainingDataError(f"{p} line {n} is not a generate_replies row with 'source' and 'reply' ({e!r})") from e
        if isinstance(reply, str) and reply.strip():
            out.append(TextChunk(f"self:{source}", reply.strip()))
    if not out:
        raise TrainingDataError(f"{p} holds no reply")
    return out


def load_reply_texts(data_dir: str | os.PathLike) -> list[TextChunk]:
    """Every non-empty reply/document in the known files under `data_dir` (``source`` = file:record:index).

    Raises `TrainingDataError` when `data_dir` holds none of `REPLY_SOURCES`.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise TrainingDataError(f"data directory {root} does not exist; pass the folder holding e.g. "
                                f"{REPLY_SOURCES[0]} (shared/data layout)")
    out: list[TextChunk] = []
    found = []
    for name in REPLY_SOURCES:
        path = root / name
        if not path.is_file():
            continue
        found.append(name)
        try:
            records = _records(path)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TrainingDataError(f"{path} is not valid JSON/JSONL ({e})") from e
        for r, record in enumerate(records):
            if not isinstance(record, dict):
                continue
            for k, text in enumerate(_replies_of(name, record)):
                if isinstance(text, str) and text.strip():
                    out.append(TextChunk(f"{name}:{r}:{k}", text.strip()))
    if not found:
        raise TrainingDataError(f"{root} holds none of {list(REPLY_SOURCES)}; pass a directory in the shared/data layout")
    return out


def chunk_texts(tokenizer, texts: Sequence[TextChunk], *, max_tokens: int = 48, min_tokens: int = 8,
                first_only: bool = False, stride: int | None = None) -> list[TextChunk]:
    """Cut each text into pieces of `max_tokens` tokens (decoded back to text), one starting every `stride`
    tokens (default `max_tokens`: consecutive pieces; a smaller stride gives overlapping windows, more distinct
    training texts from the same replies).

    Pieces shorter than `min_tokens` are left out. ``first_only`` keeps each text's first piece.
    """
    stride = max_tokens if stride is None else stride
    if max_tokens < 1 or min_tokens < 1 or stride < 1:
        raise TrainingDataError(f"max_tokens={max_tokens}, min_tokens={min_tokens} and stride={stride} must be >= 1")
    out = []
    for t in texts:
        ids = tokenizer(t.text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        for start in range(0, len(ids), stride):
            piece = ids[start:start + max_tokens]
            if len(piece) < min_tokens:
                break
            text = tokenizer.decode(piece).strip()
            if text:
                out.append(TextChunk(f"{t.source}@{start}", text))
            if first_only or start + max_tokens >= len(ids):  # a later window would only repeat this one's tail
                break
    return out


def held_apart(source: str, share: float = 0.2, salt: str = "rhea-reconstruction") -> bool:
    """Whether a source (a reply/document, not a chunk) belongs to the held-apart split: a fixed hash.

    >>> held_apart("a:1:0") == held_apart("a:1:0")
    True
    """
    root = source.split("@")[0]
    h = int(hashlib.sha256(f"{salt}:{root}".encode()).hexdigest()[:8], 16)
    return h / 0xFFFFFFFF < share


def split_held_apart(items: Sequence[TextChunk], share: float = 0.2) -> tuple[list[TextChunk], list[TextChunk]]:
    """(train, held_apart): every chunk of one reply/document falls on the same side."""
    if not 0 < share < 1:
        raise TrainingDataError(f"held-apart share={share} must be in (0, 1)")
    train = [c for c in items if not held_apart(c.source, share)]
    test = [c for c in items if held_apart(c.source, share)]
    return train, test


# ---------------------------------------------------------------------- batches
def _autoencode_plans(model, text: str, i: int, rows: int | None = None) -> tuple[ContextPlan, ContextPlan]:
    placeholder = Latent(torch.zeros(rows or model.n_mem, 1), i)
    prompt = ContextPlan([{"role": "user", "content": [placeholder, "\n" + AUTOENCODE_PROMPT]}])
    return prompt, ContextPlan(prompt.messages + [{"role": "assistant", "content": text}])


def autoencode_batch(model, texts: Sequence[str], rows: Sequence[int] | None = None) -> dict:
    """Left-padded ``input_ids``/``attention_mask``/``labels`` reconstructing each text after its `<mem>` block
    (``rows[i]`` placeholders for text i: a reply compressed in chunks; default ``n_mem``)."""
    from rhea.training.data import Sample, _encode_completion, collate

    samples = []
    for i, text in enumerate(texts):
        prompt, full = _autoencode_plans(model, text, i, None if rows is None else rows[i])
        ids, labels = _encode_completion(model.tokenizer, prompt, full, f"autoencode text {i}")
        samples.append(Sample(ids, labels))
    return collate(samples, model.tokenizer.pad_token_id)


def autoencode_prompt_ids(model, texts: Sequence[str], rows: Sequence[int] | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Left-padded prompt ids (up to the assistant header), attention mask, and each text's target ids."""
    from rhea.training.data import IGNORE_INDEX

    batch = autoencode_batch(model, texts, rows)
    prompts, targets = [], []
    for row in range(len(texts)):
        ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        labels = batch["labels"][row][batch["attention_mask"][row].bool()].tolist()
        first = next(i for i, x in enumerate(labels) if x != IGNORE_INDEX)
        prompts.append(ids[:first])
        targets.append([x for x in labels[first:] if x != IGNORE_INDEX])
    width = max(len(p) for p in prompts)
    pad = model.tokenizer.pad_token_id
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        input_ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    return input_ids, mask, targets


def control_order(n: int) -> list[int]:
    """The control pairing: text i gets the latents of text (i + n//2) mod n (never its own for n >= 2).

    >>> control_order(4)
    [2, 3, 0, 1]
    """
    if n < 2:
        raise TrainingDataError("the control needs at least 2 texts (another text's latents)")
    shift = max(1, n // 2)
    return [(i + shift) % n for i in range(n)]


def _latent_rows(latents: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """(all rows ``[R, width]`` in text order, rows per text) from ``[B, n, width]`` or one ``[rows_i, width]`` per text."""
    if isinstance(latents, torch.Tensor):
        return latents.reshape(-1, latents.shape[-1]), [latents.shape[1]] * latents.shape[0]
    return torch.cat(list(latents)), [x.shape[0] for x in latents]


@torch.no_grad()
def token_hits(model, texts: Sequence[str], latents) -> list[list[bool]]:
    """Per text, per reply token (in order, the end-of-turn tokens included): whether the generate pass predicts it
    (argmax) given `latents` and the true prefix. `latents`: ``[B, n_mem, width]`` or one ``[rows_i, width]`` per
    text (a text compressed in chunks)."""
    flat, rows = _latent_rows(latents)
    batch = autoencode_batch(model, texts, rows)
    device = model.device
    out = model(input_ids=batch["input_ids"].to(device), latent_embeds=flat.to(device),
                attention_mask=batch["attention_mask"].to(device))
    pred = out.logits[:, :-1].argmax(-1).cpu()
    gold = batch["labels"][:, 1:]
    keep = gold != -100
    return [(pred[r][keep[r]] == gold[r][keep[r]]).tolist() for r in range(len(texts))]


def teacher_forced_accuracy(model, texts: Sequence[str], latents) -> tuple[list[float], list[int]]:
    """Per text: share of reply tokens the generate pass predicts (argmax) given `latents` and the true prefix,
    and the reply's token count (`token_hits`)."""
    hits = token_hits(model, texts, latents)
    return [sum(h) / max(1, len(h)) for h in hits], [len(h) for h in hits]


@torch.no_grad()
def own_and_control(model, replies: Sequence[str], score, *, batch_size: int = 8,
                    chunk_tokens: int | None = None) -> tuple[list, list]:
    """Score each reply's rows with its own latents and with `control_order`'s (another reply's).

    ``score(idx, latents)`` returns one value per index in ``idx`` given the latents for those rows
    (``[len(idx), n_mem, width]``, or with `chunk_tokens` one ``[rows, width]`` per index: each reply
    compressed in pieces of at most `chunk_tokens` tokens); the replies are compressed once, in batches
    of `batch_size`. Returns (own, control).
    """
    replies = list(replies)
    latents = model.compress_replies(replies, chunk_tokens=chunk_tokens, batch_size=batch_size)
    pick = (lambda idx: [latents[j] for j in idx]) if chunk_tokens else (lambda idx: torch.stack([latents[j] for j in idx]))
    perm = control_order(len(replies))
    own, control = [], []
    for i in range(0, len(replies), batch_size):
        idx = list(range(i, min(i + batch_size, len(replies))))
        own += score(idx, pick(idx))
        control += score(idx, pick([perm[j] for j in idx]))
    return own, control


@torch.no_grad()
def reconstruction_scores(model, texts: Sequence[str], *, batch_size: int = 8, chunk_tokens: int | None = None) -> dict:
    """Teacher-forced token accuracy per text with its own latents and with `control_order`'s latents
    (`chunk_tokens`: each text compressed in pieces of at most that many tokens, as
    ``RheaConfig.compress_chunk_tokens`` makes the policy do)."""
    texts = list(texts)

    def score(idx, latents):
        acc, n = teacher_forced_accuracy(model, [texts[j] for j in idx], latents)
        return list(zip(acc, n))

    own, control = own_and_control(model, texts, score, batch_size=batch_size, chunk_tokens=chunk_tokens)
    return {"own": [a for a, _ in own], "control": [a for a, _ in control], "n_tokens": [n for _, n in own]}


@torch.no_grad()
def greedy_reconstruction(model, texts: Sequence[str], *, batch_size: int = 8, control: bool = False,
                          chunk_tokens: int | None = None) -> list[dict]:
    """Greedy decoding of each text from its latents (or the control's): exact match and matched prefix share."""
    texts = list(texts)
    latents = model.compress_replies(texts, chunk_tokens=chunk_tokens, batch_size=batch_size)
    if control:
        latents = [latents[j] for j in control_order(len(texts))]
    rows = []
    for i in range(0, len(texts), batch_size):
        chunk = texts[i:i + batch_size]
        flat, counts = _latent_rows(latents[i:i + len(chunk)])
        input_ids, mask, targets = autoencode_prompt_ids(model, chunk, counts)
        width = max(len(t) for t in targets)
        out = model.generate(input_ids.to(model.device), latent_embeds=flat.to(model.device),
                             attention_mask=mask.to(model.device), max_new_tokens=width, do_sample=False)
        new = out[:, input_ids.shape[1]:].tolist()
        for target, got in zip(targets, new):
            got = got[: len(target)]
            prefix = 0
            for a, b in zip(target, got):
                if a != b:
                    break
                prefix += 1
            rows.append({"exact": prefix == len(target), "prefix_share": prefix / max(1, len(target)),
                         "text": model.tokenizer.decode(got, skip_special_tokens=True)})
    return rows


def mean_ci(values: Sequence[float], z: float = 1.96) -> dict:
    """Mean with a normal-approximation 95% interval over the items.

    >>> mean_ci([0.0, 1.0, 0.0, 1.0])["mean"]
    0.5
    """
    n = len(values)
    if n == 0:
        return {"mean": float("nan"), "lo": float("nan"), "hi": float("nan"), "n": 0}
    m = sum(values) / n
    var = sum((v - m) ** 2 for v in values) / max(1, n - 1)
    half = z * (var / n) ** 0.5
    return {"mean": m, "lo": m - half, "hi": m + half, "n": n}
