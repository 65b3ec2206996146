"""Instruction recognizer: leave-one-source-out precision/recall, per source, + operating point.

Scores the packaged labelled set (`rhea/data/recognizer_labelled.jsonl.gz`, built by
`scripts/build_recognizer_set.py`) the way the rhea policy decides, stage 2 trained WITHOUT
the source being scored (leave-one-source-out, LOSO), each message read at its turn in its
conversation (a first message's bare constraints are standing), the threshold calibrated on
the held-out scores of the other sources only, for recall >= --min-recall (0.95) at the best
precision: the paper's operating point (a missed rule collapses adherence, a spurious one
costs little). Compares: rules only, rules + MiniLM head (default),
rules + hashed n-gram classifier, and optionally the paper's YES/NO prompt alone and behind
the rules on any zoo model (a stratified held-out sample). Writes <out>.json and <out>.png (PR curve per source,
chosen operating point).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python benchmarks/recognizer.py \
        --out benchmarks/results/recognizer [--write-head] [--policy-path]

The paper's YES/NO prompt alone and behind the rules on the capable model:

    ... benchmarks/recognizer.py --prompted-only --prompted 240 --prompted-model qwen2.5-coder-1.5b \\
        --prompted-budget-s 2700 --prompted-out benchmarks/results/recognizer_prompted_qwen.json \\
        --reply-cache /tmp/qwen_replies.json

--write-head refits the shipped head on all rows and stores it, with the threshold
calibrated on the pooled LOSO scores (recall >= --min-recall at the best precision), in
rhea/data/recognizer_head.json. --max-fp-rate F calibrates for a false-positive cap instead.
"""
from __future__ import annotations

import argparse
import json
import pickle
import time
from pathlib import Path

import numpy as np
from rhea.storage import output_file

REAL_EXCLUDED = ("rhea_v1", "authored_v2", "authored_v3", "authored_v4")  # hand-written sources: train only in the "real" pooled view


def _embeddings(texts, cache: str | None):
    from rhea.memory.recognizer import embed

    store = {}
    if cache and Path(cache).exists():
        store = pickle.loads(Path(cache).read_bytes())
    todo = [t for t in dict.fromkeys(texts) if t not in store]
    t0 = time.perf_counter()
    if todo:
        store.update(zip(todo, embed(todo)))
        if cache:
            Path(cache).write_bytes(pickle.dumps(store))
    return np.stack([store[t] for t in texts]), len(todo), time.perf_counter() - t0


