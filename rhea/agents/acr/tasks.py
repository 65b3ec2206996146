"""Multi-turn QA with drift, for TGSE training and the ACR benchmark.

Each `DriftTask` is a past conversation (with pre-written assistant replies), a final
question and its gold answer. Facts come from the eval harness's key/value vocabulary
(`rhea.eval.suites.builtin.KV_VOCABULARY`), filler from its ordinary questions. Kinds:

- ``correction``: a fact is stated, then corrected mid-conversation; the question asks for it;
- ``failed_attempts``: the fact is stated, the assistant keeps giving the same wrong value,
  the user keeps rejecting it; the question asks again;
- ``clean``: the fact is stated once and asked for (no drift: NONE is the right choice).

`babi_tasks` turns bAbI stories (shared/data's ``babi_en_1k``; qa2/qa3 are the multi-hop
ones) into the same shape: each fact is one user turn, the question is the query, and the
story's possible answers are the confusable candidates. The facts drift by themselves
("Mary went to the kitchen." ... "Mary moved to the garden."), so ACR's operators have
something to refactor on real, not templated, text.

>>> task = drift_tasks(3, seed=0)[0]
>>> task.kind, task.answer in task.candidates, len(task.conversation) >= 3
('correction', True, True)
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from rhea.agents.ace.qa import babi_items
from rhea.agents.acr.errors import ACRConfigError
from rhea.context import Conversation, Turn
from rhea.eval.suites.builtin import KV_VOCABULARY, ORDINARY_QUESTIONS

KINDS = ("correction", "failed_attempts", "clean")
TASK_DESCRIPTION = "Answer the user's questions about facts they told you; facts may be corrected later."
BABI_TASK_DESCRIPTION = ("The user tells a story one fact per turn, then asks a question about it. "
                         "Answer with one word.")
BABI_REPLY = "Got it."
FILLER_REPLY = "That is a broad question; in short, it comes down to a few well-understood physical and biological effects."


@dataclass
class DriftTask:
    """One QA instance: the history, the question, the gold answer and the confusable values."""

    task_id: str
    kind: str
    conversation: Conversation
    query: str
    answer: str
    candidates: list[str]
    task: str = TASK_DESCRIPTION

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "kind": self.kind, "turns": [t.to_dict() for t in self.conversation],
                "query": self.query, "answer": self.answer, "candidates": list(self.candidates), "task": self.task}

    @classmethod
    def from_dict(cls, data: dict) -> "DriftTask":
        return cls(data["task_id"], data["kind"], Conversation([Turn.from_dict(t) for t in data["turns"]]),
                   data["query"], data["answer"], list(data["candidates"]), data.get("task", TASK_DESCRIPTION))


def _filler(rng: random.Random, n: int) -> list[Turn]:
    return [Turn(q, FILLER_REPLY) for q in rng.sample(ORDINARY_QUESTIONS, n)]


def _task(index: int, kind: str, rng: random.Random, n_filler: int) -> DriftTask:
    key = rng.choice(sorted(KV_VOCABULARY))
    old, new = rng.sample(KV_VOCABULARY[key], 2)
    query = f"What is the {key}? Answer with one word."
    turns = [Turn(f"Please remember this: the {key} is {old if kind == 'correction' else new}.",
                  f"Noted, the {key} is {old if kind == 'correction' else new}.")]
    turns += _filler(rng, n_filler)
    if kind == "correction":
        turns.append(Turn(f"Correction: the {key} is actually {new}, not {old}.", "Thanks, noted."))
        turns += _filler(rng, 1)
    elif kind == "failed_attempts":
        turns.append(Turn(f"What is the {key}?", f"The {key} is {old}."))
        turns += [Turn(f"Wrong, try again. It is not {old}.", f"The {key} is {old}.") for _ in range(2)]
    rng.shuffle(turns[1:1 + n_filler])
    return DriftTask(f"{kind}-{index}", kind, Conversation(turns), query, new, [old, new])


def drift_tasks(n: int, *, seed: int = 0, kinds=KINDS, n_filler: int = 2) -> list[DriftTask]:
    """`n` tasks cycling through `kinds`, reproducible from `seed`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ACRConfigError(f"n={n!r} must be an int >= 1")
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ACRConfigError(f"kinds={list(kinds)} must be a non-empty subset of {KINDS}")
    rng = random.Random(seed)
    return [_task(i, kinds[i % len(kinds)], rng, n_filler) for i in range(n)]


def babi_tasks(paths, n: int, *, seed: int = 0, max_facts: int = 20) -> list[DriftTask]:
    """`n` bAbI questions drawn evenly from the files `paths` (one path or several), reproducible from `seed`.

    Each fact before the question becomes a user turn answered "Got it."; questions with more
    than `max_facts` facts before them are skipped (not truncated), so every setting sees the
    whole story. The candidates are every answer the file's questions have (for qa2/qa3 the six
    locations), so `value_match` fails an answer that names two places. ``kind`` is the file's
    task (``qa2``, ``qa3``...). Fewer than `n` eligible questions in a file is an error.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ACRConfigError(f"n={n!r} must be an int >= 1")
    if isinstance(max_facts, bool) or not isinstance(max_facts, int) or max_facts < 1:
        raise ACRConfigError(f"max_facts={max_facts!r} must be an int >= 1")
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    if not paths:
        raise ACRConfigError("babi_tasks needs at least one bAbI file (e.g. qa2_two-supporting-facts_test.txt)")
    rng = random.Random(seed)
    per_file = [n // len(paths) + (i < n % len(paths)) for i in range(len(paths))]
    tasks: list[DriftTask] = []
    for path, want in zip(paths, per_file):
        kind = path.stem.split("_", 1)[0]
        items = babi_items(path)  # every question, so the candidates cover the whole file
        answers = sorted({item.answer for item in items})
        eligible = [item for item in items if len(item.passages) <= max_facts]
        if len(eligible) < want:
            raise ACRConfigError(f"{path}: only {len(eligible)} questions have <= {max_facts} facts before them, "
                                 f"{want} asked for; raise max_facts or ask for fewer tasks")
        for item in rng.sample(eligible, want):
            _, story, number = item.id.rsplit(":", 2)
            conversation = Conversation([Turn(fact, BABI_REPLY) for fact in item.passages])
            tasks.append(DriftTask(f"{kind}-{story}-{number}", kind, conversation,
                                   f"{item.question} Answer with one word.", item.answer, answers,
                                   BABI_TASK_DESCRIPTION))
    return tasks
