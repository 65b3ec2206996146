"""Train a retrieval read-out (`rhea.modeling.score_head.ScoreHead`) over a frozen compressor's latents.

The compressor, both adapters and the `<mem>` slots stay as they are (reconstruction is untouched); only a linear
map from the latents to the vectors HCR scores is learned, with the in-batch contrastive loss of the joint trainer
(`rhea.training.losses.ContrastiveRetrievalLoss`: each question against every reply of the batch, max cosine over
the slot pairs, temperature 0.05, both directions). Because the compressor is frozen, every text is compressed
once and the head trains on the stored latents: seconds per hundred steps on a CPU.

The pairs are real: the user message and the reply that answered it, from the public conversations in the shared
data layout (UltraChat, MT-Bench with its reference answers, MT-Eval). None of them come from the conversations
``benchmarks/retrieval_recall.py`` measures on (TopiOCQA, MultiWOZ, SGD). Pairs are split by conversation
(`split_pairs`), so a held-apart conversation never trains the head.

>>> pairs = [QueryReply(f"c{i}:0", f"question {i}", f"answer {i}") for i in range(8)]
>>> train, test = split_pairs(pairs, share=0.25)
>>> len(train) + len(test)
8
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from rhea.training.errors import TrainingDataError
from rhea.training.losses import max_cosine  # the HCR score, differentiable (also the contrastive loss's)

#: (file under the data folder, reader) for the public conversations that give (question, reply) pairs
PAIR_SOURCES = (
    "dialogue_corpora/ultrachat_200k_sample20.json",
    "mt_bench/reference_answer_gpt-4.jsonl",
    "mt_eval/raw_mt-bench_extended.jsonl",
    "mt_eval/raw_documents.jsonl",
)


@dataclass(frozen=True)
class QueryReply:
    """A user message and the reply that answered it; `source` is ``file-tag:conversation:turn``."""

    source: str
    query: str
    reply: str


def _jsonl(path: Path) -> list[dict]:
    from rhea.training.compressor import _records

    try:
        return _records(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TrainingDataError(f"{path} is not valid JSON/JSONL ({e})") from e


def _ok(*texts) -> bool:
    return all(isinstance(t, str) and t.strip() for t in texts)


def load_query_reply_pairs(data_dir: str | os.PathLike) -> list[QueryReply]:
    """Every (user message, reply) pair of the known public conversations under `data_dir` (`PAIR_SOURCES`).

    Raises `TrainingDataError` when the folder holds none of them or a file is malformed.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise TrainingDataError(f"data directory {root} does not exist; pass the folder holding e.g. {PAIR_SOURCES[0]}")
    out: list[QueryReply] = []
    found = [name for name in PAIR_SOURCES if (root / name).is_file()]
    if not found:
        raise TrainingDataError(f"{root} holds none of {list(PAIR_SOURCES)}; pass a directory in the shared/data layout")
    for name in found:
        path = root / name
        if name.startswith("dialogue_corpora/ultrachat"):
            for c, conv in enumerate(_jsonl(path)):
                msgs = conv.get("messages", []) if isinstance(conv, dict) else []
                for i in range(len(msgs) - 1):
                    a, b = msgs[i], msgs[i + 1]
                    if a.get("role") == "user" and b.get("role") == "assistant" and _ok(a.get("content"), b.get("content")):
                        out.append(QueryReply(f"ultrachat:{c}:{i}", a["content"].strip(), b["content"].strip()))
        elif name.startswith("mt_bench/"):
            questions_path = root / "mt_bench/question.jsonl"
            if not questions_path.is_file():
                continue
            questions = {q.get("question_id"): q.get("turns", []) for q in _jsonl(questions_path)}
            for row in _jsonl(path):
                turns = questions.get(row.get("question_id"), [])
                answers = (row.get("choices") or [{}])[0].get("turns", [])
                for k, (q, a) in enumerate(zip(turns, answers)):
                    if _ok(q, a):
                        out.append(QueryReply(f"mtbench:{row['question_id']}:{k}", q.strip(), a.strip()))
        elif name.endswith("raw_mt-bench_extended.jsonl"):
            for r, row in enumerate(_jsonl(path)):
                for k, t in enumerate(row.get("conversation", [])):
                    if isinstance(t, dict) and _ok(t.get("user"), t.get("sys")):
                        out.append(QueryReply(f"mteval:{r}:{k}", t["user"].strip(), t["sys"].strip()))
        elif name.endswith("raw_documents.jsonl"):
            for r, row in enumerate(_jsonl(path)):
                if _ok(row.get("prompt"), row.get("gen_resp")):
                    out.append(QueryReply(f"mteval-docs:{r}:0", row["prompt"].strip(), row["gen_resp"].strip()))
    if not out:
        raise TrainingDataError(f"the files {found} under {root} hold no (question, reply) pair")
    return out


