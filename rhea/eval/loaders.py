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
- Chats to pad multi-session histories with (UltraChat ``messages``, ShareGPT ``conversations``):
  `load_filler_chats`.

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


class BenchmarkFileError(RheaError, FileNotFoundError):
    """A benchmark file path that names no file: nothing there, or a directory."""


def _fail(path: Path, line: int | None, problem: str, expected: str) -> DataFormatError:
    where = f"{path}:{line}" if line is not None else str(path)
    return DataFormatError(f"{where}: {problem}; expected {expected}")


def _loads(text: str):
    """`json.loads`, with the inputs it cannot read (nesting too deep for the parser, an integer of more digits
    than Python converts) raised as the `json.JSONDecodeError` every reader here turns into a named error."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text[:1], 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError as e:
        raise json.JSONDecodeError(f"a value that cannot be read: {e}", text[:1], 0) from None


def _open_text(path: str | Path) -> tuple[Path, str]:
    path = Path(path)
    if path.is_dir():
        raise BenchmarkFileError(f"benchmark file {str(path)!r} is a directory; pass the path of the benchmark's "
                                 "data file inside it (a .json or .jsonl file)")
    if not path.is_file():
        raise BenchmarkFileError(f"benchmark file {str(path)!r} does not exist; pass the path "
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
            record = _loads(line)
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
        data = _loads(text)
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
        data = _loads(text)
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


# ------------------------------------------------------------------------- multi-session QA

@dataclass(frozen=True)
class SessionTurn:
    """One exchange of a multi-session history: the user's message and the reply given then."""

    id: str
    user: str
    assistant: str


@dataclass(frozen=True)
class Session:
    """A session of a multi-session conversation; `date` as the source writes it ("" when it has none)."""

    turns: tuple[SessionTurn, ...]
    date: str = ""


@dataclass(frozen=True)
class SessionQuestion:
    """A question about a multi-session conversation, its gold answer and the ids of the turns that hold it.

    `question` may hold ``{session}``: the number the evidence turn's session has in the history it is asked
    about (sessions are numbered from 1 in the order they are fed)."""

    question: str
    answer: str
    evidence: tuple[str, ...]
    category: str = ""


@dataclass(frozen=True)
class MultiSessionConversation:
    """Sessions of turns and questions about them (`load_multi_session`)."""

    id: str
    sessions: tuple[Session, ...]
    questions: tuple[SessionQuestion, ...]
    source: str = "multi-session"

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


MULTI_SESSION_FORMAT = ('{"id": str, "sessions": [{"date": str?, "turns": [{"id": str, "user": str, "assistant": str}]}], '
                        '"questions": [{"question": str, "answer": str, "evidence": [turn id, ...], "category": str?}]}')


def load_multi_session(path: str | Path) -> list[MultiSessionConversation]:
    """Read multi-session conversations with questions, in any of the formats it knows:

    - the project's own format (a JSON list, or JSON lines, of `MULTI_SESSION_FORMAT` records): sessions
      of turns (optional session date), questions with gold answers and evidence turn ids;
    - MemoChat's TopiOCQA file (``topiocqa_test_question.jsonl``): `load_memochat_topiocqa`;
    - ConvLab-3's unified dialogue format (MultiWOZ 2.1, SGD ``data.json`` / ``dummy_data.json``):
      `load_convlab_unified`.
    """
    path, text = _open_text(path)
    first = _first_record(path, text)
    if str(first.get("type", "")).endswith("_topiocqa"):
        return load_memochat_topiocqa(path)
    if "dialogue_id" in first and "turns" in first:
        return load_convlab_unified(path)
    records = _records(path, text)
    out = []
    for line, record in records:
        _require(path, line, record, {"id": (str, int), "sessions": list, "questions": list}, MULTI_SESSION_FORMAT)
        sessions, ids = [], set()
        for s in record["sessions"]:
            if not isinstance(s, dict) or not isinstance(s.get("turns"), list) or not s["turns"]:
                raise _fail(path, line, "a session without a non-empty 'turns' list", MULTI_SESSION_FORMAT)
            turns = []
            for t in s["turns"]:
                _require(path, line, t, {"id": (str, int), "user": str, "assistant": str}, MULTI_SESSION_FORMAT)
                if str(t["id"]) in ids:
                    raise _fail(path, line, f"turn id {t['id']!r} appears twice", MULTI_SESSION_FORMAT)
                if not t["user"].strip():
                    raise _fail(path, line, f"turn {t['id']!r} has an empty user message", MULTI_SESSION_FORMAT)
                ids.add(str(t["id"]))
                turns.append(SessionTurn(str(t["id"]), t["user"], t["assistant"]))
            sessions.append(Session(tuple(turns), str(s.get("date") or "")))
        questions = []
        for q in record["questions"]:
            _require(path, line, q, {"question": str, "answer": str, "evidence": list}, MULTI_SESSION_FORMAT)
            missing = [e for e in q["evidence"] if str(e) not in ids]
            if not q["evidence"] or missing:
                raise _fail(path, line, f"question {q['question'][:40]!r} names evidence {missing or '[]'} that is "
                            "not a turn id of its conversation", MULTI_SESSION_FORMAT)
            questions.append(SessionQuestion(q["question"], q["answer"], tuple(str(e) for e in q["evidence"]),
                                             str(q.get("category") or "")))
        out.append(MultiSessionConversation(str(record["id"]), tuple(sessions), tuple(questions)))
    if not out:
        raise _fail(path, None, "no conversations", MULTI_SESSION_FORMAT)
    return out


