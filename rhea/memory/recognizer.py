"""InstructionRecognizer: does a user message set (or cancel) a rule for ALL later replies?

Stage 1 is rules: regexes for persistent directives ("from now on", "in all your answers",
"always start with ...") and revocations ("stop ...", "forget the ... rule", "you no longer
need to ..."). Stage 2 runs only when no rule fires: a pluggable classifier. The default is a
small logistic regression over hashed word and character n-grams, trained deterministically
at first use on the train split of `rhea/data/recognizer_labelled.jsonl`, because the paper's
YES/NO prompt on the 135M default model answers YES to nearly everything (precision 0.21).
A `TextGenerator` (a capable LLM) can be plugged in instead; it gets the paper-style prompt.

Tuned for recall: a missed instruction is forgotten for the rest of the conversation, while
a false positive only adds one line to the system block.
"""
from __future__ import annotations

import functools
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from rhea.context.errors import require_text
from rhea.llm import TextGenerator

KINDS = ("add", "revoke", "none")
SOURCES = ("rules", "classifier", "default")


@dataclass(frozen=True)
class RecognizerDecision:
    """The recognizer's verdict on one message.

    matched: the rule text that fired (source "rules"), or the classifier's raw reply for a
    prompted LLM; confidence: the classifier's probability (None for rules and default).

    >>> RecognizerDecision(True, "add", "rules", "from now on", None).is_global
    True
    """

    is_global: bool
    kind: str
    source: str
    matched: str | None = None
    confidence: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.source not in SOURCES:
            raise ValueError(f"RecognizerDecision kind={self.kind!r} must be in {KINDS} and source={self.source!r} in {SOURCES}")
        if self.is_global != (self.kind != "none"):
            raise ValueError(f"is_global={self.is_global} contradicts kind={self.kind!r}")


# --- stage 1: rules ---------------------------------------------------------------------

_REPLY_NOUNS = r"(?:answers?|responses?|repl(?:y|ies)|messages?|outputs?)"
_REPLY_NOUNS_PLURAL = r"(?:answers|responses|replies|messages|outputs)"

#: Persistent-scope cues: each names ALL later replies, the defining trait of a global rule.
ADD_PATTERNS: tuple[str, ...] = (
    r"\bfrom now(?: on)?\b",
    r"\bgoing forward\b",
    r"\bfrom (?:here|this point)(?: on(?:wards?)?| out)?\b",
    r"\bfor the (?:rest|remainder) of (?:this|our|the) (?:conversation|chat|session|discussion)\b",
    r"\b(?:throughout|for the remainder of) (?:the rest of )?(?:this|our|the) (?:conversation|chat|session)\b",
    r"\b(?:for|during|throughout|in) (?:this|our|the) (?:whole|entire) (?:conversation|chat|session|discussion)\b",
    r"\buntil (?:i (?:say|tell you) otherwise|further notice|i say so|i tell you to stop)\b",
    r"\b(?:remember|make sure|be sure) (?:to |you |that you )?(?:always|never)\b",
    rf"\b(?:all|every|each|any)(?: one)?(?: of)? (?:your |my |the )?(?:future |subsequent |following |later |next )?{_REPLY_NOUNS}\b",
    r"\b(?:all|every|each|any)(?: of)? (?:my |the )?(?:future |subsequent |following )?(?:questions?|prompts?)\b",
    rf"\b(?:in|for|to) (?:all |every |each )?(?:of )?your {_REPLY_NOUNS_PLURAL}\b",
    rf"\bper {_REPLY_NOUNS}\b",
    rf"\byour {_REPLY_NOUNS_PLURAL}(?: should| must| need| have| will| are to| can't| cannot)\b",
    rf"\b{_REPLY_NOUNS_PLURAL}\b[^.?!]*\b(?:should|must|shall) (?:always|never|be|not|have|contain|start|begin|end)\b",
    r"\b(?:whenever|every time|each time) (?:you|i) (?:answer|reply|respond|ask|write|explain)\b",
    r"\bwhatever i ask\b",
    r"\bin everything you (?:write|say)\b",
    r"\byou are now\b",
    r"\bstay in (?:that|this|the|your) (?:role|character|persona)\b",
    r"\bdon'?t ever\b|\bdo not ever\b|\bnever ever\b",
    r"^\s*(?:please\s+)?(?:always|never)\s+(?:start|begin|open|end|finish|close|use|write|answer|respond|reply|include|put|mention|say|add|format|keep|refer|call|sign|cite|capitali[sz]e|speak|talk)\b",
)