def self_reply_pairs(path: str | os.PathLike, prompts: dict[str, str]) -> list[QueryReply]:
    """(prompt, the model's own reply) pairs from a ``scripts/generate_replies.py`` file; `prompts` maps each row's
    ``source`` to the prompt it answered (``generate_replies.load_prompts``). IFEval's two prompt files share keys
    (one prompt with and without its instructions), so a key is one conversation whichever file it came from.
    Raises `TrainingDataError` for a missing file, a malformed row or a source with no prompt."""
    from rhea.training.compressor import load_self_replies

    out = []
    for chunk in load_self_replies(path):
        source = chunk.source.removeprefix("self:")
        if source not in prompts:
            raise TrainingDataError(f"{path}: no prompt for source {source!r} in the data folder; pass the --data the "
                                    "replies were generated from")
        name, key = source.rsplit(":", 1)
        conv = f"ifeval/{key}" if name.startswith("ifeval/") else source
        out.append(QueryReply(f"self:{conv}:0", prompts[source], chunk.text))
    return out


def conversation_of(source: str) -> str:
    """``file-tag:conversation`` of a pair's source: the unit that stays on one side of the split."""
    return source.rsplit(":", 1)[0]


def split_pairs(pairs: Sequence[QueryReply], share: float = 0.25, salt: str = "rhea-score-head"
                ) -> tuple[list[QueryReply], list[QueryReply]]:
    """(train, held_apart) by a fixed hash of the conversation: every turn of one conversation on one side."""
    if not 0 < share < 1:
        raise TrainingDataError(f"held-apart share={share} must be in (0, 1)")

    def held(p: QueryReply) -> bool:
        h = int(hashlib.sha256(f"{salt}:{conversation_of(p.source)}".encode()).hexdigest()[:8], 16)
        return h / 0xFFFFFFFF < share

    return [p for p in pairs if not held(p)], [p for p in pairs if held(p)]