def _first_record(path: Path, text: str) -> dict:
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = _loads(text)
        except json.JSONDecodeError as err:
            raise _fail(path, None, f"invalid JSON ({err.msg})", "a JSON list or JSON lines") from None
        return data[0] if data and isinstance(data[0], dict) else {}
    for _, record in read_jsonl(path):
        return record
    return {}


def _records(path: Path, text: str) -> list[tuple[int | None, dict]]:
    if text.lstrip().startswith("["):
        data = _loads(text)
        if not all(isinstance(r, dict) for r in data):
            raise _fail(path, None, "a list item is not an object", "a JSON list of objects")
        return [(None, r) for r in data]
    return list(read_jsonl(path))


_TOPIOCQA_LINE = __import__("re").compile(r"^\(line (\d+)\) (user|bot): (.*)$")
_TOPIOCQA_QUESTION = 'In session {session} we talked about {topic}. When I asked "{user}", what did you answer?'
#: Answers a question about an earlier turn cannot be told apart by (any turn could have said them).
UNINFORMATIVE_ANSWERS = frozenset({"yes", "no", "yes.", "no.", "i don't know.", "unknown", ""})


def load_memochat_topiocqa(path: str | Path) -> list[MultiSessionConversation]:
    """MemoChat's TopiOCQA items of type ``writing_topiocqa`` as one-session conversations.

    Each item holds a TopiOCQA conversation (``(line n) user: ...`` / ``(line n) bot: ...``) and its gold topic
    segmentation (``[{"topic", "start", "end"}]`` over the lines); a user line and the bot line after it make
    a turn. The questions are built from the data, one per turn whose answer says something (not yes / no):
    ``In session {session} we talked about <gold topic>. When I asked "<the user's words>", what did you
    answer?``, gold = the bot's answer, evidence = that turn. The question quotes the turn's user words, so
    lexical retrieval finds it easily; the answer must come from the history. The ``retrieval_topiocqa``
    items (a query sentence and topic options, no conversation) are skipped.
    """
    path = Path(path)
    expected = '{"question_id", "text": "... (line n) user|bot: ...", "answer": "[{topic, start, end}]", "type"}'
    out = []
    for line, record in read_jsonl(path):
        _require(path, line, record, {"text": str, "answer": str, "type": str}, expected)
        if record["type"] != "writing_topiocqa":
            continue
        lines = {}
        for raw in record["text"].splitlines():
            match = _TOPIOCQA_LINE.match(raw.strip())
            if match:
                lines[int(match.group(1))] = (match.group(2), match.group(3).strip())
        try:
            topics = json.loads(record["answer"])
        except json.JSONDecodeError:
            raise _fail(path, line, "'answer' is not JSON", expected) from None
        if not lines or not isinstance(topics, list):
            raise _fail(path, line, "no '(line n) user: ...' lines or no topic list", expected)
        conv_id = f"topiocqa-{record.get('question_id', line)}"
        turns, questions = [], []
        for number in sorted(lines):
            role, text = lines[number]
            if role != "user" or not text:
                continue
            reply_role, reply = lines.get(number + 1, ("bot", ""))
            turn_id = f"{conv_id}:{number}"
            turns.append(SessionTurn(turn_id, text, reply if reply_role == "bot" else ""))
            topic = next((t.get("topic") for t in topics if isinstance(t, dict)
                          and int(t.get("start", 0)) <= number <= int(t.get("end", -1))), None)
            if topic and reply_role == "bot" and reply.strip().lower() not in UNINFORMATIVE_ANSWERS:
                questions.append(SessionQuestion(
                    _TOPIOCQA_QUESTION.format(session="{session}", topic=topic, user=text.rstrip()),
                    reply, (turn_id,), "turn-recall"))
        if turns:
            out.append(MultiSessionConversation(conv_id, (Session(tuple(turns)),), tuple(questions), "topiocqa"))
    if not out:
        raise _fail(path, None, "no writing_topiocqa items", expected)
    return out