#: Cancellation cues. Checked before ADD_PATTERNS: "you no longer need to answer in French"
#: also contains an add-like phrase, and it must cancel, not re-add.
REVOKE_PATTERNS: tuple[str, ...] = (
    r"^\s*(?:ok(?:ay)?,?\s+|so,?\s+|now,?\s+)?(?:please\s+|just\s+)?stop\s+\w+ing\b",
    r"\b(?:you can|you may|please|just|can you) stop\s+\w+ing\b",
    r"\bforget (?:about )?(?:the|that|those|my|all|what i said|your)\b",
    r"\byou (?:no longer|don'?t|do not) (?:need|have) to\b",
    r"\b(?:ignore|disregard|drop|cancel|scrap|remove|lift|undo|revoke|forget)\s+(?:my |the |that |all |your |this )?(?:earlier |previous |prior |old |last |above )?(?:[\w'-]+ ){0,2}(?:instructions?|rules?|requirements?|restrictions?|constraints?|limits?|format|voice|persona|style)\b",
    r"\bno longer (?:applies|apply|needed|necessary|required|in effect)\b",
    r"\bno need to\b[^.?!]*\b(?:any ?more|again)\b",
    r"\b(?:don'?t|do not)\b[^.?!]*\bany ?more\b",
    r"\b(?:you can|you may|feel free to|it's fine to|it is fine to)\b[^.?!]*\bagain\b",
    r"\bgo back to\b",
    r"\bnever ?mind (?:the|that|about)\b",
    r"\b(?:the )?[\w-]+ (?:thing|rule|format) is (?:over|done|off)\b",
)

#: One-off scope cues: the request is about THIS reply or the PREVIOUS one, so it is no
#: global rule. Checked only after ADD/REVOKE found nothing, so "from now on ... this time
#: too" still counts as global; a message they match never reaches the classifier.
ONE_OFF_PATTERNS: tuple[str, ...] = (
    rf"\b(?:your|the|that) (?:previous|last|above|earlier|first|second) (?:{_REPLY_NOUNS}|paragraph|list|table|recipe|one|version|text|story|poem)\b",
    r"\bfor this (?:question|one|answer|reply|response|message|request)(?: only)?\b|\bonly for this\b",
    r"\b(?:in|for) this (?:answer|reply|response) only\b",
    r"\b(?:just )?this (?:once|time)\b",
    r"\bthe above\b|\byou just (?:gave|wrote|said|sent|listed|showed)\b",
    r"\b(?:give me|write|put|format|make) (?:this|that) (?:answer|reply|response|comparison|list|text|paragraph|email|essay)\b",
    r"\bfor this (?:comparison|list|text|paragraph|email|essay|summary|explanation|example|task)\b",
    r"\b(?:answer|do|give me) this one\b",
    r"\b(?:reply|respond|answer) (?:to )?this(?: message| question)? (?:in|with|using)\b",
    r"^\s*(?:ok(?:ay)?,?\s+|now,?\s+)?(?:please\s+)?(?:try (?:that |it )?again|redo|rewrite|rephrase|reword|shorten|lengthen|translate (?:that|this|it)|convert (?:that|this|it))\b",
    # A question, then how to answer it ("Where is Mary? Answer in one word."): the format
    # rides on this question. The classifier used to score such probes 0.47-0.61 (global).
    r"(?<=\?)\s*(?:[\"')\]]\s*)?(?:please\s+)?(?:just\s+)?(?:answer|reply|respond|give (?:me )?(?:the|your|an?) (?:answer|reply)|keep (?:it|the answer|your answer))\b[^?]*$",
)

