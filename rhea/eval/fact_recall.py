"""Held-apart fact recall: can the model answer from a reply it sees only as latents?

The set (`rhea/data/fact_recall.jsonl`, written for the project by hand, sharing no names or
templates with `rhea.training.synthetic`) holds natural, verbose assistant replies that each
state one concrete fact (a number, a person's name, a place, a date or time, a code, a
medicine or product) among other sentences. Each item is a three-turn dialogue:

    user -> reply (states the fact)   |   filler user -> filler reply   |   follow-up question

and the follow-up's answer is stated only in the first reply. The first reply is shown as raw
text, as latents from the model's compress adapter, or dropped; the answer is generated
greedily and scored correct when it contains one of the item's accepted answers (normalised:
case, accents, punctuation and thousands separators ignored; digits and letters must not run on).

The latents pass when accuracy with latents >= 0.6 x raw and >= dropped + 0.25, on point
estimates (`fact_recall_verdict`; the same rule as `rhea.modeling.config.fact_recall_passes`, which
decides whether ``latent_tier="auto"`` turns the latent tier on).

>>> is_correct("It opens with 8316, I think.", ["8316"])
True
>>> is_correct("It was 83160.", ["8316"])
False
>>> is_correct("Your slot is at 6.15pm", ["6:15"])
True
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rhea.errors import RheaError
from rhea.modeling.config import FACT_RECALL_MIN_MARGIN, FACT_RECALL_MIN_RATIO

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "fact_recall.jsonl"
#: "latent_other": the turn's user message kept, with ANOTHER item's reply as latents in place of its own (the
#: control of the reconstruction and fact-QA measures): latent - latent_other is what the latents carry about
#: their own reply, apart from the user message the latent tier keeps and the dropped condition removes
CONDITIONS = ("raw", "latent", "dropped", "latent_fresh", "latent_other")
KINDS = ("number", "name", "place", "date", "code", "product")
#: the fact-recall rule: latent >= RATIO x raw and latent >= dropped + MARGIN (`fact_recall_verdict`)
RATIO, MARGIN = FACT_RECALL_MIN_RATIO, FACT_RECALL_MIN_MARGIN
_FIELDS = ("id", "kind", "user", "reply", "filler_user", "filler_reply", "question", "answers")


class FactRecallDataError(RheaError, ValueError):
    """A fact-recall file or item is malformed (missing field, unknown kind, answer not stated)."""


@dataclass(frozen=True)
class FactItem:
    """One held-apart dialogue: the reply states the fact, the question asks for it."""

    id: str
    kind: str
    user: str
    reply: str
    filler_user: str
    filler_reply: str
    question: str
    answers: tuple[str, ...]

    def turns(self) -> list[tuple[str, str]]:
        """The two history turns ``[(user, reply), (filler_user, filler_reply)]``."""
        return [(self.user, self.reply), (self.filler_user, self.filler_reply)]


def normalise(text: str) -> str:
    """Lower case, accents folded (``ø`` -> ``o``), thousands separators dropped, ``:``/``.``
    between digits unified, other punctuation to spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKD", text.replace("ø", "o").replace("Ø", "O"))
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"(?<=\d)[:.](?=\d)", ":", text)
    text = re.sub(r"[^\w:]+|_", " ", text)
    return " ".join(text.split())


def is_correct(answer: str, accepted: Iterable[str]) -> bool:
    """Whether `answer` contains one of `accepted` after `normalise`, not run on into a longer
    number or word (``8316`` is not found in ``83160``; ``6:15`` is found in ``6:15pm``)."""
    text = normalise(answer)
    for a in accepted:
        a = normalise(a)
        if not a:
            continue
        left = r"(?<!\d)" if a[0].isdigit() else r"(?<![a-z])"
        right = r"(?![\d:])" if a[-1].isdigit() else r"(?![a-z])"
        if re.search(left + re.escape(a) + right, text):
            return True
    return False