def _round(d):
    if isinstance(d, dict):
        return {k: _round(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_round(v) for v in d]
    if isinstance(d, float):
        return round(d, 4)
    return d


def evaluate_variant(name, rows, stage2, rules, thresholds, fixed=None):
    """Per-source and pooled metrics of one variant at its per-source (LOSO-calibrated) threshold."""
    from rhea.memory.recognizer_eval import counts_at, pipeline_scores, pr_curve, wilson

    labels = np.array([r["label"] for r in rows])
    sources = np.array([r["source"] for r in rows])
    scores = pipeline_scores(rules, stage2)
    pred = np.zeros(len(rows), dtype=bool)
    per = {}
    for src in sorted(set(sources.tolist())):
        m = sources == src
        t = fixed if fixed is not None else thresholds[src]
        c = counts_at(scores[m], labels[m], t)
        pred[m] = scores[m] >= t
        c["threshold"] = t
        c["fp_rate_ci95"] = wilson(c["fp"], c["fp"] + c["tn"])
        if c["tp"] + c["fn"]:
            c["recall_ci95"] = wilson(c["tp"], c["tp"] + c["fn"])
        c["pr_curve"] = pr_curve(scores[m], labels[m])
        per[src] = c

    def pooled(mask):
        y = labels[mask].astype(bool)
        p = pred[mask]
        tp, fp, fn, tn = int((p & y).sum()), int((p & ~y).sum()), int((~p & y).sum()), int((~p & ~y).sum())
        return {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / (tp + fn) if tp + fn else float("nan"),
                "precision_ci95": wilson(tp, tp + fp), "recall_ci95": wilson(tp, tp + fn),
                "fp_rate": fp / (fp + tn), "fp_rate_ci95": wilson(fp, fp + tn), "tp": tp, "fp": fp, "fn": fn, "tn": tn}

    real = ~np.isin(sources, REAL_EXCLUDED)
    errors = [{"source": rows[i]["source"], "id": rows[i]["id"], "label": int(labels[i]), "score": float(scores[i]),
               "text": rows[i]["text"][:200]} for i in np.where(pred != labels.astype(bool))[0]]
    return {"name": name, "pooled_real_sources": pooled(real), "pooled_all_sources": pooled(np.ones(len(rows), bool)),
            "per_source": per, "errors": errors}


def prompted_sample(rows, n):
    """A stratified held-out sample of `n` rows for a prompted stage 2 (the prompt is zero-shot,
    so every row is held out): every positive of the real sources, then the hand-written
    sources' rows spread over their categories, two negatives to a positive (their negatives are the hard ones: one-off
    requests, questions about rules, quoted and reported instructions, false cues), then an
    even spread of the real sources' negatives; interleaved so that every prefix keeps the
    proportions. Deterministic."""
    def spread(pool, k):
        by_cat = {}
        for r in pool:
            by_cat.setdefault((r["source"], r["label"], r.get("category")), []).append(r)
        picked, groups = [], [g for _, g in sorted(by_cat.items(), key=lambda kv: str(kv[0]))]
        while len(picked) < k and any(groups):
            for g in groups:
                if g and len(picked) < k:
                    picked.append(g.pop(len(g) // 2))
        return picked

    real = [r for r in rows if r["source"] not in REAL_EXCLUDED]
    pos = [r for r in real if r["label"]][:n]
    rest = n - len(pos)
    hand_rows = [r for r in rows if r["source"] in REAL_EXCLUDED]
    hand = spread([r for r in hand_rows if not r["label"]], rest * 2 // 5) + spread([r for r in hand_rows if r["label"]], rest // 5)
    neg = spread([r for r in real if not r["label"]], rest - len(hand))
    # interleaved in proportion, so that any prefix of the sample is itself stratified
    strata = [pos, hand, neg]
    order = sorted(((k + 0.5) / len(g), i, k) for i, g in enumerate(strata) for k in range(len(g)))
    return [strata[i][k] for _, i, k in order]


def prompted_subset(rows, n, threads, model_name="smollm2-135m", reply_cache=None, budget_s=None):
    """The paper's YES/NO prompt (`PAPER_PROMPT`, parsed by `parse_yes_no`) on `model_name`
    (a zoo name or a local model directory; plain base model, greedy, a kept prefix cache so
    the fixed prompt is prefilled once) for a stratified sample of `n` rows (`prompted_sample`),
    alone and behind the rules (the default pipeline's stage 1, then the prompt only where no
    rule decided, each row at its turn). `reply_cache` (a JSON file, text -> reply) reuses
    replies of an earlier run of the same model, so the rules can be rescored without it.
    `budget_s` stops generating after that many seconds; the rows answered by then (a prefix
    of the interleaved sample, so still stratified) are scored and the rest counted as left."""
    import torch

    torch.set_num_threads(threads)
    from rhea.memory.recognizer import InstructionRecognizer, PromptClassifier, parse_yes_no

    subset = prompted_sample(rows, n)
    cache_path = Path(reply_cache) if reply_cache else None
    cache = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    key = lambda text: f"{model_name}\t{text}"
    todo = [r for r in subset if key(r["text"]) not in cache]
    t0, load_s = time.perf_counter(), 0.0
    if todo:
        from rhea.backends.llm import HFGenerator
        from rhea.modeling.zoo import load_base_model

        model, tok = load_base_model(model_name)
        load_s = time.perf_counter() - t0
        clf = PromptClassifier(HFGenerator(model.eval(), tok, prefix_cache=True))
        t0 = time.perf_counter()
        for i, r in enumerate(todo):
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                break
            with torch.inference_mode():
                clf(r["text"])
            cache[key(r["text"])] = clf.last_reply
            if cache_path and (i % 10 == 9 or i == len(todo) - 1):
                tmp = cache_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(cache, ensure_ascii=False, indent=0) + "\n")
                tmp.replace(cache_path)
    gen_s = time.perf_counter() - t0
    generated = sum(key(r["text"]) in cache for r in todo)
    answered = 0
    while answered < len(subset) and key(subset[answered]["text"]) in cache:
        answered += 1
    left = len(subset) - answered
    subset = subset[:answered]
    verdict = {r["text"]: parse_yes_no(cache[key(r["text"])]) for r in subset}
    behind = InstructionRecognizer(lambda text: float(bool(verdict.get(text))), threshold=0.5)
    pos = sum(r["label"] for r in subset)
    out = {"n": len(subset), "n_asked": n, "left_unanswered": left, "positives": pos, "model": f"{model_name} (plain base model, greedy, 1 reply of <= 4 tokens)",
           "prompt": "PAPER_PROMPT (Rhea appendix B)", "parse": "first word 'yes' or 'no', any case or punctuation",
           "sample": "every real-source positive, hand-written rows spread over categories (hard negatives), "
                     "real-source negatives spread over sources and categories",
           "unparsed": sum(v is None for v in verdict.values()),
           "per_source": {}, "rows": []}
    counts = {"alone": [0, 0, 0, 0], "behind_rules": [0, 0, 0, 0]}
    for r in subset:
        y = bool(r["label"])
        hit = bool(verdict[r["text"]])
        d = behind(r["text"], r.get("turn"))
        for name, h in (("alone", hit), ("behind_rules", d.is_global)):
            counts[name][0 if h and y else 1 if h else 2 if y else 3] += 1
        src = out["per_source"].setdefault(r["source"], {"rows": 0, "positives": 0, "alone_errors": 0, "behind_rules_errors": 0})
        src["rows"] += 1
        src["positives"] += y
        src["alone_errors"] += hit != y
        src["behind_rules_errors"] += d.is_global != y
        out["rows"].append({"source": r["source"], "id": r["id"], "category": r.get("category"), "label": r["label"],
                            "reply": cache[key(r["text"])], "alone": hit, "behind_rules": d.is_global,
                            "decided_by": d.source})
    from rhea.memory.recognizer_eval import wilson

    for name, (tp, fp, fn, tn) in counts.items():
        out[name] = {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / (tp + fn) if tp + fn else float("nan"),
                     "precision_ci95": wilson(tp, tp + fp), "recall_ci95": wilson(tp, tp + fn),
                     "tp": tp, "fp": fp, "fn": fn, "tn": tn}
    out["model_load_s"] = load_s
    out["s_per_message"] = gen_s / generated if generated else None
    out["generated"] = generated
    return out


def policy_path(rows, loso, l2):
    """LOSO through the rhea policy itself: for each source, a `RheaPolicy` on a tiny random
    model whose recognizer is the default pipeline with the head fitted without that source
    (and its LOSO-calibrated threshold); a row counts as global when `build(conversation,
    message)` puts an instruction into the plan, the conversation empty for a first message
    (turn 0) and one ordinary earlier turn otherwise. The head reads each labelled message's
    MiniLM embedding from the benchmark's table (the same `embed` output; any other text, such
    as a sentence of a message, is embedded as the policy would). Also counts disagreements with
    the fast scoring above (0 means the benchmark scores what the policy does)."""
    from rhea.context import Conversation, Turn
    from rhea.policies import get_policy
    from rhea.memory.recognizer import EmbeddingHeadClassifier, InstructionRecognizer, fit_logistic, head_inputs
    from rhea.memory.recognizer_eval import pipeline_scores
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    texts = [r["text"] for r in rows]
    labels, sources, rules = loso["labels"], loso["sources"], loso["rules"]
    emb = loso["embeddings"]
    table = {t: emb[i] for i, t in enumerate(texts)}

    class TabledHead(EmbeddingHeadClassifier):
        def __call__(self, text: str) -> float:
            if text in table:
                return float(self.scores([text], table[text][None])[0])
            return super().__call__(text)

    fast = pipeline_scores(rules, loso["stage2"])
    got = np.zeros(len(rows), dtype=bool)
    disagree = []
    t0 = time.perf_counter()
    for src in sorted(set(sources.tolist())):
        train = np.where((sources != src) & (rules != 1))[0]
        w, b = fit_logistic(head_inputs(emb[train], [texts[i] for i in train]), labels[train], l2=l2)
        rec = InstructionRecognizer(TabledHead(w, b, loso["thresholds"][src]))
        for i in np.where(sources == src)[0]:
            policy = get_policy("rhea", model=model, recognizer=rec)
            history = [] if rows[i].get("turn") == 0 else [Turn("Hello, I have a question.", "Sure, go ahead.")]
            plan = policy.build(Conversation(history), texts[i])
            got[i] = bool(plan.decisions.instructions)
            if got[i] != (fast[i] >= loso["thresholds"][src]):
                disagree.append({"source": src, "id": rows[i]["id"], "text": texts[i][:120]})
    real = ~np.isin(sources, REAL_EXCLUDED)
    out = {}
    views = [("real_sources", real), ("all_sources", np.ones(len(rows), bool))]
    views += [(f"source:{src}", sources == src) for src in sorted(set(sources.tolist()))]
    for name, m in views:
        y = labels[m].astype(bool)
        g = got[m]
        tp, fp, fn = int((g & y).sum()), int((g & ~y).sum()), int((~g & y).sum())
        out[name] = {"precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": tp / (tp + fn) if tp + fn else float("nan"),
                     "tp": tp, "fp": fp, "fn": fn, "tn": int((~g & ~y).sum())}
    out["disagreements_with_fast_scoring"] = disagree
    out["s_per_message"] = (time.perf_counter() - t0) / len(rows)
    return out


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    default = result["variants"]["rules+minilm"]
    srcs = [s for s, c in default["per_source"].items() if c["tp"] + c["fn"] > 0]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    ax = axes[0]
    for s in srcs:
        curve = default["per_source"][s]["pr_curve"]
        ax.plot([c["recall"] for c in curve], [c["precision"] for c in curve], marker=".", label=s)
        op = default["per_source"][s]
        ax.scatter([op["recall"]], [op["precision"]], s=80, edgecolors="k", zorder=5)
    ax.set_xlabel("recall"); ax.set_ylabel("precision"); ax.set_xlim(0, 1.02); ax.set_ylim(0, 1.02)
    ax.set_title("rules + MiniLM head, LOSO: PR per source with positives\n(circle = calibrated operating point)")
    ax.axhline(0.9, color="grey", ls=":"); ax.axvline(0.9, color="grey", ls=":")
    ax.legend(fontsize=8)
    ax = axes[1]
    names = list(result["variants"])
    allsrc = list(default["per_source"])
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        fpr = [100 * result["variants"][n]["per_source"][s]["fp_rate"] for s in allsrc]
        ax.bar(np.arange(len(allsrc)) + i * width, fpr, width, label=n)
    ax.set_xticks(np.arange(len(allsrc)) + 0.4); ax.set_xticklabels(allsrc, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("false-positive rate (% of non-instructions kept)"); ax.set_title("per-source false-positive rate (LOSO)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results/recognizer", help="output path without extension")
    ap.add_argument("--cache", default=None, help="pickle of text -> MiniLM embedding, reused across runs")
    ap.add_argument("--min-recall", type=float, default=0.95,
                    help="calibration target: the highest threshold whose held-out recall is at least this (default 0.95)")
    ap.add_argument("--max-fp-rate", type=float, default=None,
                    help="calibrate for a false-positive cap instead (share of ordinary messages taken for standing rules)")
    ap.add_argument("--l2", type=float, default=10.0, help="L2 strength of the head (in examples; 10 measured best under LOSO of 1, 10, 100)")
    ap.add_argument("--write-head", action="store_true", help="refit the shipped head on all rows (rhea/data/recognizer_head.json)")
    ap.add_argument("--prompted", type=int, default=0, help="also the paper's YES/NO prompt as stage 2 on --prompted-model for this many rows")
    ap.add_argument("--prompted-model", default="smollm2-135m", help="zoo name or local directory of the prompted model")
    ap.add_argument("--reply-cache", default=None, help="JSON of the prompted model's replies, reused and extended")
    ap.add_argument("--prompted-budget-s", type=float, default=None,
                    help="stop the prompted model after this many seconds and score the rows answered by then")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompted-only", action="store_true", help="only the --prompted run, written to --prompted-out")
    ap.add_argument("--prompted-out", default=None, help="where --prompted-only writes (default <out>_prompted.json)")
    ap.add_argument("--policy-path", action="store_true",
                    help="also run every row through RheaPolicy.build with the LOSO head (slow: embeds each message again)")
    args = ap.parse_args(argv)
    if args.prompted_only and args.prompted <= 0:
        raise SystemExit("--prompted-only needs --prompted N (N > 0 rows)")
    if args.max_fp_rate is not None and not 0.0 <= args.max_fp_rate < 0.5:
        raise SystemExit(f"--max-fp-rate={args.max_fp_rate} must be in [0, 0.5)")
    if not 0.0 < args.min_recall <= 1.0:
        raise SystemExit(f"--min-recall={args.min_recall} must be in (0, 1]")

    from rhea.memory.recognizer import HEAD_FILE, _data_path, load_labelled
    from rhea.memory.recognizer_eval import (calibrate_for_recall, calibrate_threshold, fit_head, loso_scores,
                                             pipeline_scores, rule_verdicts)

    calibration = (f"recall >= {args.min_recall} at the best precision" if args.max_fp_rate is None
                   else f"lowest threshold >= 0.5 whose false-positive rate is <= {args.max_fp_rate}")

    t0 = time.perf_counter()
    rows = load_labelled()
    if args.prompted_only:  # no embeddings needed
        res = prompted_subset(rows, args.prompted, args.threads, args.prompted_model, args.reply_cache,
                              args.prompted_budget_s)
        path = Path(args.prompted_out or args.out + "_prompted.json")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(_round(res), indent=1, ensure_ascii=False) + "\n")
        tmp.replace(path)
        print(json.dumps(_round({k: v for k, v in res.items() if k != "rows"}), indent=1))
        return
    texts = [r["text"] for r in rows]
    emb, n_new, emb_s = _embeddings(texts, args.cache)
    result = {"rows": len(rows), "positives": int(sum(r["label"] for r in rows)),
              "per_source_rows": {}, "protocol": (
                  "leave-one-source-out: stage 2 fitted on all other sources, scored on the held-out one, each row at its turn; "
                  f"each source's threshold calibrated ({calibration}) on the held-out scores of "
                  "all OTHER sources, never on its own. Stage 2 is trained on the rows the rules do not call global. The rules "
                  "need no training, but were written after reading every source: their numbers are in-sample. 'pooled_real_sources' pools the held-out predictions of "
                  f"every source except the hand-written {list(REAL_EXCLUDED)}."),
              "variants": {}}
    for r in rows:
        c = result["per_source_rows"].setdefault(r["source"], {"rows": 0, "positives": 0})
        c["rows"] += 1
        c["positives"] += r["label"]
    rules = rule_verdicts(texts, [r.get("turn") for r in rows])
    result["variants"]["rules-only"] = evaluate_variant("rules-only", rows, None, rules, None, fixed=0.5)
    loso = loso_scores(rows, emb, model="minilm", l2=args.l2, max_fp_rate=args.max_fp_rate, min_recall=args.min_recall)
    loso["embeddings"] = emb
    result["variants"]["rules+minilm"] = evaluate_variant("rules+minilm", rows, loso["stage2"], rules, loso["thresholds"])
    ng = loso_scores(rows, None, model="ngram", inner=False)
    result["variants"]["rules+ngram@0.5"] = evaluate_variant("rules+ngram@0.5", rows, ng["stage2"], rules, None, fixed=0.5)
    pooled_scores = pipeline_scores(rules, loso["stage2"])
    shipped_t = (calibrate_for_recall(pooled_scores, loso["labels"], min_recall=args.min_recall) if args.max_fp_rate is None
                 else calibrate_threshold(pooled_scores, loso["labels"], max_fp_rate=args.max_fp_rate))
    result["shipped_threshold"] = shipped_t
    result["loso_thresholds"] = loso["thresholds"]
    if args.write_head:
        head = fit_head(rows, emb, l2=args.l2, threshold=shipped_t, meta={
            "rows": len(rows), "l2": args.l2, "threshold_from": f"pooled LOSO scores, {calibration}",
            "built_by": "benchmarks/recognizer.py --write-head"})
        _data_path(HEAD_FILE).write_text(json.dumps(head.to_dict()) + "\n", encoding="utf-8")
        result["head_written"] = str(_data_path(HEAD_FILE))
    # cost per message of the default stage 2 (embedding one message + head), warm
    from rhea.memory.recognizer import EmbeddingHeadClassifier, embed, fit_logistic, head_inputs

    w, b = fit_logistic(head_inputs(emb, texts), loso["labels"], l2=args.l2)
    head = EmbeddingHeadClassifier(w, b)
    sample = texts[:: max(1, len(texts) // 50)][:50]
    embed(["warm up"])
    t1 = time.perf_counter()
    for t in sample:
        head(t)
    result["stage2_ms_per_message"] = 1000 * (time.perf_counter() - t1) / len(sample)
    result["embedding_s"] = {"new_texts": n_new, "seconds": emb_s}
    if args.policy_path:
        result["policy_path_loso"] = policy_path(rows, loso, args.l2)
    if args.prompted:
        result["prompted"] = prompted_subset(rows, args.prompted, args.threads, args.prompted_model, args.reply_cache,
                              args.prompted_budget_s)
    result["wall_s"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_file(out, ".json").write_text(json.dumps(_round(result), indent=1, ensure_ascii=False) + "\n")
    plot(result, output_file(out, ".png"))
    brief = {n: {view: {k: _round(v[view][k]) for k in ("precision", "recall", "tp", "fp", "fn")}
                 for view in ("pooled_real_sources", "pooled_all_sources")} for n, v in result["variants"].items()}
    if "policy_path_loso" in result:
        brief["policy_path_loso"] = {k: {m: _round(v[m]) for m in ("precision", "recall", "tp", "fp", "fn")}
                                     for k, v in result["policy_path_loso"].items() if isinstance(v, dict)}
    print(json.dumps({"pooled_real_sources": brief, "shipped_threshold": shipped_t,
                      "stage2_ms_per_message": round(result["stage2_ms_per_message"], 1)}, indent=1))


if __name__ == "__main__":
    main()
