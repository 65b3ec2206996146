"""Data and scores for evaluating Context-Agent on real topic-switching dialogue.

- `load_topiocqa(path)`: the TopiOCQA conversations MemoChat re-packs for topic segmentation
  (``topiocqa_test_question.jsonl``, rows of type ``writing_topiocqa``): numbered ``user:`` /
  ``bot:`` lines and the gold topic segments. Each conversation becomes an episode with its user
  turns, the gold replies and the gold topic of every turn.
- `load_ntm(path)`: the paper's NTM benchmark JSONL (the authors' ``input/dataset-full.jsonl``).
- `context_tokens(messages, tokenizer)`: tokens of the context as the reference counts them (the
  messages before the current query; neither the query nor the reply).
- `token_f1`, `topic_agreement`: per-turn answer F1 against the gold reply, and how far the forest's
  trees agree with the gold topic segments.

>>> round(token_f1("It is in Paris, France.", "Paris"), 3)
0.333
>>> topic_agreement(["t1", "t1", "t2", "t1"], ["a", "a", "b", "a"])["pair_agreement"]
1.0
"""
from __future__ import annotations

import json
import re
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

from rhea.eval.loaders import DataFormatError
from rhea.eval.suites.base import normalize_answer
from rhea.policies.assemble import count_tokens

_LINE = re.compile(r"^\(line (\d+)\) (user|bot): ?(.*)$")


def _read_jsonl(path: str | Path) -> list[tuple[int, dict]]:
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: no such file; pass the JSONL file itself")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"{path}:{number} is not JSON ({exc}); expected one object per line") from exc
    return rows


def load_topiocqa(path: str | Path, limit: int | None = None) -> list[dict]:
    """Episodes {"id", "source", "user_turns", "gold_replies", "topics"} from MemoChat's TopiOCQA file.

    Only ``writing_topiocqa`` rows hold whole conversations; ``retrieval_topiocqa`` rows are skipped.
    """
    episodes = []
    for number, row in _read_jsonl(path):
        if row.get("type") != "writing_topiocqa":
            continue
        where = f"{path}:{number}"
        try:
            block = row["text"].split("Task Conversation:\n", 1)[1].split("```", 1)[0]
            segments = json.loads(row["answer"]) if isinstance(row["answer"], str) else row["answer"]
            spans = [(int(s["start"]), int(s["end"]), str(s["topic"])) for s in segments]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise DataFormatError(f"{where}: not a MemoChat writing_topiocqa row ({exc!r}); expected 'text' with a "
                                  "'Task Conversation:' block and 'answer' = [{topic, start, end}]") from exc
        lines = [m.groups() for m in map(_LINE.match, block.strip().splitlines()) if m]
        user_turns, gold, topics = [], [], []
        for (n1, r1, t1), (_, r2, t2) in zip(lines[::2], lines[1::2]):
            if (r1, r2) != ("user", "bot"):
                raise DataFormatError(f"{where}: line {n1} starts a {r1}/{r2} pair; expected user then bot lines")
            topic = next((name for start, end, name in spans if start <= int(n1) <= end), None)
            if topic is None:
                raise DataFormatError(f"{where}: line {n1} lies in no gold topic segment {spans}")
            user_turns.append(t1.strip())
            gold.append(t2.strip())
            topics.append(topic)
        if not user_turns:
            raise DataFormatError(f"{where}: no '(line k) user: ...' lines in the Task Conversation block")
        episodes.append({"id": f"topiocqa-{row.get('question_id', number)}", "source": "topiocqa",
                         "user_turns": user_turns, "gold_replies": gold, "topics": topics})
        if limit is not None and len(episodes) >= limit:
            break
    if not episodes:
        raise DataFormatError(f"{path}: no writing_topiocqa rows; pass MemoChat's topiocqa_test_question.jsonl")
    return episodes


def load_ntm(path: str | Path, limit: int | None = None) -> list[dict]:
    """NTM conversations {"id", "source", "user_turns", "checkpoint_question"} (the last turn is the checkpoint)."""
    episodes = []
    for number, obj in _read_jsonl(path):
        try:
            turns = [t["content"] for t in sorted(obj["user_turns"], key=lambda t: int(t["turn_id"]))]
            episodes.append({"id": str(obj["conversation_id"]), "source": "ntm", "user_turns": turns,
                             "checkpoint_question": str(obj["checkpoint_question"]).strip()})
        except (ValueError, KeyError, TypeError) as exc:
            raise DataFormatError(f"{path}:{number} is not an NTM record ({exc!r}); expected conversation_id, "
                                  "user_turns [{turn_id, content}], checkpoint_question") from exc
        if limit is not None and len(episodes) >= limit:
            break
    return episodes


def context_tokens(messages: list[dict], tokenizer: Any = None) -> int:
    """Tokens of every message before the final user query (the reference's ``compute_context_tokens``:
    system prompt and earlier turns; not the current query, not the reply; no chat-template tokens).

    >>> context_tokens([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}])
    3
    """
    if messages and messages[-1]["role"] == "user":
        messages = messages[:-1]
    return sum(count_tokens(m["content"], tokenizer) for m in messages)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between normalised prediction and gold (0.0 when either is empty)."""
    pred, want = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(want)).values())
    if not pred or not want or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(want)
    return 2 * precision * recall / (precision + recall)


def topic_agreement(predicted: list[str], gold: list[str]) -> dict:
    """How the forest's tree per turn agrees with the gold topic per turn.

    pair_agreement: share of turn pairs on which "same topic" agrees (the Rand index);
    switch_accuracy: share of consecutive pairs where "the topic changed" agrees;
    switch_precision / switch_recall: of the predicted / gold topic changes.
    """
    if len(predicted) != len(gold):
        raise DataFormatError(f"topic_agreement: {len(predicted)} predicted vs {len(gold)} gold labels")
    pairs = list(combinations(range(len(gold)), 2))
    agree = sum((predicted[i] == predicted[j]) == (gold[i] == gold[j]) for i, j in pairs)
    steps = list(zip(range(len(gold) - 1), range(1, len(gold))))
    pred_sw = [predicted[i] != predicted[j] for i, j in steps]
    gold_sw = [gold[i] != gold[j] for i, j in steps]
    hits = sum(p and g for p, g in zip(pred_sw, gold_sw))
    return {"pair_agreement": agree / len(pairs) if pairs else 1.0,
            "switch_accuracy": sum(p == g for p, g in zip(pred_sw, gold_sw)) / len(steps) if steps else 1.0,
            "switch_precision": hits / sum(pred_sw) if any(pred_sw) else None,
            "switch_recall": hits / sum(gold_sw) if any(gold_sw) else None,
            "gold_switches": sum(gold_sw), "predicted_switches": sum(pred_sw)}


__all__ = ["load_topiocqa", "load_ntm", "context_tokens", "token_f1", "topic_agreement"]
