"""Fact-QA through the latents: ICAE's fine-tuning stage, laid out the way the policy uses latents.

Auto-encoding (`rhea.training.compressor`) teaches the compress adapter to put a reply's text into
its `<mem>` slots, with the slots in a *user* message followed by "reconstruct". In a conversation
the latents stand in an *assistant* message and the model must answer a later question from them.
This stage trains exactly that: ``[user: context question] [assistant: <mem>×n] [user: question]
→ [assistant: answer]``, built by `rhea.training.data.build_turn_sample` (the same
`assemble_plan` the policies and `benchmarks/fact_recall.py` use), with the loss on the answer only.

Two sources of question/answer pairs, both from real public text and neither from the hand-written
held-apart set `rhea/data/fact_recall.jsonl` or the templates of `rhea.training.synthetic`:

* `load_babi_qa`: bAbI stories (the statements before a question) as the reply, the bAbI question
  and its one-word answer (people, places, objects);
* `cloze_qa`: a concrete span (a number, a date, a capitalised name) of a real reply chunk blanked
  out of its sentence; the question shows the sentence with the blank, the answer is the span.

Held-apart items are chosen by a hash of their source (`rhea.training.compressor.held_apart`), so
the cloze items of a held-apart reply are never trained on.

>>> from rhea.training.compressor import TextChunk
>>> items = cloze_qa([TextChunk("r:1:0", "The eco programme uses 9.5 litres per cycle.")], seed=0)
>>> items[0].answer, "____" in items[0].question
('9.5', True)
"""
from __future__ import annotations

import contextlib
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from rhea.eval.cloze import BLANK, CLOZE_QUESTION, blank_sentence as _blank_sentence  # noqa: F401 (re-exported)
from rhea.training.errors import TrainingDataError

#: bAbI tasks whose answer is one fact stated in the story (no counting, lists, yes/no, paths)
DEFAULT_BABI_TASKS = (1, 4, 5, 11, 12, 13)
BABI_USER = "What has happened so far?"
CLOZE_USER = "Go on."

_SPAN = re.compile(
    r"\b\d[\d,.:/]*\d\b|\b\d\b"  # numbers: 9.5, 1,200, 10:30, 2023/24, 7
    r"|(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*\b"  # capitalised names not starting a sentence
)


@dataclass(frozen=True)
class QAItem:
    """One fact-QA example: `reply` is compressed; `question` is asked after it; `answer` is the target."""

    source: str
    user: str
    reply: str
    question: str
    answer: str


def _babi_file(root: Path, task: int) -> Path:
    hits = sorted(root.glob(f"qa{task}_*_test.txt")) + sorted(root.glob(f"qa{task}_*_train.txt"))
    if not hits:
        raise TrainingDataError(f"bAbI task {task}: no file qa{task}_*_test.txt or _train.txt in {root}; "
                                "pass the folder holding the bAbI en 1k files (shared/data/babi_en_1k)")
    return hits[0]


def load_babi_qa(babi_dir: str | Path, tasks: Sequence[int] = DEFAULT_BABI_TASKS, *,
                 max_statements: int = 8) -> list[QAItem]:
    """Every question of the bAbI `tasks` whose story has at most `max_statements` statements.

    The reply is the story's statements so far (the most recent `max_statements`); the source is
    ``babi:qa<task>:<story index>`` so all questions of one story fall on the same side of a split.
    Raises `TrainingDataError` for a missing folder or task file, or a malformed line.
    """
    root = Path(babi_dir)
    if not root.is_dir():
        raise TrainingDataError(f"bAbI folder {root} does not exist; pass e.g. shared/data/babi_en_1k")
    if max_statements < 1:
        raise TrainingDataError(f"max_statements={max_statements} must be >= 1")
    out: list[QAItem] = []
    for task in tasks:
        path = _babi_file(root, task)
        story: list[str] = []
        n_story = -1
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            num, _, text = line.partition(" ")
            if not num.isdigit():
                raise TrainingDataError(f"{path} line {k} does not start with a bAbI line number: {line[:60]!r}")
            if num == "1":
                story, n_story = [], n_story + 1
            if "\t" in text:
                parts = text.split("\t")
                if len(parts) < 2 or not parts[1].strip():
                    raise TrainingDataError(f"{path} line {k}: a question line needs '<question>\\t<answer>'")
                if story and len(story) <= max_statements:
                    answer = " and ".join(a.strip() for a in parts[1].split(","))
                    out.append(QAItem(f"babi:qa{task}:{n_story}", BABI_USER, " ".join(story),
                                      parts[0].strip(), answer))
            else:
                story.append(text.strip())
    return out


#: a blanked sentence shorter than this (words, the blank included) gives no item ("____." has no context)
MIN_CLOZE_WORDS = 5
_LEAD = re.compile(r"[\s'\"*#>(\[`_-]+$")


#: capitalised words that start clauses (after a heading or a line break) rather than name something
_FUNCTION_WORDS = frozenset("""a an and also as at but by each finally first for from he her here his however i if in
it its my next no note now of on once or our second she so some that the their then there these they this those
to we what when where which while who why will with yes you your""".split())