_COMPILED_ADD = tuple(re.compile(p, re.IGNORECASE) for p in ADD_PATTERNS)
_COMPILED_REVOKE = tuple(re.compile(p, re.IGNORECASE) for p in REVOKE_PATTERNS)
_COMPILED_ONE_OFF = tuple(re.compile(p, re.IGNORECASE) for p in ONE_OFF_PATTERNS)
# Quoted spans are content, not directives: "what does 'from now on' mean?". An apostrophe
# inside a word (don't) cannot open a quote.
_QUOTED = re.compile(r"(?<!\w)'[^'\n]*'(?!\w)|\"[^\"\n]*\"|“[^”\n]*”")


def strip_quotes(text: str) -> str:
    """Blank out quoted spans so cue phrases inside quotes do not fire.

    >>> strip_quotes("What does 'from now on' mean? Don't worry.")
    "What does '' mean? Don't worry."
    """
    return _QUOTED.sub("''", text)


def match_rules(text: str) -> tuple[str, str] | None:
    """Stage 1: `("revoke" | "add", matched_text)` if a rule fires, else None.

    >>> match_rules("From now on, answer in French.")
    ('add', 'From now on')
    >>> match_rules("Why do cats always land on their feet?") is None
    True
    """
    bare = strip_quotes(text)
    for kind, patterns in (("revoke", _COMPILED_REVOKE), ("add", _COMPILED_ADD)):
        for pattern in patterns:
            found = pattern.search(bare)
            if found:
                return kind, found.group(0).strip()
    return None


def match_one_off(text: str) -> str | None:
    """The one-off scope cue in `text` (a request about this or the previous reply), else None.

    >>> match_one_off("Rewrite your previous answer in French.")
    'your previous answer'
    >>> match_one_off("Answer in French from now on.") is None
    True
    """
    bare = strip_quotes(text)
    for pattern in _COMPILED_ONE_OFF:
        found = pattern.search(bare)
        if found:
            return found.group(0).strip()
    return None


def looks_like_revocation(text: str) -> bool:
    """Weaker revocation cue, used to pick the kind once a classifier said "global"."""
    return bool(re.search(r"\b(?:stop|any ?more|no more|no longer|again|forget|ignore|disregard|cancel|undo|over|done with|normally)\b", strip_quotes(text), re.IGNORECASE))


# --- stage 2: classifiers -----------------------------------------------------------------

def _features(text: str, n_features: int) -> dict[int, float]:
    # Word 1-2 grams carry phrasing ("your replies"); character 3-5 grams inside words let
    # "replies"/"reply"/"responses" share evidence with ~150 training examples.
    words = re.findall(r"[a-z0-9']+|[^\sa-z0-9]", text.lower())
    grams = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in zip(words, words[1:])]
    for w in words:
        padded = f"<{w}>"
        grams += [f"c:{padded[i:i + n]}" for n in (3, 4, 5) for i in range(len(padded) - n + 1)]
    counts: dict[int, float] = {}
    for g in grams:
        h = zlib.crc32(g.encode("utf-8")) % n_features  # crc32, not hash(): stable across processes
        counts[h] = counts.get(h, 0.0) + 1.0
    norm = float(np.sqrt(sum(v * v for v in counts.values()))) or 1.0
    return {k: v / norm for k, v in counts.items()}