#: How ConvLab slot names read in a question (others: underscores become spaces).
_SLOT_WORDS = {"book people": "number of people", "book stay": "number of nights", "book day": "day of the booking",
               "book time": "time of the booking", "leave at": "departure time", "arrive by": "arrival time"}
_STATE_QUESTION = "In session {session}, what {slot} did I settle on for the {domain}?"


def load_convlab_unified(path: str | Path) -> list[MultiSessionConversation]:
    """ConvLab-3 unified-format dialogues (MultiWOZ 2.1, SGD) as one-session conversations with state questions.

    A user utterance and the system's next one make a turn. The questions come from the dialogue state of the
    last user turn: for each slot with a value that names something (not yes / no / dontcare, not an
    alternative list ``3|2``), ``In session {session}, what <slot> did I settle on for the <domain>?``, gold =
    the value, evidence = the user turn from which the slot held that value.
    """
    path, text = _open_text(path)
    expected = 'a JSON list of {"dialogue_id", "turns": [{"speaker": "user"|"system", "utterance", "state"?}]}'
    try:
        data = _loads(text)
    except json.JSONDecodeError as err:
        raise _fail(path, None, f"invalid JSON ({err.msg})", expected) from None
    if not isinstance(data, list) or not data:
        raise _fail(path, None, "not a non-empty JSON list", expected)
    out = []
    for dialogue in data:
        _require(path, None, dialogue, {"dialogue_id": str, "turns": list}, expected)
        conv_id = dialogue["dialogue_id"]
        turns, states = [], []
        utterances = dialogue["turns"]
        for i, u in enumerate(utterances):
            if not isinstance(u, dict) or "speaker" not in u or "utterance" not in u:
                raise _fail(path, None, f"{conv_id}: utterance {i} lacks 'speaker' / 'utterance'", expected)
            if u["speaker"] != "user" or not str(u["utterance"]).strip():
                continue
            nxt = utterances[i + 1] if i + 1 < len(utterances) else None
            reply = nxt["utterance"] if isinstance(nxt, dict) and nxt.get("speaker") == "system" else ""
            turns.append(SessionTurn(f"{conv_id}:{len(turns)}", u["utterance"], reply))
            states.append(u.get("state") or {})
        questions = []
        final = states[-1] if states else {}
        for domain, slots in sorted(final.items()):
            for slot, value in sorted((slots or {}).items()):
                value = str(value).strip()
                if not value or "|" in value or value.lower() in ("yes", "no", "dontcare", "none", "?", "free"):
                    continue
                since = len(states) - 1
                while since > 0 and str((states[since - 1].get(domain) or {}).get(slot, "")).strip() == value:
                    since -= 1
                domain_words = domain.split("_")[0].lower()
                slot_words = _SLOT_WORDS.get(slot, slot.replace("_", " "))
                questions.append(SessionQuestion(_STATE_QUESTION.format(session="{session}", slot=slot_words,
                                                                        domain=domain_words),
                                                 value, (turns[since].id,), "state"))
        if turns:
            out.append(MultiSessionConversation(conv_id, (Session(tuple(turns)),), tuple(questions),
                                                str(dialogue.get("dataset") or "convlab")))
    return out


FILLER_FORMATS = ('a JSON list, or JSON lines, of chats: UltraChat {"messages": [{"role": "user"|"assistant"|"system", '
                  '"content": str}], "prompt_id"?}, ShareGPT {"conversations": [{"from": "human"|"gpt"|"system", '
                  '"value": str}], "id"?}, or UltraChat\'s first release {"id", "data": [user, assistant, ...]}')
_USER_ROLES, _REPLY_ROLES = {"user", "human"}, {"assistant", "gpt", "bot", "chatgpt", "model"}