def _starts_a_clause(text: str, m: re.Match) -> bool:
    """Not a fact worth asking for: a one-digit number (guessable), a capitalised function word, or a
    capitalised word after a stop, a colon, an opening quote/markup or at the start of the text."""
    if m.group()[0].isdigit():
        return len(m.group()) < 2
    if m.group().split()[0].lower() in _FUNCTION_WORDS:
        return True
    before = _LEAD.sub("", text[:m.start()])
    return not before or before[-1] in ".!?:;"


def cloze_qa(chunks: Sequence, *, seed: int = 0, per_chunk: int = 1) -> list[QAItem]:
    """Up to `per_chunk` cloze items per text chunk (`TextChunk`): a number, date or name blanked out.

    A span is used only if it occurs once in the chunk (so the blanked sentence has one answer).
    Chunks with no such span give no item. Deterministic for a given `seed`.
    """
    rng = random.Random(seed)
    out = []
    for c in chunks:
        spans = [m for m in _SPAN.finditer(c.text) if c.text.count(m.group()) == 1 and not _starts_a_clause(c.text, m)]
        rng.shuffle(spans)
        kept = 0
        for m in spans:
            if kept == per_chunk:
                break
            sentence = _blank_sentence(c.text, m.start(), m.end())
            if len(sentence.split()) < MIN_CLOZE_WORDS:
                continue
            kept += 1
            out.append(QAItem(c.source, CLOZE_USER, c.text, CLOZE_QUESTION.format(sentence=sentence), m.group()))
    return out


def split_items(items: Sequence[QAItem], share: float = 0.2) -> tuple[list[QAItem], list[QAItem]]:
    """(train, held_apart) by `rhea.training.compressor.held_apart` on each item's source."""
    from rhea.training.compressor import held_apart

    if not 0 < share < 1:
        raise TrainingDataError(f"held-apart share={share} must be in (0, 1)")
    return ([it for it in items if not held_apart(it.source, share)],
            [it for it in items if held_apart(it.source, share)])


# ---------------------------------------------------------------------- batches and measures
def factqa_batch(model, items: Sequence[QAItem], *, raw: bool = False) -> dict:
    """Left-padded ``input_ids``/``attention_mask``/``labels`` (labels on the answer only); one `<mem>`
    block per row, in row order, for ``model.compress([it.reply for it in items])`` (with ``raw``: the
    reply as text instead, the reference the latents are measured against)."""
    from rhea.context import Conversation, Turn
    from rhea.training.data import build_turn_sample, collate

    if not items:
        raise TrainingDataError("factqa_batch needs at least one item")
    samples = [build_turn_sample("", Conversation([Turn(it.user, it.reply)]), Turn(it.question, it.answer),
                                 ["raw" if raw else "latent"], model.tokenizer, model.n_mem, f"fact-QA item {it.source}")
               for it in items]
    return collate(samples, model.tokenizer.pad_token_id)


def factqa_loss(model, items: Sequence[QAItem], *, decoder=contextlib.nullcontext) -> torch.Tensor:
    """Cross-entropy of the answers given each reply's latents (the compress pass keeps its graph).

    `decoder` is a context manager entered for the generate pass only (e.g. ``peft_model.disable_adapter``
    to answer with the plain base model while the compress adapter stays on)."""
    latents = model.compress([it.reply for it in items])
    b = factqa_batch(model, items)
    dev = model.device
    with decoder():
        return model(input_ids=b["input_ids"].to(dev), latent_embeds=latents,
                     attention_mask=b["attention_mask"].to(dev), labels=b["labels"].to(dev)).loss


@torch.no_grad()
def answer_accuracy(model, items: Sequence[QAItem], latents: torch.Tensor | None) -> list[dict]:
    """Per item, teacher-forced: whether every answer token is the argmax, and the token share
    (``latents=None``: with each reply as raw text)."""
    b = factqa_batch(model, items, raw=latents is None)
    dev = model.device
    out = model(input_ids=b["input_ids"].to(dev), latent_embeds=None if latents is None else latents.to(dev),
                attention_mask=b["attention_mask"].to(dev))
    pred = out.logits[:, :-1].argmax(-1).cpu()
    gold = b["labels"][:, 1:]
    keep = gold != -100
    rows = []
    for r in range(len(items)):
        # the answer's tokens, without the end-of-turn markup the template appends after it
        n_answer = len(model.tokenizer(items[r].answer, add_special_tokens=False)["input_ids"])
        pos = keep[r].nonzero().flatten()[:max(1, n_answer)]
        hits = (pred[r, pos] == gold[r, pos])
        rows.append({"exact": bool(hits.all()), "token_share": float(hits.float().mean()), "first": bool(hits[0])})
    return rows


@torch.no_grad()
def factqa_scores(model, items: Sequence[QAItem], *, batch_size: int = 8, raw: bool = False) -> dict:
    """Teacher-forced answer accuracy with each item's own latents and with another item's (the control);
    with ``raw`` also with the reply as text (``"raw"``)."""
    from rhea.training.compressor import own_and_control

    items = list(items)
    own, control = own_and_control(model, [it.reply for it in items],
                                   lambda idx, latents: answer_accuracy(model, [items[j] for j in idx], latents),
                                   batch_size=batch_size)
    extra = {"raw": [r for i in range(0, len(items), batch_size)
                     for r in answer_accuracy(model, items[i:i + batch_size], None)]} if raw else {}
    return {"own": own, "control": control, **extra}