class HashedNgramClassifier:
    """Logistic regression over hashed n-grams: text -> P(global instruction).

    Trained by full-batch gradient descent from zero weights, so the same data always gives
    the same model (no randomness anywhere).

    >>> clf = HashedNgramClassifier.fit(["from now on use French", "what is 2+2?"], [1, 0])
    >>> clf("always answer in French from now on") > clf("what is 3+3?")
    True
    """

    def __init__(self, weights: np.ndarray, bias: float, n_features: int):
        self.weights, self.bias, self.n_features = weights, float(bias), int(n_features)

    @classmethod
    def fit(
        cls,
        texts: Sequence[str],
        labels: Sequence[int],
        *,
        n_features: int = 2**13,
        steps: int = 300,
        learning_rate: float = 2.0,
        l2: float = 1e-4,
    ) -> "HashedNgramClassifier":
        if len(texts) != len(labels) or not texts:
            raise ValueError(f"fit needs as many labels as texts and at least one of each, got {len(texts)} texts, {len(labels)} labels")
        if set(labels) - {0, 1}:
            raise ValueError(f"labels must be 0 or 1, got {sorted(set(labels))}")
        x = np.zeros((len(texts), n_features), dtype=np.float64)
        for i, t in enumerate(texts):
            for k, v in _features(t, n_features).items():
                x[i, k] = v
        y = np.asarray(labels, dtype=np.float64)
        # Weight classes equally so the positive-heavy set does not bias the threshold.
        pos = y.mean()
        sample_w = np.where(y == 1, 0.5 / max(pos, 1e-9), 0.5 / max(1 - pos, 1e-9)) / len(y)
        w, b = np.zeros(n_features), 0.0
        for _ in range(steps):
            p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
            g = sample_w * (p - y)
            w -= learning_rate * (x.T @ g + l2 * w)
            b -= learning_rate * g.sum()
        return cls(w, b, n_features)

    def __call__(self, text: str) -> float:
        z = self.bias + sum(self.weights[k] * v for k, v in _features(text, self.n_features).items())
        return float(1.0 / (1.0 + np.exp(-z)))


#: The stage-2 prompt for a capable LLM (after the paper's appendix B).
CLASSIFIER_PROMPT = (
    "Determine whether the following user message contains a global instruction, i.e. a "
    "directive about how ALL subsequent responses should be written (for example their "
    "language, format, length, tone, persona, or how they start or end), or a message that "
    "cancels such a directive. A request that applies only to the current question or to "
    "rewriting a previous answer is NOT a global instruction. Questions that merely mention "
    "words like 'always' or 'never' are NOT global instructions.\n\n"
    "User message:\n\"\"\"\n{message}\n\"\"\"\n\n"
    "Answer YES or NO."
)


class PromptClassifier:
    """Stage 2 through any `TextGenerator`: the YES/NO prompt, parsed to a probability.

    A reply that is neither YES nor NO counts as YES (0.5 confidence): recall comes first.

    >>> from rhea.llm import ScriptedGenerator
    >>> PromptClassifier(ScriptedGenerator(["NO."]))("what is 2+2?")
    0.0
    """

    def __init__(self, generator: TextGenerator, *, prompt: str = CLASSIFIER_PROMPT):
        if "{message}" not in prompt:
            raise ValueError("prompt must contain '{message}' where the user message goes")
        self.generator, self.prompt = generator, prompt
        self.last_reply: str | None = None

    def __call__(self, text: str) -> float:
        reply = self.generator.generate([{"role": "user", "content": self.prompt.format(message=text)}], max_new_tokens=3)
        self.last_reply = reply
        head = reply.strip().upper()
        if head.startswith("YES"):
            return 1.0
        if head.startswith("NO"):
            return 0.0
        return 0.5


# --- labelled data ------------------------------------------------------------------------

LABELLED_DATA = "recognizer_labelled.jsonl"


def load_labelled(split: str | None = None) -> list[dict]:
    """Rows of the packaged labelled set, optionally one split ("train" or "test").

    >>> rows = load_labelled("test")
    >>> {r["split"] for r in rows}
    {'test'}
    """
    if split not in (None, "train", "test"):
        raise ValueError(f"split={split!r} must be 'train', 'test' or None for all rows")
    # rhea/data ships as package data of `rhea` (pyproject: data/**/*), beside this package.
    path = Path(__file__).resolve().parent.parent / "data" / LABELLED_DATA
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if split is None or r["split"] == split]


@functools.lru_cache(maxsize=1)
def trained_classifier() -> HashedNgramClassifier:
    """The default stage 2: fitted on the labelled train split only (the test split stays
    held out for measuring). Cached: training takes well under a second."""
    rows = load_labelled("train")
    return HashedNgramClassifier.fit([r["text"] for r in rows], [r["label"] for r in rows])


# --- the recognizer -----------------------------------------------------------------------

