"""Evaluating the instruction recognizer: precision/recall, leave-one-source-out, calibration.

The labelled set (`rhea/data/recognizer_labelled.jsonl.gz`) records each row's source (MT-Bench,
MT-Eval, IFEval, UltraChat, MultiWOZ, SGD, TopiOCQA, hand-written). Leave-one-source-out
(LOSO) trains stage 2 on every other source and scores the held-out one, so its numbers
predict transfer to conversations the model never saw, not fit. `benchmarks/recognizer.py`
runs it and writes JSON + PNG.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from rhea.memory.recognizer import (
    EmbeddingHeadClassifier,
    HashedNgramClassifier,
    InstructionRecognizer,
    fit_logistic,
    head_inputs,
    match_first_message,
    match_one_off,
    match_rules,
    recognize_at,
)


def precision_recall(recognizer: Callable, rows: Iterable[dict]) -> dict:
    """Precision, recall and counts of `recognizer` on labelled rows (label 1 = global), each
    read at its conversation position (the row's "turn": 0 for a first message).

    >>> from rhea.memory.recognizer import load_labelled
    >>> precision_recall(InstructionRecognizer(None), load_labelled("rhea_v1"))["n"] > 0
    True
    """
    tp = fp = fn = tn = 0
    errors = []
    for r in rows:
        got = recognize_at(recognizer, r["text"], r.get("turn")).is_global
        if got and r["label"]:
            tp += 1
        elif got:
            fp += 1
            errors.append(("false-positive", r.get("source"), r["text"]))
        elif r["label"]:
            fn += 1
            errors.append(("false-negative", r.get("source"), r["text"]))
        else:
            tn += 1
    return {**_pr(tp, fp, fn, tn), "errors": errors}


def _pr(tp: int, fp: int, fn: int, tn: int) -> dict:
    return {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / (tp + fn) if tp + fn else float("nan"),
            "fp_rate": fp / (fp + tn) if fp + tn else float("nan"), "tp": tp, "fp": fp, "fn": fn, "tn": tn, "n": tp + fp + fn + tn}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n.

    >>> [round(v, 3) for v in wilson(9, 10)]
    [0.596, 0.982]
    """
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, float(c - h)), min(1.0, float(c + h)))


def rule_verdicts(texts: Sequence[str], turns: Sequence[int | None] | None = None) -> np.ndarray:
    """Stage 1 per text, in `InstructionRecognizer`'s order, each at its turn (`turns`; None:
    unknown, read as a later message): 1 = rules say global, 0 = rules say one-off (not
    global), -1 = undecided."""
    turns = [None] * len(texts) if turns is None else list(turns)
    if len(turns) != len(texts):
        raise ValueError(f"rule_verdicts got {len(texts)} texts but {len(turns)} turns")
    out = np.full(len(texts), -1, dtype=np.int8)
    for i, (t, turn) in enumerate(zip(texts, turns)):
        if match_rules(t):
            out[i] = 1
        elif match_one_off(t, structural=False):
            out[i] = 0
        elif turn == 0 and match_first_message(t):
            out[i] = 1
        elif match_one_off(t):
            out[i] = 0
    return out


def pipeline_scores(rules: np.ndarray, stage2: np.ndarray | None) -> np.ndarray:
    """Combine stage 1 and stage-2 probabilities into one score per row, the way
    `InstructionRecognizer` decides: rule-global -> 1.0 (above any threshold), rule-one-off ->
    -1.0 (below any), else the stage-2 probability (0.0 without a stage 2)."""
    s = np.zeros(len(rules)) if stage2 is None else np.asarray(stage2, dtype=np.float64).copy()
    s[rules == 1] = 1.0 + 1e-9
    s[rules == 0] = -1.0
    return s


def counts_at(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    pred = scores >= threshold
    y = labels.astype(bool)
    return _pr(int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum()), int((~pred & ~y).sum()))


def calibrate_threshold(scores: np.ndarray, labels: np.ndarray, *, max_fp_rate: float = 0.001,
                        floor: float = 0.5) -> float:
    """The lowest threshold >= `floor` that keeps the false-positive rate (share of ordinary
    messages taken for standing rules) at or below `max_fp_rate`: the most recall under that cap.

    A false-positive RATE, not a precision target: precision depends on how rare instructions
    are in the data scored, the rate of spurious permanent rules per ordinary turn does not.

    >>> calibrate_threshold(np.array([0.9, 0.8, 0.7, 0.6]), np.array([1, 0, 1, 0]), max_fp_rate=0.0)
    0.9
    """
    cands = sorted({float(s) for s in scores if floor <= s <= 1.0}) or [floor]
    for t in cands:
        if counts_at(scores, labels, t)["fp_rate"] <= max_fp_rate:
            return t
    return min(1.0, max(cands) + 1e-6)


