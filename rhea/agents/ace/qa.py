"""Multi-hop QA items for ACE: bAbI stories (passages = story sentences) and HotpotQA JSON
(passages = the context paragraphs), plus the answer check.

>>> is_correct("The milk is in the hallway.", "hallway"), is_correct("hall", "hallway")
(True, False)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rhea.eval.loaders import DataFormatError, load_babi
from rhea.eval.suites.base import normalize_answer


@dataclass(frozen=True)
class QAItem:
    """A question, its gold answer, the passages to search, and the supporting passage indices."""

    id: str
    question: str
    answer: str
    passages: tuple[str, ...]
    supporting: tuple[int, ...] = ()


def babi_items(path: str | Path, *, max_passages: int | None = None) -> list[QAItem]:
    """One item per bAbI question; its passages are the story's facts before it, in order.

    Questions with more than `max_passages` facts before them are skipped (not truncated),
    so a vanilla baseline always sees the whole story.
    """
    items = []
    for s, story in enumerate(load_babi(path)):
        facts: list[tuple[int, str]] = []
        for line in story:
            if not line.is_question:
                facts.append((line.number, line.text))
                continue
            if max_passages is not None and len(facts) > max_passages:
                continue
            position = {number: i for i, (number, _) in enumerate(facts)}
            support = tuple(position[n] for n in line.supporting if n in position)
            items.append(QAItem(f"{Path(path).stem}:{s}:{line.number}", line.text, line.answer,
                                tuple(t for _, t in facts), support))
    return items


def hotpot_items(path: str | Path) -> list[QAItem]:
    """HotpotQA (distractor or fullwiki) JSON: a list of {"_id", "question", "answer", "context":
    [[title, [sentences]]], "supporting_facts": [[title, sent_id]]}; passages = "title: paragraph"."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"{path}: cannot read HotpotQA JSON ({exc}); expected a JSON list of questions") from exc
    if not isinstance(data, list):
        raise DataFormatError(f"{path}: top level is {type(data).__name__}; expected a JSON list of HotpotQA questions")
    items = []
    for n, rec in enumerate(data):
        try:
            titles = [title for title, _ in rec["context"]]
            passages = tuple(f"{title}: {' '.join(s.strip() for s in sents)}" for title, sents in rec["context"])
            support = tuple(sorted({titles.index(t) for t, _ in rec.get("supporting_facts", []) if t in titles}))
            items.append(QAItem(str(rec.get("_id", n)), rec["question"], str(rec["answer"]), passages, support))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(
                f"{path}: record {n} lacks or mis-shapes {exc}; expected keys question, answer, context=[[title, [sentences]]]"
            ) from exc
    return items


def is_correct(prediction: str, gold: str) -> bool:
    """The normalised gold answer occurs as a whole-word span of the prediction."""
    pred, want = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not want:
        return False
    return any(pred[i:i + len(want)] == want for i in range(len(pred) - len(want) + 1))


__all__ = ["QAItem", "babi_items", "hotpot_items", "is_correct"]