Classifier = Callable[[str], float]


class InstructionRecognizer:
    """Rules first, then a classifier only when no rule fires.

    Stage 1 decides "global" when a persistent-scope or revocation cue fires, and "not
    global" (source "rules") when only a one-off scope cue does ("rewrite your previous
    answer", "this time", "for this question only"); everything else goes to stage 2.

    classifier: "trained" (default: the hashed n-gram model), None (rules only), a
    `TextGenerator` (prompted YES/NO), or any callable text -> probability in [0, 1].
    threshold: probability at or above which the classifier's answer counts as global.

    >>> rec = InstructionRecognizer()
    >>> d = rec("From now on, end every reply with a haiku.")
    >>> d.is_global, d.kind, d.source
    (True, 'add', 'rules')
    >>> rec("Stop ending with a haiku.").kind
    'revoke'
    """

    def __init__(self, classifier: str | Classifier | TextGenerator | None = "trained", *, threshold: float = 0.35):
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold={threshold!r} must be a probability strictly between 0 and 1 (default 0.35, recall-first)")
        self.threshold = float(threshold)
        if classifier == "trained":
            self.classifier: Classifier | None = trained_classifier()
        elif classifier is None:
            self.classifier = None
        elif isinstance(classifier, TextGenerator):
            self.classifier = PromptClassifier(classifier)
        elif callable(classifier):
            self.classifier = classifier
        else:
            raise ValueError(
                f"classifier={classifier!r} must be 'trained', None, a TextGenerator or a callable text -> probability"
            )

    def __call__(self, text: str) -> RecognizerDecision:
        return self.recognize(text)

    def recognize(self, text: str) -> RecognizerDecision:
        require_text(text, "message")
        ruled = match_rules(text)
        if ruled:
            return RecognizerDecision(True, ruled[0], "rules", ruled[1], None)
        one_off = match_one_off(text)
        if one_off:
            return RecognizerDecision(False, "none", "rules", one_off, None)
        if self.classifier is None:
            return RecognizerDecision(False, "none", "default")
        p = float(self.classifier(text))
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"classifier returned {p!r} for {text!r}; it must return a probability in [0, 1]")
        raw = getattr(self.classifier, "last_reply", None)
        if p >= self.threshold:
            kind = "revoke" if looks_like_revocation(text) else "add"
            return RecognizerDecision(True, kind, "classifier", raw, p)
        return RecognizerDecision(False, "none", "classifier", raw, p)


def precision_recall(recognizer: InstructionRecognizer, rows: Iterable[dict]) -> dict:
    """Precision, recall and counts of `recognizer` on labelled rows (label 1 = global).

    >>> precision_recall(InstructionRecognizer(None), load_labelled("test"))["n"] > 0
    True
    """
    tp = fp = fn = tn = 0
    misses = []
    for r in rows:
        got = recognizer(r["text"]).is_global
        if got and r["label"]:
            tp += 1
        elif got:
            fp += 1
            misses.append(("false-positive", r["text"]))
        elif r["label"]:
            fn += 1
            misses.append(("false-negative", r["text"]))
        else:
            tn += 1
    return {
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "tp": tp, "fp": fp, "fn": fn, "tn": tn, "n": tp + fp + fn + tn, "errors": misses,
    }


def split_fold(text: str, folds: int) -> int:
    """The cross-validation fold of a labelled text: ``crc32(text) % folds`` (stable, no RNG)."""
    return zlib.crc32(text.encode("utf-8")) % folds