def calibrate_for_recall(scores: np.ndarray, labels: np.ndarray, *, min_recall: float = 0.95,
                         floor: float = 0.05) -> float:
    """The highest threshold >= `floor` whose recall on `labels` is at least `min_recall`: the best
    precision at that recall (raising the threshold never adds a false positive). The paper's
    operating point: a missed standing rule collapses adherence (IAR about 2.0), a spurious one
    costs little (about 0.4), so recall comes first. When no threshold >= `floor` reaches
    `min_recall`, `floor` itself (the most recall allowed).

    >>> calibrate_for_recall(np.array([0.9, 0.8, 0.7, 0.6]), np.array([1, 0, 1, 0]), min_recall=1.0)
    0.7
    """
    if not 0.0 < min_recall <= 1.0:
        raise ValueError(f"min_recall={min_recall} must be in (0, 1]")
    cands = sorted({float(s) for s in scores if floor <= s <= 1.0}, reverse=True)
    for t in cands:
        if counts_at(scores, labels, t)["recall"] >= min_recall:
            return t
    return floor


def pr_curve(scores: np.ndarray, labels: np.ndarray, thresholds: Sequence[float] | None = None) -> list[dict]:
    """Precision/recall/false-positive rate of the pipeline score at each threshold."""
    ts = np.linspace(0.05, 0.99, 48) if thresholds is None else thresholds
    return [{"threshold": round(float(t), 4), **{k: v for k, v in counts_at(scores, labels, t).items()}} for t in ts]


def loso_scores(rows: Sequence[dict], embeddings: np.ndarray | None, *, model: str = "minilm", l2: float = 10.0,
                max_fp_rate: float | None = None, min_recall: float = 0.95, inner: bool = True,
                train_on: str = "not-rule-global") -> dict:
    """Leave-one-source-out: for each source, fit stage 2 on the other sources and score it.

    model: "minilm" (embedding head; `embeddings` rows align with `rows`) or "ngram".
    Stage 2 is trained on every row the rules do not call global (train_on="not-rule-global":
    the one-off rows are extra negatives) or only on the undecided ones ("undecided"). With
    `inner`, the threshold for each source is calibrated on the held-out scores of all OTHER
    sources, so a source never picks its own threshold: for recall >= `min_recall` at the best
    precision (`calibrate_for_recall`, the default), or, given `max_fp_rate`, for the most recall
    under that false-positive cap (`calibrate_threshold`). Rows are read at their "turn".
    Returns per-row held-out stage-2 probabilities and per-source thresholds.
    """
    texts = [r["text"] for r in rows]
    labels = np.array([r["label"] for r in rows])
    sources = np.array([r["source"] for r in rows])
    rules = rule_verdicts(texts, [r.get("turn") for r in rows])
    undecided = rules != 1 if train_on == "not-rule-global" else rules == -1
    x = head_inputs(embeddings, texts) if model == "minilm" else None

    def fit_score(train_idx, test_idx):
        if model == "minilm":
            w, b = fit_logistic(x[train_idx], labels[train_idx], l2=l2)
            z = x[test_idx] @ w + b
            return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))
        clf = HashedNgramClassifier.fit([texts[i] for i in train_idx], labels[train_idx].tolist())
        return np.array([clf(texts[i]) for i in test_idx])

    held = np.zeros(len(rows))
    names = sorted(set(sources.tolist()))
    for src in names:
        test_idx = np.where(sources == src)[0]
        train_idx = np.where((sources != src) & undecided)[0]
        held[test_idx] = fit_score(train_idx, test_idx)
    thresholds = {}
    if inner:
        scores = pipeline_scores(rules, held)
        for src in names:
            mask = sources != src
            thresholds[src] = (calibrate_for_recall(scores[mask], labels[mask], min_recall=min_recall) if max_fp_rate is None
                               else calibrate_threshold(scores[mask], labels[mask], max_fp_rate=max_fp_rate))
    return {"stage2": held, "rules": rules, "labels": labels, "sources": sources, "thresholds": thresholds}


def fit_head(rows: Sequence[dict], embeddings: np.ndarray, *, l2: float = 10.0, threshold: float = 0.5,
             meta: dict | None = None) -> EmbeddingHeadClassifier:
    """The shipped head: fitted on every labelled row the rules do not call global (as in
    `loso_scores`; rule-global rows never reach stage 2)."""
    keep = np.where(rule_verdicts([r["text"] for r in rows], [r.get("turn") for r in rows]) != 1)[0]
    texts = [rows[i]["text"] for i in keep]
    return EmbeddingHeadClassifier.fit(texts, [rows[i]["label"] for i in keep], embeddings=embeddings[keep], l2=l2,
                                       threshold=threshold, meta=meta)
