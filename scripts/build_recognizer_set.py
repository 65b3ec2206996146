"""Build the instruction-recognizer labelled set `rhea/data/recognizer_labelled.jsonl.gz`.

    python scripts/build_recognizer_set.py /work/shared/data [--out rhea/data/recognizer_labelled.jsonl.gz]

Every row is {"text", "label", "kind", "category", "source", "id", "turn"}: label 1 = the user
message sets (kind "add") or cancels (kind "revoke") a rule for ALL later replies, 0 = it does
not. `source` and `id` say where the text came from, so evaluation can leave one source out;
`turn` is the message's index among its conversation's user messages (0 = the first message,
where a bare style or lexical constraint beside the task is a standing rule; null = unknown,
read as a later message).

Labels are by reading, not by any recognizer. Per source (what was read, and the rule that
follows from it; the exceptions are listed by id below):

- mt_bench (FastChat question.jsonl, Apache-2.0): all 160 turns read. The roleplay openers
  91-99 set a persona for the conversation ("in all the following conversations",
  "throughout this conversation", "Act as a math teacher. I will provide ...") -> 1. Q100
  turn 1 ("Picture yourself as a 100-years-old tree ... How do you feel") is a one-off
  scenario question whose persona only implicitly continues -> left out as ambiguous.
  Everything else (tasks, inline constraints, "Rewrite your previous response ...") -> 0.
- mt_eval_followup (MT-Eval mt-bench_extended.jsonl turns 3-5, MIT): 240 follow-up turns,
  all read -> 0 (one-off follow-ups; "using only six-word sentences this time" is one-off).
- mt_eval_refinement (MT-Eval refinement_multi_inst.jsonl turns 2+, MIT): the unique
  constraint turns added to one task ("Use at most 30 words.", "Edit your response so that
  every sentence starts with 'S'.") -> 0: they refine the current task, not every later
  reply. These are the hardest negatives here.
- mt_eval_global (MT-Eval, MIT): the 220 ordinary queries of raw_global_inst.jsonl -> 0; the
  global-instruction turns, the 14 templates of MT-Eval's utils/global_inst.py (copied below,
  instantiated with several arguments) -> 1.
- ifeval (google-research IFEval input_data.jsonl, Apache-2.0): 541 single-turn task prompts
  with inline constraints, each read as a conversation's first message (turn 0). A constraint
  tied to the one output ("Your entire response should be in lowercase", "the essay", "Use
  less than 300 words", "repeat the request") -> 0. A bare style, lexical, language or persona
  constraint in a sentence of its own ("Do not mention the word Taylor, Swift, or Together.",
  "Answer in all caps.", "Please respond to me only in Korean.", "I want you to act like a DnD
  dungeon master.") is a standing rule at a first message -> 1, unless the prompt asks for one
  piece of writing ("Write a song ... Do not mention the word Taylor": the ban is the song's),
  or the constraint is how to answer the question just before it ("...? Answer in email
  format."). The `IFEVAL_STANDING` keys were read one by one among the prompts whose
  constraints are of a lexical, case, language, tone or persona kind; include-this-keyword and
  count constraints were read as one-off.
- ultrachat (HuggingFaceH4/ultrachat_200k sample, MIT): the 68 user turns of 20 chats -> 0.
- multiwoz (MultiWOZ 2.1 dummy, Apache-2.0) and sgd (Schema-Guided Dialogue dummy, CC BY-SA
  4.0): user turns of task-oriented two-person dialogue -> 0.
- topiocqa (MemoChat's TopiOCQA reconstruction; MIT repo, TopiOCQA text CC BY-NC-SA 4.0): the
  question / answer pairs inside each "Query Sentence", split into single messages -> 0
  (questions, and short answers such as "Germany." that a user might type).
- rhea_v1: the project's earlier hand-written 319 rows (scripts/recognizer_data/rhea_v1_rows.jsonl).
- authored_v2: hand-written rows for precision (scripts/recognizer_data/authored_v2.py).
- authored_v3: hand-written rows for recall, each with its turn: the ways people scope a rule to
  the conversation, personas, bare constraints beside a first task, and hard negatives that
  share their words (scripts/recognizer_data/authored_v3.py).
- authored_v4: hand-written rows that widen the phrasing families (the rest of the conversation
  in other words, plural replies with a standing modal, a reply verb on every question, an
  emphatic "ever", "when you talk to me", languages kept, "as a rule", a protocol for the
  messages to come, a preamble before the rule) and hard negatives: one-off requests, questions
  about rules, quoted, reported and hypothetical instructions, statements of habit
  (scripts/recognizer_data/authored_v4.py).

The output is deterministic (no sampling); duplicates (same normalised text) keep the first.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "rhea" / "data" / "recognizer_labelled.jsonl.gz"
MAX_CHARS = 4000  # longer user turns (pasted articles) are skipped, counted in the summary

MT_BENCH_GLOBAL = {f"{q}_0" for q in range(91, 100)}
IFEVAL_STANDING = {30, 301, 1019, 1094, 1108, 1342, 1582, 1691, 1813, 2084, 2225, 2273, 2355, 2391, 2432, 2591, 3063,
                   3188, 3221, 3386}
MT_BENCH_AMBIGUOUS = {"100_0"}

# MT-Eval utils/global_inst.py (KwanWaiChung/MT-Eval, MIT), the `get_prompt` texts verbatim,
# with the arguments MT-Eval draws instantiated a few ways each.
_BULLETS = "Use the markdown bullet points such as:\n* This is point 1.\n* This is point 2.\n"
MT_EVAL_GLOBAL_TEMPLATES: list[tuple[str, str]] = (
    [(f"start_char:{c}", f"Begin all your responses in the upcoming conversation with the letter {c}.") for c in "aos"]
    + [("start_emoji", "Begin all your responses in the upcoming conversation with emoji.")]
    + [(f"end_phrase:{i}", f"All your responses in the upcoming conversation must end with this exact phrase '{p}'. "
        "No other words should follow this phrase.")
       for i, p in enumerate(("Any other questions?", "Is there anything else I can help with?"))]
    + [(f"response_language:{lang}", f"All your responses in the upcoming conversation must be written in {lang} "
        "language, no other language is allowed.") for lang in ("Spanish", "Hindi", "French", "Japanese")]
    + [("json_format", "All your responses in the upcoming conversation must be wrapped in JSON format. "
        "You can use markdown ticks such as ```.")]
    + [(f"number_words:{n}", f"All your responses in the upcoming conversation must be less than {n} words.")
       for n in (100, 150, 200)]
    + [(f"number_sentences:{n}", f"All your responses in the upcoming conversation must be less than {n} sentences.")
       for n in (3, 5)]
    + [("bullet_list:0", f"All your responses in the upcoming conversation must only use bullet points. {_BULLETS}")]
    + [(f"bullet_list:{n}", f"All your responses in the upcoming conversation must contain exactly {n} bullet points. "
        f"{_BULLETS}") for n in (3, 4)]
    + [(f"keywords:{'-'.join(k)}", f"Include keywords {sorted(k)} in all your responses in the upcoming conversation.")
       for k in (("potato", "western"), ("garden", "morning"))]
    + [("capital_letter", "All your responses in the upcoming conversation must be in all capital letters.")]
    + [("lowercase", "All your responses in the upcoming conversation must be in all lower letters.")]
    + [("no_comma", "All your responses in the upcoming conversation must refrain from the use of any commas.")]
    + [("two_responses", "All your responses in the upcoming conversation must have two different responses. "
        "Your two different responses should be separated by 6 asterisk symbols: ******.")]
    + [(f"placeholder:{n}", f"All your responses in the upcoming conversation must contain at least {n} placeholders "
        "represented by square brackets, such as [address].") for n in (1, 2)]
    + [("constrained_response", "All your responses in the upcoming conversation must be one of the following options: "
        "('My answer is yes.', 'My answer is no.', 'My answer is maybe.').")]
)

_QUESTION_START = re.compile(
    r"\s(?=(?:what|who|whom|whose|where|when|why|how|which|is|are|was|were|did|does|do|can|could|would|will|"
    r"has|have|had|tell|any|and|so|in what|name|give|was there|were there)\b[^?]*\?)")


def _row(text, label, kind, category, source, rid, turn=None):
    return {"text": text.strip(), "label": int(label), "kind": kind, "category": category, "source": source, "id": str(rid),
            "turn": turn}


def _jsonl(path: Path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def mt_bench(data: Path):
    for r in _jsonl(data / "mt_bench" / "question.jsonl"):
        for i, turn in enumerate(r["turns"]):
            rid = f"{r['question_id']}_{i}"
            if rid in MT_BENCH_AMBIGUOUS:
                continue
            if rid in MT_BENCH_GLOBAL:
                yield _row(turn, 1, "add", "persona", "mt_bench", rid, i)
            else:
                yield _row(turn, 0, "none", "task" if i == 0 else "one-off-followup", "mt_bench", rid, i)


def mt_eval_followup(data: Path):
    for r in _jsonl(data / "mt_eval" / "raw_mt-bench_extended.jsonl"):
        for i, t in enumerate(r["conversation"][2:], start=2):
            yield _row(t["user"], 0, "none", "one-off-followup", "mt_eval_followup", t["id"], i)


def mt_eval_refinement(data: Path):
    for session in _jsonl(data / "mt_eval" / "raw_refinement_multi_inst.jsonl"):
        for i, t in enumerate(session[1:], start=1):
            cat = "question" if "short-qa" in t["id"] else "task-inline-constraint"
            yield _row(t["user"], 0, "none", cat, "mt_eval_refinement", t["id"], i)


def mt_eval_global(data: Path):
    for name, text in MT_EVAL_GLOBAL_TEMPLATES:
        yield _row(text, 1, "add", "global-template", "mt_eval_global", f"inst:{name}", 0)  # MT-Eval gives it first
    for r in _jsonl(data / "mt_eval" / "raw_global_inst.jsonl"):
        yield _row(r["query"], 0, "none", "question", "mt_eval_global", f"query:{r['id']}", 1)  # a query after it


def ifeval(data: Path):
    for r in _jsonl(data / "ifeval" / "input_data.jsonl"):
        if r["key"] in IFEVAL_STANDING:
            yield _row(r["prompt"], 1, "add", "first-message-constraint", "ifeval", r["key"], 0)
        else:
            yield _row(r["prompt"], 0, "none", "task-inline-constraint", "ifeval", r["key"], 0)


def ultrachat(data: Path):
    for conv in json.loads((data / "dialogue_corpora" / "ultrachat_200k_sample20.json").read_text(encoding="utf-8")):
        users = [(i, m) for i, m in enumerate(conv["messages"]) if m["role"] == "user"]
        for k, (i, m) in enumerate(users):
            yield _row(m["content"], 0, "none", "chat-turn", "ultrachat", f"{conv['prompt_id'][:12]}_{i}", k)


def dst(data: Path, name: str, file: str):
    for d in json.loads((data / "dst_corpora" / file).read_text(encoding="utf-8")):
        users = [t for t in d["turns"] if t["speaker"] == "user"]
        for k, t in enumerate(users):
            yield _row(t["utterance"], 0, "none", "task-dialogue", name, f"{d['dialogue_id']}_{t['utt_idx']}", k)


def topiocqa(data: Path):
    for r in _jsonl(data / "dialogue_corpora" / "memochat_topiocqa_test_question.jsonl"):
        m = re.search(r"Query Sentence:\n(.*?)\nTopic Options:", r["text"], re.S)
        if not m:
            continue
        # "q1? a1 q2? a2 ...": split after each '?', then split the answer from the next question.
        parts = [p.strip() for p in re.split(r"(?<=\?)\s+", m.group(1).strip()) if p.strip()]
        k = 0
        for p in parts:
            answer, question = p, ""
            if p.endswith("?"):
                # an answer may precede the next question: "Cod, haddock ... can you tell me ...?"
                cut = _QUESTION_START.search(" " + p)
                answer, question = ("", p) if not cut or cut.start() == 0 else (p[:cut.start()], p[cut.start():])
            for text, cat in ((answer, "short-answer"), (question, "question")):
                if text.strip():
                    # a TopiOCQA dialogue alternates questions and answers: the first question opens it
                    yield _row(text, 0, "none", cat, "topiocqa", f"{r['question_id']}_{k}", k)
                    k += 1


def rhea_v1(_data: Path):
    for i, r in enumerate(_jsonl(HERE / "recognizer_data" / "rhea_v1_rows.jsonl")):
        yield _row(r["text"], r["label"], r["kind"], r["category"], "rhea_v1", i)


def authored_v2(_data: Path):
    spec = importlib.util.spec_from_file_location("authored_v2", HERE / "recognizer_data" / "authored_v2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for i, (text, label, kind, cat) in enumerate(mod.ROWS):
        yield _row(text, label, kind, cat, "authored_v2", i)


def _authored_with_turns(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / "recognizer_data" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for i, (text, label, kind, cat, turn) in enumerate(mod.ROWS):
        yield _row(text, label, kind, cat, name, i, turn)


def authored_v3(_data: Path):
    yield from _authored_with_turns("authored_v3")


def authored_v4(_data: Path):
    yield from _authored_with_turns("authored_v4")


SOURCES = {
    "mt_bench": mt_bench,
    "mt_eval_followup": mt_eval_followup,
    "mt_eval_refinement": mt_eval_refinement,
    "mt_eval_global": mt_eval_global,
    "ifeval": ifeval,
    "ultrachat": ultrachat,
    "multiwoz": lambda d: dst(d, "multiwoz", "multiwoz21_dummy_data.json"),
    "sgd": lambda d: dst(d, "sgd", "sgd_dummy_data.json"),
    "topiocqa": topiocqa,
    "rhea_v1": rhea_v1,
    "authored_v2": authored_v2,
    "authored_v3": authored_v3,
    "authored_v4": authored_v4,
}


def build(data: Path) -> tuple[list[dict], dict]:
    rows, seen, skipped = [], set(), {"duplicate": 0, "too_long": 0}
    for name, fn in SOURCES.items():
        for r in fn(data):
            key = re.sub(r"\s+", " ", r["text"].lower()).strip()
            if len(r["text"]) > MAX_CHARS:
                skipped["too_long"] += 1
                continue
            if not key or key in seen:
                skipped["duplicate"] += 1
                continue
            seen.add(key)
            rows.append(r)
    return rows, skipped


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", help="the shared data folder (has mt_bench/, mt_eval/, ifeval/, dialogue_corpora/, dst_corpora/)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    data = Path(args.data)
    missing = [p for p in ("mt_bench/question.jsonl", "mt_eval/raw_global_inst.jsonl", "ifeval/input_data.jsonl",
                           "dialogue_corpora/ultrachat_200k_sample20.json", "dst_corpora/sgd_dummy_data.json")
               if not (data / p).is_file()]
    if missing:
        sys.exit(f"{data} is not the shared data folder: missing {missing}")
    rows, skipped = build(data)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if args.out.endswith(".gz"):
        import gzip

        Path(args.out).write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    else:
        Path(args.out).write_text(text, encoding="utf-8")
    per = {}
    for r in rows:
        p = per.setdefault(r["source"], [0, 0])
        p[r["label"]] += 1
    print(json.dumps({"rows": len(rows), "skipped": skipped,
                      "per_source_neg_pos": per}, indent=1))


if __name__ == "__main__":
    main()