def cross_validate(rows: Sequence[dict] | None = None, *, folds: int = 5, threshold: float = 0.35) -> dict:
    """Rules + a hashed n-gram classifier retrained on the other folds, pooled over `folds`
    folds (fold of a row = `split_fold`). Every row is scored by a model that never saw it.

    >>> cross_validate(folds=3)["n"] == len(load_labelled())    # doctest: +SKIP
    True
    """
    rows = list(load_labelled() if rows is None else rows)
    if folds < 2:
        raise ValueError(f"folds={folds} must be >= 2")
    total = {"tp": 0, "fp": 0, "fn": 0, "tn": 0, "errors": []}
    for k in range(folds):
        train = [r for r in rows if split_fold(r["text"], folds) != k]
        held = [r for r in rows if split_fold(r["text"], folds) == k]
        clf = HashedNgramClassifier.fit([r["text"] for r in train], [r["label"] for r in train])
        got = precision_recall(InstructionRecognizer(clf, threshold=threshold), held)
        for key in ("tp", "fp", "fn", "tn", "errors"):
            total[key] += got[key]
    tp, fp, fn = total["tp"], total["fp"], total["fn"]
    return {"precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
            "n": sum(total[k] for k in ("tp", "fp", "fn", "tn")), "folds": folds, **total}


def _summary(result: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()}


def evaluate(prompted_generator: TextGenerator | None = None) -> dict:
    """Precision/recall of each stage-2 option on the labelled set (the numbers in docs/session.md).

    Held-out split: the ``split`` field of each row ("test" rows never train the default
    classifier). Also pooled 5-fold cross-validation over all rows. With `prompted_generator`,
    the paper-style prompt on that model: behind the rules, and alone on every test row.
    """
    test = load_labelled("test")
    out = {
        "rows": {"all": len(load_labelled()), "train": len(load_labelled("train")), "test": len(test),
                 "test_positives": sum(r["label"] for r in test)},
        "split": "fixed per-row 'split' field in rhea/data/recognizer_labelled.jsonl (about 1 row in 4 per category; "
                 "rows added later: test iff crc32(text) % 4 == 0); the trained classifier sees train rows only",
        "paper": {"precision": 0.62, "recall": 0.89, "classifier": "Qwen3-0.6B prompted"},
        "test_rules_only": _summary(precision_recall(InstructionRecognizer(None), test)),
        "test_rules_plus_trained": _summary(precision_recall(InstructionRecognizer("trained"), test)),
        "cv5_rules_plus_trained": _summary(cross_validate(folds=5)),
    }
    if prompted_generator is not None:
        plain = PromptClassifier(prompted_generator)
        memo: dict[str, float] = {}

        def prompted(text: str) -> float:  # each test text is asked once, for both views below
            if text not in memo:
                memo[text] = plain(text)
            return memo[text]

        out["test_rules_plus_prompted"] = _summary(precision_recall(InstructionRecognizer(prompted, threshold=0.5), test))
        alone = {"tp": 0, "fp": 0, "fn": 0, "tn": 0, "unparsed": 0}
        for r in test:
            p = prompted(r["text"])
            alone["unparsed"] += p == 0.5
            hit = p >= 0.5
            alone["tp" if hit and r["label"] else "fp" if hit else "fn" if r["label"] else "tn"] += 1
        tp, fp, fn = alone["tp"], alone["fp"], alone["fn"]
        alone.update(precision=tp / (tp + fp) if tp + fp else 0.0, recall=tp / (tp + fn) if tp + fn else 0.0)
        out["test_prompted_alone"] = _summary(alone)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Print/write `evaluate()`:
    ``python -c 'from rhea.memory.recognizer import main; main()' [--prompted] [--out FILE]``."""
    import argparse
    import time

    ap = argparse.ArgumentParser(prog="rhea.memory.recognizer", description="Recognizer precision/recall on the packaged labelled set")
    ap.add_argument("--prompted", action="store_true", help="also the prompted classifier on the embedded model (heavy)")
    ap.add_argument("--out", help="write the JSON here (e.g. benchmarks/results/recognizer.json)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads for --prompted (1: on a shared CPU more threads than free cores is far slower)")
    args = ap.parse_args(argv)
    generator, t0 = None, time.perf_counter()
    if args.prompted:
        import torch

        torch.set_num_threads(args.threads)
        from rhea import load_default_model
        from rhea.llm import HFGenerator

        model, _ = load_default_model()
        generator = HFGenerator(model.eval())
    result = evaluate(generator)
    if args.prompted:
        result["prompted_model"] = model.config.base_model or "embedded"
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(result, indent=1, ensure_ascii=False)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print(text)
