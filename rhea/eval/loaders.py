"""Readers for the public benchmark files the suites can draw on.

Each reader takes a path in the benchmark's own published format and returns plain
records; a malformed file raises `DataFormatError` naming the file, the line and what was
expected. Nothing here downloads anything.

Formats:
- MT-Bench ``question.jsonl`` (FastChat): ``{"question_id", "category", "turns": [..],
  "reference": [..]?}``; also the Hugging Face H4 copy (a JSON list of ``{"prompt_id",
  "category", "prompt": [..], "reference": [..]}``) and FastChat reference answers
  (``{"question_id", "choices": [{"turns": [..]}]}``).
- MT-Eval ``global_inst.jsonl``: ``{"id", "query", "instructions": [ids]}``.
- IFEval ``input_data.jsonl``: ``{"key", "prompt", "instruction_id_list", "kwargs"}``.
- PI-LLM vocabulary JSON: ``{category: [values]}``.
- bAbI task files: ``"<n> <sentence>"`` lines, questions as
  ``"<n> <question>\\t<answer>\\t<supporting ids>"``; ``n`` restarts at 1 per story.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "q.jsonl")
>>> _ = open(path, "w").write('{"question_id": 81, "category": "writing", "turns": ["Hi?", "More?"]}\\n')
>>> load_mt_bench_questions(path)[0].turns
('Hi?', 'More?')
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from rhea.errors import RheaError


class DataFormatError(RheaError, ValueError):
    """A benchmark file that does not match the format its loader reads."""


def _fail(path: Path, line: int | None, problem: str, expected: str) -> DataFormatError:
    where = f"{path}:{line}" if line is not None else str(path)
    return DataFormatError(f"{where}: {problem}; expected {expected}")


def _open_text(path: str | Path) -> tuple[Path, str]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"benchmark file {str(path)!r} does not exist; pass the path "
                                "to a downloaded copy of the benchmark")
    try:
        return path, path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        from rhea.storage import not_utf8

        raise DataFormatError(not_utf8(path, e)) from None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSON-lines file."""
    path, text = _open_text(path)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise _fail(path, number, f"invalid JSON ({err.msg})", "one JSON object per line") from None
        if not isinstance(record, dict):
            raise _fail(path, number, f"got a {type(record).__name__}", "a JSON object")
        yield number, record


def _require(path: Path, line: int | None, record: Mapping, fields: Mapping[str, type],
             expected: str) -> None:
    for name, kind in fields.items():
        if name not in record:
            raise _fail(path, line, f"missing field {name!r}", expected)
        if not isinstance(record[name], kind):
            raise _fail(path, line, f"field {name!r} is {type(record[name]).__name__}", expected)


# ------------------------------------------------------------------------------- MT-Bench

@dataclass(frozen=True)
class MTBenchQuestion:
    """One multi-turn MT-Bench question; `reference` is () when it has none."""

    question_id: int | str
    category: str
    turns: tuple[str, ...]
    reference: tuple[str, ...] = ()


_MT_BENCH = '{"question_id", "category", "turns": [str, ...], "reference": [str, ...]?}'


def load_mt_bench_questions(path: str | Path, reference_path: str | Path | None = None
                            ) -> list[MTBenchQuestion]:
    """Read MT-Bench questions (FastChat ``question.jsonl`` or the H4 JSON list).

    `reference_path` (FastChat ``reference_answer/gpt-4.jsonl``) fills `reference` for the
    questions that have no inline one.
    """
    path = Path(path)
    if path.suffix == ".json":
        records = _h4_records(path)
    else:
        records = [(n, r) for n, r in read_jsonl(path)]
    references = load_mt_bench_references(reference_path) if reference_path else {}
    questions = []
    for line, record in records:
        _require(path, line, record, {"question_id": (int, str), "category": str,
                                      "turns": list}, _MT_BENCH)
        turns = record["turns"]
        if not turns or not all(isinstance(t, str) for t in turns):
            raise _fail(path, line, "'turns' must be a non-empty list of strings", _MT_BENCH)
        reference = record.get("reference") or references.get(record["question_id"]) or ()
        questions.append(MTBenchQuestion(record["question_id"], record["category"],
                                         tuple(turns), tuple(str(r) for r in reference)))
    return questions


def _h4_records(path: Path) -> list[tuple[None, dict]]:
    _, text = _open_text(path)
    expected = 'a JSON list of {"prompt_id", "category", "prompt": [..], "reference": [..]}'
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(path, None, f"invalid JSON ({err.msg})", expected) from None
    if not isinstance(data, list):
        raise _fail(path, None, f"top level is {type(data).__name__}", expected)
    records = []
    for item in data:
        _require(path, None, item, {"prompt_id": (int, str), "category": str, "prompt": list},
                 expected)
        records.append((None, {"question_id": item["prompt_id"], "category": item["category"],
                               "turns": item["prompt"], "reference": item.get("reference")}))
    return records