def load_items(path: str | Path | None = None) -> list[FactItem]:
    """Read and validate a fact-recall JSONL file (default: the shipped set)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        raise FactRecallDataError(f"fact-recall file {str(path)!r} does not exist; pass a JSONL file "
                                  f"with one item per line (fields {', '.join(_FIELDS)})")
    items, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise FactRecallDataError(f"{where}: not valid JSON ({e.msg}); each line must be one object") from None
        if not isinstance(rec, dict):
            raise FactRecallDataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        missing = [f for f in _FIELDS if f not in rec]
        if missing:
            raise FactRecallDataError(f"{where}: missing field(s) {missing}; every item needs {list(_FIELDS)}")
        if rec["kind"] not in KINDS:
            raise FactRecallDataError(f"{where}: kind {rec['kind']!r} is not one of {list(KINDS)}")
        for f in _FIELDS[:-1]:
            if not isinstance(rec[f], str) or not rec[f].strip():
                raise FactRecallDataError(f"{where}: field {f!r} must be a non-empty string")
        answers = rec["answers"]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise FactRecallDataError(f"{where}: 'answers' must be a non-empty list of non-empty strings")
        if rec["id"] in seen:
            raise FactRecallDataError(f"{where}: duplicate id {rec['id']!r}")
        seen.add(rec["id"])
        if not is_correct(rec["reply"], answers):
            raise FactRecallDataError(f"{where}: no accepted answer {answers} is stated in the reply; "
                                      "the fact must be recoverable from the reply")
        if is_correct(rec["filler_reply"] + " " + rec["question"] + " " + rec["user"], answers):
            raise FactRecallDataError(f"{where}: an accepted answer appears outside the reply "
                                      "(user turn, filler or question); it must be stated only in the reply")
        items.append(FactItem(**{**{f: rec[f] for f in _FIELDS[:-1]}, "answers": tuple(answers)}))
    if not items:
        raise FactRecallDataError(f"{path}: no items")
    return items


#: how the follow-up is asked: "item" (the item's own natural question, the issue's measure) or "cloze" (the
#: fact-QA training stage's question form, `rhea.eval.cloze.CLOZE_QUESTION`, over the reply's own sentence
#: with the fact blanked out: a diagnostic that separates "the latents hold the fact" from "the model transfers
#: the trained question form to a natural question"; not what `fact_recall_verdict` judges) or "repeat" (`REPEAT_QUESTION`:
#: the reply asked back word for word, what a reconstruction compressor is trained to serve and what
#: `rhea chat --demo` shows; scored, like the others, by whether the fact is in the answer; a diagnostic too)
QUESTION_FORMS = ("item", "cloze", "repeat")
#: the "repeat" form's question: the earlier reply asked back by the user message it answered
REPEAT_QUESTION = 'Repeat word for word what you answered when I asked: "{user}"'


def repeat_form(item: FactItem) -> FactItem:
    """`item` with its question replaced by a request to repeat the reply that holds the fact.

    >>> it = FactItem("n", "number", "How much water?", "It uses 9.5 litres.", "Hi?", "Hello.", "How many?", ("9.5",))
    >>> repeat_form(it).question
    'Repeat word for word what you answered when I asked: "How much water?"'
    """
    return dataclasses.replace(item, question=REPEAT_QUESTION.format(user=item.user))


def question_form(item: FactItem, form: str) -> FactItem:
    """`item` asked in `form` (one of `QUESTION_FORMS`)."""
    if form not in QUESTION_FORMS:
        raise FactRecallDataError(f"question form {form!r} is not one of {list(QUESTION_FORMS)}")
    return cloze_form(item) if form == "cloze" else repeat_form(item) if form == "repeat" else item


def _answer_span(item: FactItem) -> tuple[int, int]:
    """Where the first accepted answer that the reply states verbatim (case-insensitive) stands in it."""
    low = item.reply.lower()
    for a in item.answers:
        for m in re.finditer(re.escape(a.lower()), low):
            s, e = m.span()
            left_ok = s == 0 or not low[s - 1].isalnum()
            right_ok = e == len(low) or not low[e].isalnum()
            if left_ok and right_ok:
                return s, e
    raise FactRecallDataError(f"item {item.id!r}: none of its answers {list(item.answers)} is stated verbatim in "
                              "the reply, so no cloze question can be made from it")


def cloze_form(item: FactItem) -> FactItem:
    """`item` with its question replaced by the fact-QA stage's cloze question: the reply's sentence that states
    the fact, with the fact blanked out (``"... uses ____ litres of water per full cycle ..."``).

    >>> it = FactItem("n", "number", "How much water?", "Sure. The eco cycle uses 9.5 litres of water, which is little.",
    ...               "Hi?", "Hello.", "How many litres?", ("9.5",))
    >>> cloze_form(it).question
    'Which word or number filled the blank in your earlier reply? "The eco cycle uses ____ litres of water, which is little."'
    """
    from rhea.eval.cloze import CLOZE_QUESTION, blank_sentence

    start, end = _answer_span(item)
    question = CLOZE_QUESTION.format(sentence=blank_sentence(item.reply, start, end))
    if is_correct(question, item.answers):
        raise FactRecallDataError(f"item {item.id!r}: its answer is stated twice in one sentence of the reply, so the "
                                  "blanked sentence still gives it away")
    return dataclasses.replace(item, question=question)


def other_items(items: Sequence[FactItem]) -> dict[str, FactItem]:
    """Each item's partner for ``latent_other``: item i gets item (i + n/2) mod n (never itself, for n >= 2).

    >>> its = [FactItem(str(i), "name", "u", "r", "f", "g", "q", ("a",)) for i in range(4)]
    >>> {k: v.id for k, v in other_items(its).items()}
    {'0': '2', '1': '3', '2': '0', '3': '1'}
    """
    n = len(items)
    if n < 2:
        raise FactRecallDataError("condition 'latent_other' needs at least 2 items (each takes another's reply)")
    return {it.id: items[(i + n // 2) % n] for i, it in enumerate(items)}


def interleave_kinds(items: Sequence[FactItem]) -> list[FactItem]:
    """Items reordered round-robin over kinds, so that any prefix spans the kinds."""
    by_kind: dict[str, list[FactItem]] = {}
    for it in items:
        by_kind.setdefault(it.kind, []).append(it)
    out, queues = [], list(by_kind.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def plan_for(item: FactItem, condition: str, model, other: FactItem | None = None):
    """The `ContextPlan` for the item's question with its first reply raw, as latents from
    `model`'s compress adapter, or dropped (the filler turn is always raw), built like the
    session builds plans (`rhea.policies.assemble_plan`). ``latent_other`` needs `other`, whose
    reply's latents stand in for this item's reply."""
    import torch

    from rhea.context import Conversation, Latent, Turn, TurnDecision
    from rhea.policies import assemble_plan

    if condition not in CONDITIONS:
        raise FactRecallDataError(f"condition {condition!r} is not one of {list(CONDITIONS)}")
    history = Conversation([Turn(u, a) for u, a in item.turns()])
    tier0 = {"raw": "raw", "dropped": "drop"}.get(condition, "latent")
    decisions = [TurnDecision(0, tier0), TurnDecision(1, "raw")]
    latents = {}
    if tier0 == "latent":
        if condition == "latent_other" and (other is None or other.id == item.id):
            raise FactRecallDataError(f"condition 'latent_other' for item {item.id!r} needs another item's reply")
        reply = other.reply if condition == "latent_other" else item.reply
        with torch.no_grad():
            latents[0] = Latent(model.compress_replies([reply])[0], 0)  # chunked as the policy does
    return assemble_plan(f"fact-recall-{condition}", history, item.question, decisions, latents=latents)


def answer_item(model, item: FactItem, condition: str, *, max_new_tokens: int = 16,
                other: FactItem | None = None) -> dict:
    """Generate (greedily) the answer to `item` under `condition` and score it: one row."""
    from rhea.session.generation import generate_from_plan

    gen = generate_from_plan(model, plan_for(item, condition, model, other), max_new_tokens=max_new_tokens,
                             do_sample=False)
    return {"id": item.id, "kind": item.kind, "condition": condition, "answer": gen.text,
            "correct": is_correct(gen.text, item.answers), "prompt_tokens": gen.prompt_tokens}


#: how an item is answered: "generate" (greedy decoding, scored by containment; the issue's measure),
#: "teacher-forced" (the first accepted answer appended to the prompt as the assistant's reply: every answer token
#: the argmax = correct, plus the answer's mean log-probability; the fact-QA training stage's own measure, graded) or
#: "reconstruct" (no question: the reply itself reconstructed from latents under the auto-encoding prompt, scored
#: on the tokens that spell the fact and on the others: are the facts in the latents at all?)
MODES = ("generate", "teacher-forced", "reconstruct")
#: the conditions a reconstruction can be scored under: the reply's own latents, and another item's (the control)
RECONSTRUCT_CONDITIONS = ("latent", "latent_other")


def _teacher_forced(model, rendered, target: Sequence[int]):
    """(log-probability, argmax hit) of each token of `target` appended to the `rendered` prompt, one forward
    pass (latents and prefix length as rendered); on the CPU."""
    import torch

    ids = torch.cat([rendered.input_ids, torch.tensor([list(target)], dtype=rendered.input_ids.dtype)], dim=1)
    n_prompt = rendered.input_ids.shape[1]
    latents = rendered.latent_embeds.to(model.device) if rendered.latent_embeds is not None else None
    with torch.no_grad():
        # the LM head on the answer's positions only (the prompt's are never read)
        logits = model(input_ids=ids.to(model.device), latent_embeds=latents, prefix_len=torch.tensor([rendered.prefix_len]),
                       logits_to_keep=len(target) + 1).logits[0, :-1].float().cpu()
    gold = torch.tensor(list(target))
    return torch.log_softmax(logits, dim=-1).gather(1, gold[:, None])[:, 0], logits.argmax(-1) == gold


def score_item(model, item: FactItem, condition: str, *, other: FactItem | None = None) -> dict:
    """Teacher-forced: how likely the model makes `item`'s first accepted answer as its reply under `condition`.

    One forward pass over the rendered prompt (the same `plan_for` / `render` as `answer_item`) followed by the
    answer's tokens. ``correct``: every answer token is the argmax (what pure greedy decoding would write; the
    ``generate`` mode decodes with `DEFAULT_GENERATION`'s repetition penalty); ``answer_token_acc``: the share that is;
    ``answer_logprob``: their mean log-probability (a graded measure: it moves before ``correct`` does)."""
    from rhea.context.rendering import render

    rendered = render(plan_for(item, condition, model, other), model.tokenizer)
    answer = item.answers[0]
    target = model.tokenizer(answer, add_special_tokens=False)["input_ids"]
    logp, hits = _teacher_forced(model, rendered, target)
    n_prompt = rendered.input_ids.shape[1]
    return {"id": item.id, "kind": item.kind, "condition": condition, "answer": answer,
            "correct": bool(hits.all()), "answer_token_acc": float(hits.float().mean()),
            "answer_logprob": float(logp.mean()), "answer_tokens": len(target), "prompt_tokens": int(n_prompt)}


def reconstruct_item(model, item: FactItem, condition: str, *, other: FactItem | None = None) -> dict:
    """Teacher-forced reconstruction of `item`'s reply from latents, under the auto-encoding stage's prompt
    (``user: <mem>×n + AUTOENCODE_PROMPT`` → ``assistant: reply``): the item's own latents (``latent``) or
    `other`'s (``latent_other``, the control). The ``answer_*`` fields score the reply tokens that spell the fact
    (those overlapping the answer's span in the reply), like `score_item`'s do the answer (``correct``: every one
    the argmax); ``rest_*`` score the reply's other tokens. Own minus other at the fact tokens is what the
    latents carry of the fact when asked to repeat, whatever a question can draw from them."""
    import torch

    from rhea.constants import AUTOENCODE_PROMPT
    from rhea.context import ContextPlan, Latent
    from rhea.context.rendering import render

    if condition not in RECONSTRUCT_CONDITIONS:
        raise FactRecallDataError(f"condition {condition!r} cannot be reconstructed; use one of {list(RECONSTRUCT_CONDITIONS)}")
    if condition == "latent_other" and (other is None or other.id == item.id):
        raise FactRecallDataError(f"condition 'latent_other' for item {item.id!r} needs another item's reply")
    start, end = _answer_span(item)
    enc = model.tokenizer(item.reply, add_special_tokens=False, return_offsets_mapping=True)
    if "offset_mapping" not in enc:
        raise FactRecallDataError("--mode reconstruct needs a fast tokenizer (character offsets of the reply's tokens)")
    target, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    on_fact = torch.tensor([s < end and e > start for s, e in offsets])
    with torch.no_grad():
        latent = model.compress_replies([other.reply if condition == "latent_other" else item.reply])[0]
    rendered = render(ContextPlan([{"role": "user", "content": [Latent(latent, 0), "\n" + AUTOENCODE_PROMPT]}]),
                      model.tokenizer)
    logp, hits = _teacher_forced(model, rendered, target)
    n_prompt = rendered.input_ids.shape[1]
    fact, rest = on_fact, ~on_fact
    return {"id": item.id, "kind": item.kind, "condition": condition, "answer": item.reply[start:end],
            "correct": bool(hits[fact].all()), "answer_token_acc": float(hits[fact].float().mean()),
            "answer_logprob": float(logp[fact].mean()), "answer_tokens": int(fact.sum()),
            "rest_token_acc": float(hits[rest].float().mean()) if rest.any() else None,
            "rest_logprob": float(logp[rest].mean()) if rest.any() else None,
            "reply_tokens": len(target), "prompt_tokens": int(n_prompt)}


# ----------------------------------------------------------------------------- statistics
def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for k successes in n trials."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (0.0 if k == 0 else max(0.0, c - h), 1.0 if k == n else min(1.0, c + h))


def _paired(rows: Sequence[Mapping[str, Any]], a: str, b: str) -> list[tuple[int, int]]:
    res: dict[str, dict[str, bool]] = {}
    for r in rows:
        res.setdefault(r["id"], {})[r["condition"]] = bool(r["correct"])
    return [(int(v[a]), int(v[b])) for v in res.values() if a in v and b in v]


def paired_stats(rows: Sequence[Mapping[str, Any]], a: str, b: str, *, n_boot: int = 5000,
                 seed: int = 0) -> dict | None:
    """Difference acc(a) - acc(b) and ratio acc(a) / acc(b) over items answered under both, with
    95% percentile bootstrap intervals over items (None when fewer than 2 paired items)."""
    pairs = _paired(rows, a, b)
    n = len(pairs)
    if n < 2:
        return None
    rng = random.Random(seed)
    diffs, ratios = [], []
    for _ in range(n_boot):
        s = [pairs[rng.randrange(n)] for _ in range(n)]
        sa, sb = sum(x for x, _ in s), sum(y for _, y in s)
        diffs.append((sa - sb) / n)
        ratios.append(sa / sb if sb else math.inf)
    diffs.sort()
    ratios.sort()
    lo, hi = int(0.025 * n_boot), int(0.975 * n_boot) - 1
    ta, tb = sum(x for x, _ in pairs), sum(y for _, y in pairs)
    fin = lambda v: v if math.isfinite(v) else None  # noqa: E731 - JSON has no infinity
    return {"n": n, "diff": (ta - tb) / n, "diff_ci": [diffs[lo], diffs[hi]],
            "ratio": fin(ta / tb) if tb else None, "ratio_ci": [fin(ratios[lo]), fin(ratios[hi])]}


def complete_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of items answered under every condition that appears in `rows` (a resumed,
    unfinished run leaves its last item part-answered; summaries compare the same items)."""
    conds = {r["condition"] for r in rows}
    have: dict[str, set[str]] = {}
    for r in rows:
        have.setdefault(r["id"], set()).add(r["condition"])
    keep = {i for i, c in have.items() if c == conds}
    return [r for r in rows if r["id"] in keep]


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict:
    """Per-condition and per-kind accuracy with Wilson intervals, paired latent-vs-dropped and
    latent-vs-raw statistics, and the fact-recall verdict (``criterion``: `fact_recall_verdict`)."""
    conds = [c for c in CONDITIONS if any(r["condition"] == c for r in rows)]
    acc: dict[str, Any] = {}
    for c in conds:
        rc = [r for r in rows if r["condition"] == c]
        k = sum(bool(r["correct"]) for r in rc)
        per_kind = {}
        for kind in KINDS:
            rk = [r for r in rc if r["kind"] == kind]
            if rk:
                kk = sum(bool(r["correct"]) for r in rk)
                per_kind[kind] = {"n": len(rk), "correct": kk, "accuracy": kk / len(rk), "ci95": list(wilson(kk, len(rk)))}
        acc[c] = {"n": len(rc), "correct": k, "accuracy": k / len(rc), "ci95": list(wilson(k, len(rc))),
                  "per_kind": per_kind}
    paired = {}
    for a, b in (("latent", "dropped"), ("latent", "raw"), ("raw", "dropped"), ("latent_fresh", "dropped"),
                 ("latent", "latent_other")):
        if a in conds and b in conds:
            paired[f"{a}_vs_{b}"] = paired_stats(rows, a, b)
    out = {"accuracy": acc, "paired": paired, "criterion": fact_recall_verdict(acc)}
    if rows and all("answer_logprob" in r for r in rows):
        out["answer_logprob"] = logprob_stats(rows, conds)
    return out


def _logprobs(rows: Sequence[Mapping[str, Any]], condition: str, key: str = "answer_logprob") -> dict[str, float]:
    """Item id -> the row's `key` (its answer log-probability unless named) for `condition`'s rows."""
    return {r["id"]: float(r[key]) for r in rows if r["condition"] == condition}


def logprob_stats(rows: Sequence[Mapping[str, Any]], conds: Sequence[str]) -> dict:
    """Teacher-forced rows: mean answer log-probability and token accuracy per condition, and the paired
    differences latent - dropped, raw - dropped, latent - raw and latent - latent_other over items (95% bootstrap
    intervals and sign-flip p-values, `rhea.eval.stats`)."""
    from rhea.eval.stats import bootstrap_ci, paired_comparison

    out: dict[str, Any] = {}
    for c in conds:
        lp = bootstrap_ci(r["answer_logprob"] for r in rows if r["condition"] == c)
        ta = bootstrap_ci(r["answer_token_acc"] for r in rows if r["condition"] == c)
        out[c] = {"n": lp.n, "mean_logprob": lp.mean, "mean_logprob_ci": [lp.low, lp.high],
                  "token_acc": ta.mean, "token_acc_ci": [ta.low, ta.high]}
    for a, b in (("latent", "dropped"), ("raw", "dropped"), ("latent", "raw"), ("latent", "latent_other")):
        if a in conds and b in conds:
            cmp = paired_comparison(_logprobs(rows, a), _logprobs(rows, b))
            out[f"{a}_minus_{b}"] = {"n": cmp.n, "mean_logprob_diff": cmp.diff, "ci": [cmp.low, cmp.high],
                                     "p": cmp.p_value}
    if all(r.get("rest_logprob") is not None for r in rows) and {"latent", "latent_other"} <= set(conds):
        # reconstruction rows: the same, over the reply's tokens that do not spell the fact
        for c in conds:
            ta = bootstrap_ci(r["rest_token_acc"] for r in rows if r["condition"] == c)
            lp = bootstrap_ci(r["rest_logprob"] for r in rows if r["condition"] == c)
            out[c].update({"rest_token_acc": ta.mean, "rest_token_acc_ci": [ta.low, ta.high],
                           "rest_mean_logprob": lp.mean, "rest_mean_logprob_ci": [lp.low, lp.high]})
        rest = {c: {r["id"]: r["rest_logprob"] for r in rows if r["condition"] == c} for c in conds}
        cmp = paired_comparison(rest["latent"], rest["latent_other"])
        out["rest_latent_minus_latent_other"] = {"n": cmp.n, "mean_logprob_diff": cmp.diff, "ci": [cmp.low, cmp.high],
                                                 "p": cmp.p_value}
    return out


def _measure_key(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """What a run's rows score per item: ``answer_logprob`` (teacher-forced), ``correct`` (generated), else None."""
    if rows and all("answer_logprob" in r for r in rows):
        return "answer_logprob"
    if rows and all("correct" in r and "answer_logprob" not in r for r in rows):
        return "correct"
    return None


def compare_runs(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> dict:
    """Rows of two runs on the same items (e.g. two checkpoints): the paired change, after minus before, of the
    latent condition and of latent - latent_other (what the latents hold of their own reply), with 95% bootstrap
    intervals and sign-flip p-values over the items both answered. Teacher-forced rows compare the answer's mean
    log-probability, generated rows whether the answer was right (0/1, so a change is a share of the items);
    ``measure`` says which. Two runs of different modes are refused (`FactRecallDataError`)."""
    from rhea.eval.stats import paired_comparison

    key_before, key_after = _measure_key(before), _measure_key(after)
    if key_before != key_after:
        raise FactRecallDataError(f"the two runs score items differently ({key_before} vs {key_after}): compare a "
                                  "teacher-forced run with a teacher-forced one, a generated run with a generated one")
    key = key_after or "answer_logprob"

    def own_minus_other(rows):
        lat, other = _logprobs(rows, "latent", key), _logprobs(rows, "latent_other", key)
        return {i: lat[i] - other[i] for i in lat if i in other}

    out: dict[str, Any] = {}
    for name, measure in (("latent", lambda rows: _logprobs(rows, "latent", key)),
                          ("latent_minus_latent_other", own_minus_other)):
        a, b = measure(before), measure(after)
        if any(i in a for i in b):
            cmp = paired_comparison(b, a)
            out[name] = {"n": cmp.n, "change": cmp.diff, "ci": [cmp.low, cmp.high], "p": cmp.p_value}
    if not out:
        raise FactRecallDataError("the two runs share no latent rows of the same items; compare runs made with "
                                  "the same --mode and --conditions ...,latent (and latent_other for the control)")
    return {"measure": key, **out}


def fact_recall_verdict(acc: Mapping[str, Mapping[str, Any]]) -> dict:
    """Whether the latents carry the facts, on point estimates: latent >= 0.6 x raw and >= dropped + 0.25
    (`RATIO`, `MARGIN`). ``passed`` is None when raw, latent or dropped was not measured.

    >>> fact_recall_verdict({"raw": {"accuracy": 0.8}, "latent": {"accuracy": 0.5}, "dropped": {"accuracy": 0.0}})["passed"]
    True
    >>> fact_recall_verdict({"raw": {"accuracy": 0.8}})["passed"] is None
    True
    """
    if not all(c in acc for c in ("raw", "latent", "dropped")):
        return {"passed": None, "reason": "needs raw, latent and dropped"}
    raw, lat, drop = (acc[c]["accuracy"] for c in ("raw", "latent", "dropped"))
    ratio_ok, margin_ok = lat >= RATIO * raw, lat >= drop + MARGIN
    return {"passed": bool(ratio_ok and margin_ok), "latent_ge_0.6_raw": bool(ratio_ok),
            "latent_ge_dropped_plus_0.25": bool(margin_ok), "raw": raw, "latent": lat, "dropped": drop,
            "rule": f"latent >= {RATIO} x raw and latent >= dropped + {MARGIN} (point estimates)"}


def item_record(item: FactItem) -> dict:
    """The item as a JSON-ready dict (answers as a list)."""
    d = asdict(item)
    d["answers"] = list(item.answers)
    return d