@torch.no_grad()
def latent_blocks(model, texts: Sequence[str], layers: Sequence[int], *, batch_size: int = 8,
                  log: Callable[[str], None] | None = None) -> torch.Tensor:
    """``[len(texts), n_mem, len(layers) * hidden]`` fp32 CPU: the blocks of each text's latents a head over
    `layers` reads (compress adapter, eval mode; a text as the policy compresses a reply, `compress_replies`)."""
    from rhea.modeling.score_head import gather_blocks

    was = model.training
    model.eval()
    out, t0 = [], time.perf_counter()
    try:
        for i in range(0, len(texts), batch_size):
            lat = model.compress_replies(list(texts[i:i + batch_size]), batch_size=batch_size)
            rows = {x.shape[0] for x in lat}
            if len(rows) != 1:
                raise TrainingDataError("the score head trains on one block of n_mem latents per text; this model "
                                        "compresses replies in pieces (compress_chunk_tokens): set it to None first")
            out.append(gather_blocks(torch.stack(lat), model.hidden_size, layers).cpu())
            if log and ((i // batch_size) % 20 == 19 or i + batch_size >= len(texts)):
                log(f"  compressed {min(i + batch_size, len(texts))}/{len(texts)} texts ({time.perf_counter() - t0:.0f} s)")
    finally:
        model.train(was)
    return torch.cat(out) if out else torch.zeros(0, model.n_mem, len(layers) * model.hidden_size)


def recall_at(scores: torch.Tensor, ks: Sequence[int] = (1, 5)) -> dict[str, float]:
    """R@k of a square score matrix whose diagonal holds each query's own reply (ties count against it)."""
    own = scores.diag()[:, None]
    rank = (scores > own).sum(1) + ((scores == own).sum(1) - 1)
    return {f"R@{k}": float((rank < k).double().mean()) for k in ks}


def head_scores(head, q: torch.Tensor, r: torch.Tensor, *, batch: int = 256) -> torch.Tensor:
    """Max-cosine of every query against every reply through `head` (None = the blocks as they are)."""
    with torch.no_grad():
        fq = q if head is None else head.proj(q)
        fr = r if head is None else torch.cat([head.proj(r[i:i + batch]) for i in range(0, len(r), batch)])
        return torch.cat([max_cosine(fq[i:i + batch], fr) for i in range(0, len(fq), batch)])


@dataclass
class HeadReport:
    dim: int
    layers: list[int]
    steps: int
    train_pairs: int
    held_apart_pairs: int
    before: dict
    after: dict
    curve: list[dict]
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def train_score_head(hidden: int, q_train: torch.Tensor, r_train: torch.Tensor, *, dim: int, layers: Sequence[int],
                     steps: int = 600, batch: int = 64, lr: float = 1e-3, weight_decay: float = 0.01,
                     temperature: float = 0.05, seed: int = 0, q_test: torch.Tensor | None = None,
                     r_test: torch.Tensor | None = None, eval_every: int = 100,
                     log: Callable[[str], None] | None = print) -> tuple["ScoreHead", HeadReport]:
    """Fit a `ScoreHead` (``hidden``, `dim`, `layers`) on stored latent blocks (`latent_blocks`) of matching
    question/reply rows. The inputs are standardised per feature on the training latents first and that
    standardisation is folded into the head's weight and bias, so the saved head reads raw latents."""
    from rhea.modeling.score_head import ScoreHead

    if len(q_train) != len(r_train) or len(q_train) < 2:
        raise TrainingDataError(f"need >= 2 matching question/reply rows to train a score head, got "
                                f"{len(q_train)} questions and {len(r_train)} replies")
    if dim < 1 or steps < 0 or batch < 2 or lr <= 0 or temperature <= 0:
        raise TrainingDataError(f"dim={dim} (>= 1), steps={steps} (>= 0), batch={batch} (>= 2), lr={lr} (> 0) and "
                                f"temperature={temperature} (> 0) are out of range")
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    flat = torch.cat([q_train, r_train]).reshape(-1, q_train.shape[-1])
    mu, sd = flat.mean(0), flat.std(0).clamp_min(1e-4)
    head = ScoreHead(hidden, dim, layers)
    proj = torch.nn.Linear(q_train.shape[-1], dim, bias=False)   # trained on standardised inputs
    with torch.no_grad():
        proj.weight.normal_(0.0, 1.0 / math.sqrt(q_train.shape[-1]), generator=g)
    opt = torch.optim.AdamW(proj.parameters(), lr=lr, weight_decay=weight_decay)
    zq, zr = (q_train - mu) / sd, (r_train - mu) / sd
    has_test = q_test is not None and r_test is not None and len(q_test) > 1

    def fold() -> None:   # W (x - mu) / sd = (W / sd) x - (W / sd) mu
        with torch.no_grad():
            w = proj.weight / sd
            head.proj.weight.copy_(w)
            head.proj.bias.copy_(-(w @ mu))

    before = recall_at(head_scores(None, q_test, r_test)) if has_test else {}
    curve = []
    f = torch.nn.functional
    n = len(zq)
    for step in range(1, steps + 1):
        idx = torch.randperm(n, generator=g)[: min(batch, n)]
        s = max_cosine(proj(zq[idx]), proj(zr[idx])) / temperature
        target = torch.arange(len(idx))
        loss = (f.cross_entropy(s, target) + f.cross_entropy(s.T, target)) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % eval_every == 0 or step == steps:
            row = {"step": step, "loss": round(float(loss.detach()), 4)}
            if has_test:
                fold()
                row.update(recall_at(head_scores(head, q_test, r_test)))
            curve.append(row)
            if log:
                log("  " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    fold()
    after = recall_at(head_scores(head, q_test, r_test)) if has_test else {}
    report = HeadReport(dim, list(layers), steps, n, len(q_test) if has_test else 0, before, after, curve,
                        round(time.perf_counter() - t0, 1))
    return head, report