def load_mt_bench_references(path: str | Path) -> dict[int | str, tuple[str, ...]]:
    """FastChat reference answers: question_id → the reference turns of the first choice."""
    expected = '{"question_id", "choices": [{"turns": [str, ...]}]}'
    references = {}
    for line, record in read_jsonl(path):
        _require(Path(path), line, record, {"question_id": (int, str), "choices": list}, expected)
        if not record["choices"] or not isinstance(record["choices"][0], dict):
            raise _fail(Path(path), line, "'choices' is empty", expected)
        references[record["question_id"]] = tuple(record["choices"][0].get("turns", ()))
    return references


# -------------------------------------------------------------------------------- MT-Eval

@dataclass(frozen=True)
class GlobalInstQuery:
    """An MT-Eval ordinary query and the global-instruction ids it can be paired with."""

    id: int | str
    query: str
    instructions: tuple[str, ...]


def load_mt_eval_global_inst(path: str | Path) -> list[GlobalInstQuery]:
    """Read MT-Eval's ``raw_data/global_inst.jsonl``."""
    expected = '{"id", "query": str, "instructions": [str, ...]}'
    out = []
    for line, record in read_jsonl(path):
        _require(Path(path), line, record, {"id": (int, str), "query": str,
                                            "instructions": list}, expected)
        out.append(GlobalInstQuery(record["id"], record["query"], tuple(record["instructions"])))
    return out


# --------------------------------------------------------------------------------- IFEval

@dataclass(frozen=True)
class IFEvalRecord:
    """One IFEval prompt with its parallel instruction ids and kwargs."""

    key: int | str
    prompt: str
    instruction_id_list: tuple[str, ...]
    kwargs: tuple[dict, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "prompt": self.prompt,
                "instruction_id_list": list(self.instruction_id_list),
                "kwargs": [dict(k) for k in self.kwargs]}


def load_ifeval(path: str | Path) -> list[IFEvalRecord]:
    """Read IFEval's ``input_data.jsonl``."""
    expected = '{"key", "prompt": str, "instruction_id_list": [str], "kwargs": [dict]}'
    out = []
    for line, record in read_jsonl(path):
        _require(Path(path), line, record, {"key": (int, str), "prompt": str,
                                            "instruction_id_list": list, "kwargs": list},
                 expected)
        if len(record["kwargs"]) != len(record["instruction_id_list"]):
            raise _fail(Path(path), line, "'kwargs' and 'instruction_id_list' differ in length",
                        expected)
        out.append(IFEvalRecord(record["key"], record["prompt"],
                                tuple(record["instruction_id_list"]),
                                tuple(dict(k or {}) for k in record["kwargs"])))
    return out


# --------------------------------------------------------------------------------- PI-LLM

def load_pi_llm_vocabulary(path: str | Path) -> dict[str, list[str]]:
    """Read a PI-LLM vocabulary (``{category: [candidate values]}``), e.g.
    ``dict_category_double-word_46-400_v1-1.json``; duplicate values are dropped."""
    path, text = _open_text(path)
    expected = "a JSON object mapping each category to a list of at least 2 strings"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(path, None, f"invalid JSON ({err.msg})", expected) from None
    if not isinstance(data, dict) or not data:
        raise _fail(path, None, "top level is not a non-empty object", expected)
    vocabulary = {}
    for category, values in data.items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise _fail(path, None, f"category {category!r} is not a list of strings", expected)
        unique = list(dict.fromkeys(v.strip() for v in values if v.strip()))
        if len(unique) < 2:
            raise _fail(path, None, f"category {category!r} has fewer than 2 values", expected)
        vocabulary[category] = unique
    return vocabulary


# ----------------------------------------------------------------------------------- bAbI

@dataclass(frozen=True)
class BabiLine:
    """A story line: a fact (`answer` None) or a question with its answer and support."""

    number: int
    text: str
    answer: str | None = None
    supporting: tuple[int, ...] = ()

    @property
    def is_question(self) -> bool:
        return self.answer is not None


def load_babi(path: str | Path) -> list[list[BabiLine]]:
    """Read a bAbI task file (e.g. ``qa1_single-supporting-fact_test.txt``) into stories."""
    path, text = _open_text(path)
    expected = "'<n> <sentence>' or '<n> <question>\\t<answer>\\t<supporting ids>'"
    stories: list[list[BabiLine]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        head, _, rest = raw.strip().partition(" ")
        if not head.isdigit() or not rest:
            raise _fail(path, number, f"line {raw[:40]!r} has no leading story index", expected)
        index = int(head)
        if index == 1 or not stories:
            stories.append([])
        parts = rest.split("\t")
        if len(parts) == 1:
            stories[-1].append(BabiLine(index, parts[0].strip()))
        elif len(parts) == 3:
            support = tuple(int(s) for s in parts[2].split() if s.isdigit())
            stories[-1].append(BabiLine(index, parts[0].strip(), parts[1].strip(), support))
        else:
            raise _fail(path, number, f"{len(parts)} tab-separated fields", expected)
    if not stories:
        raise _fail(path, None, "no story lines", expected)
    return stories