def load_filler_chats(path: str | Path) -> list[MultiSessionConversation]:
    """Chats to pad multi-session histories with ("haystack" sessions, as LongMemEval builds its histories):
    each chat of `FILLER_FORMATS` becomes a one-session conversation with no questions, a user message and
    the reply after it making a turn (system messages are left out; a user message with no reply after it
    gets an empty one; turns whose user text is blank are left out, and so are chats with no turn left).

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "chats.json")
    >>> _ = open(path, "w").write('[{"prompt_id": "p1", "messages": [{"role": "user", "content": "Hi"}, '
    ...                           '{"role": "assistant", "content": "Hello!"}]}]')
    >>> [(t.user, t.assistant) for t in load_filler_chats(path)[0].sessions[0].turns]
    [('Hi', 'Hello!')]
    """
    path, text = _open_text(path)
    if not text.strip():
        raise _fail(path, None, "the file is empty", FILLER_FORMATS)
    if text.lstrip().startswith("["):
        try:
            data = _loads(text)
        except json.JSONDecodeError as err:
            raise _fail(path, None, f"invalid JSON ({err.msg})", FILLER_FORMATS) from None
        records = [(None, r) for r in data]
    else:
        records = list(read_jsonl(path))
    out, seen = [], set()
    for number, (line, record) in enumerate(records):
        if not isinstance(record, dict):
            raise _fail(path, line, f"chat {number} is a {type(record).__name__}", FILLER_FORMATS)
        messages = _chat_messages(path, line, number, record)
        turns: list[list[str]] = []
        for role, content in messages:
            if role in _USER_ROLES:
                turns.append([content, ""])
            elif role in _REPLY_ROLES and turns and not turns[-1][1]:
                turns[-1][1] = content
        kept = [(u, a) for u, a in turns if u.strip()]
        if not kept:
            continue
        chat_id = str(record.get("prompt_id") or record.get("id") or f"chat-{number}")
        if chat_id in seen:
            chat_id = f"{chat_id}#{number}"
        seen.add(chat_id)
        out.append(MultiSessionConversation(
            chat_id, (Session(tuple(SessionTurn(f"{chat_id}:{i}", u, a) for i, (u, a) in enumerate(kept))),), (),
            "sharegpt" if "conversations" in record else "ultrachat"))
    if not out:
        raise _fail(path, None, "no chat with a user message", FILLER_FORMATS)
    return out


def _chat_messages(path: Path, line: int | None, number: int, record: dict) -> list[tuple[str, str]]:
    """``(role, text)`` of each message of one chat record in any of `FILLER_FORMATS`."""
    if isinstance(record.get("messages"), list):
        key, role_key, text_key = "messages", "role", "content"
    elif isinstance(record.get("conversations"), list):
        key, role_key, text_key = "conversations", "from", "value"
    elif isinstance(record.get("data"), list):
        if not all(isinstance(m, str) for m in record["data"]):
            raise _fail(path, line, f"chat {number}: 'data' holds a non-string", FILLER_FORMATS)
        return [("user" if i % 2 == 0 else "assistant", m) for i, m in enumerate(record["data"])]
    else:
        raise _fail(path, line, f"chat {number} has no 'messages', 'conversations' or 'data' list (keys: "
                    f"{sorted(record)[:6]})", FILLER_FORMATS)
    out = []
    for m in record[key]:
        if not isinstance(m, dict) or not isinstance(m.get(role_key), str) or not isinstance(m.get(text_key), str):
            raise _fail(path, line, f"chat {number}: a {key!r} item without string {role_key!r} and {text_key!r}",
                        FILLER_FORMATS)
        out.append((m[role_key].strip().lower(), m[text_key]))
    return out


# --------------------------------------------------------------------------------- MT-Bench+

@dataclass(frozen=True)
class MTBenchPlusConversation:
    """One MT-Bench+ conversation (MemoChat): user turns as ``(text, turn_info)`` pairs, where ``turn_info``
    names the MT-Bench question and turn (``"stem-143-1"``), and its retrospective question (``"...-Q"``,
    about an earlier question of the conversation) apart from them."""

    id: str
    type: str
    turns: tuple[tuple[str, str], ...]
    question: tuple[str, str] | None


def load_mt_bench_plus(path: str | Path) -> list[MTBenchPlusConversation]:
    """Read MemoChat's ``mtbenchplus.json`` (a JSON list of ``{id, type, conversations: [{from, value,
    turn-info}]}``; the chatbot values are empty: the model under test writes them)."""
    path, text = _open_text(path)
    expected = 'a JSON list of {"id", "type", "conversations": [{"from": "human"|"chatbot", "value", "turn-info"}]}'
    try:
        data = _loads(text)
    except json.JSONDecodeError as err:
        raise _fail(path, None, f"invalid JSON ({err.msg})", expected) from None
    if not isinstance(data, list) or not data:
        raise _fail(path, None, "not a non-empty JSON list", expected)
    out = []
    for item in data:
        _require(path, None, item, {"id": (str, int), "conversations": list}, expected)
        turns, question = [], None
        for message in item["conversations"]:
            if not isinstance(message, dict) or message.get("from") not in ("human", "chatbot"):
                raise _fail(path, None, f"{item['id']}: a message without 'from' human|chatbot", expected)
            if message["from"] != "human":
                continue
            info = str(message.get("turn-info") or "")
            if not info or not str(message.get("value") or "").strip():
                raise _fail(path, None, f"{item['id']}: a human message without text or 'turn-info'", expected)
            if info.endswith("-Q"):
                question = (message["value"], info)
            else:
                turns.append((message["value"], info))
        if not turns:
            raise _fail(path, None, f"{item['id']}: no human turns", expected)
        out.append(MTBenchPlusConversation(str(item["id"]), str(item.get("type") or ""), tuple(turns), question))
    return out
