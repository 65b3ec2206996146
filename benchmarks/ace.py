"""ACE vs the paper's baselines (Vanilla, single-step RAG, retrieve-every-round) on multi-hop QA.

The paper's setting is the default (docs/reports/fidelity.md, section ACE): k = 5 agents voting with
generated replies to the paper's decision prompt, round 1 RETRIEVE without a vote, the search
query written by the model from the working memory, N = 1..8 rounds (Table 2's range; one run
per question yields every N through `answers_by_round`). Baselines on the same model and
retriever: Vanilla (no retrieval, Table 1), RAG (one retrieval = ACE N=1), and retrieve-every-
round with N = --max-rounds (the IterDRAG row); `--all-passages` adds our long-context baseline.

Data through --data: bAbI task files (passages = story sentences before the question) or
HotpotQA-format JSON (passages = paragraphs). Writes <out>.json (table with 95% Wilson
intervals, the paper's numbers, per-question traces) and <out>.png (accuracy vs tokens).

    # capable model (GPU session), the paper's setting:
    python benchmarks/ace.py --model qwen2.5-coder-1.5b --device cuda \
        --data ../shared/data/babi_en_1k/qa2_two-supporting-facts_test.txt --n 100 --out benchmarks/results/ace_qwen
    # smoke run on the embedded 135M model (it cannot follow the decision prompt: constrained votes)
    python benchmarks/ace.py --data ../shared/data/babi_en_1k/qa2_two-supporting-facts_test.txt --n 2 \
        --max-rounds 2 --vote-mode constrained --query-mode memory --out benchmarks/results/ace_smoke
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from rhea.storage import output_file

PAPER_TABLES = Path(__file__).parent / "paper_tables.json"


def paper_ace_tables() -> dict:
    """ACE Tables 1-2 as transcribed in benchmarks/paper_tables.json: {table: {row: {column: value}}}."""
    tables = json.loads(PAPER_TABLES.read_text(encoding="utf-8"))["papers"]["ace"]["tables"]
    return {name: {row["name"]: {c["column"]: c["value"] for c in row["cells"]} for row in t["rows"]}
            for name, t in tables.items()}


def load_items(paths, n, max_passages, seed):
    from rhea.agents.ace.qa import babi_items, hotpot_items

    items = []
    for p in paths:
        got = hotpot_items(p) if p.endswith(".json") else babi_items(p, max_passages=max_passages)
        random.Random(seed).shuffle(got)
        items += got[:n]
    return items


def check_args(args) -> None:
    from rhea.errors import RheaConfigError

    for name in ("n", "max_rounds", "agents", "k", "answer_tokens", "think_tokens", "vote_tokens"):
        if getattr(args, name) < 1:
            raise RheaConfigError(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 1")
    for p in args.data:
        if not Path(p).is_file():
            raise RheaConfigError(f"--data {p}: no such file (a bAbI *_test.txt or a HotpotQA JSON list)")


def run(args, llm=None):
    """Answer every item with every method; `llm` (a `TextGenerator`) replaces the zoo model in tests."""
    check_args(args)
    items = load_items(args.data, args.n, args.max_passages, args.seed)  # validated before the model loads
    import torch

    torch.set_num_threads(args.threads)
    from rhea.agents.ace import ACE, IterativeRetrieval, answer_with_all_passages, answer_without_retrieval, make_retriever
    from rhea.agents.ace.qa import is_correct
    from rhea.backends.embedding import MiniLMEmbedder
    from rhea.backends.llm import HFGenerator
    from rhea.modeling.loading import load_rhea_model

    per_question = previous_questions(args, items)  # checked before the model loads
    done = {rec["id"] for rec in per_question}
    if items and all(item.id in done for item in items):
        write(args, per_question, float(getattr(args, "_seconds_before", 0.0)))  # nothing left: rewrite the table
        return
    if llm is None:
        model = load_rhea_model(args.model, device=args.device).eval()
        # adapters off: the plain base model; rounds re-send the question and memory, so keep the KV prefix
        llm = HFGenerator(model, model.tokenizer, seed=args.seed, prefix_cache=not args.no_prefix_cache)
    embedder = MiniLMEmbedder() if args.retriever == "dense" else None
    common = dict(passages_per_retrieval=args.k, query_mode=args.query_mode, answer_max_new_tokens=args.answer_tokens,
                  think_max_new_tokens=args.think_tokens)

    def add(method, item, ans):
        support = set(item.supporting)
        found = support & set(ans.memory.passage_indices) if support else set()
        return {"method": method, "answer": ans.text, "correct": is_correct(ans.text, item.answer),
                "tokens": ans.trace.tokens.total, "think_tokens": ans.trace.tokens.of("thinking"),
                "support_recall": len(found) / len(support) if support else 0.0, "actions": ans.trace.actions}

    if done:
        print(f"resuming {args.out}: {len(done)} of {len(items)} questions already answered", flush=True)
    start = time.time() - float(getattr(args, "_seconds_before", 0.0))
    for q, item in enumerate(items):
        if item.id in done:
            continue
        if hasattr(llm, "seed"):  # sampling depends on the question only, so a resumed run samples as an unbroken one
            llm.seed = args.seed * 1_000_003 + q * 1_000
        retr = make_retriever(embedder if embedder else "bm25", list(item.passages))
        rec = {"id": item.id, "question": item.question, "gold": item.answer, "results": []}
        rec["results"].append(add("vanilla (no retrieval)", item, answer_without_retrieval(
            llm, item.question, answer_max_new_tokens=args.answer_tokens)))
        if args.all_passages:
            rec["results"].append(add("all passages (ours)", item, answer_with_all_passages(
                llm, list(item.passages), item.question, answer_max_new_tokens=args.answer_tokens)))
        it = IterativeRetrieval(llm, retr, rounds=args.max_rounds, **common).answers_by_round(item.question)
        rec["results"].append(add("rag (1 retrieval)", item, it[0]))
        if args.max_rounds > 1:
            rec["results"].append(add(f"retrieve every round N={args.max_rounds}", item, it[-1]))
        ace = ACE(llm, retr, n_agents=args.agents, rounds=args.max_rounds, vote_mode=args.vote_mode,
                  vote_temperature=args.temperature, vote_max_new_tokens=args.vote_tokens, seed=args.seed + q,
                  **common).answers_by_round(item.question)
        for n, ans in enumerate(ace, 1):
            rec["results"].append(add(f"ace N={n}", item, ans))
        rec["ace_trace"] = ace[-1].to_dict()
        per_question.append(rec)
        print(f"[{q + 1}/{len(items)}] {time.time() - start:.0f}s {item.question} gold={item.answer} "
              f"ace={ace[-1].text!r} actions={ace[-1].trace.actions}", flush=True)
        write(args, per_question, time.time() - start)


# the settings a resumed run must share with the one that wrote the file (--n may grow: the sample is a prefix)
RESUME_KEYS = ("model", "data", "max_passages", "max_rounds", "agents", "k", "retriever", "vote_mode", "query_mode",
               "temperature", "vote_tokens", "answer_tokens", "think_tokens", "all_passages", "seed")


def previous_questions(args, items) -> list:
    """Per-question records of an earlier run with the same settings at --out (resume), else []."""
    from rhea.eval.checkpoint import BenchError, load_resumable

    path = output_file(Path(args.out), ".json")
    saved = None if args.no_resume else load_resumable(path, vars(args), RESUME_KEYS, settings="meta", records="questions")
    if saved is None:
        return []
    if any("think_tokens" not in r for rec in saved["questions"] for r in rec.get("results", [])):
        raise BenchError(f"{path} predates resumable runs (its records lack per-method metrics); "
                         "pass another --out or --no-resume")
    ids = {item.id for item in items}
    args._seconds_before = float(saved["meta"].get("seconds", 0.0))
    return [rec for rec in saved["questions"] if rec["id"] in ids]


def table_rows(per_question) -> list[dict]:
    """Accuracy (95% Wilson), tokens, Think % and support recall per method, from the per-question records."""
    from rhea.eval.fact_recall import wilson

    rows = {}
    for rec in per_question:
        for res in rec["results"]:
            r = rows.setdefault(res["method"], {"correct": 0, "tokens": 0, "think_tokens": 0, "support_recall": 0.0,
                                                "n": 0, "think_rounds": 0, "rounds": 0})
            r["n"] += 1
            r["correct"] += bool(res["correct"])
            r["tokens"] += res["tokens"]
            r["think_tokens"] += res["think_tokens"]
            r["support_recall"] += res["support_recall"]
            r["think_rounds"] += res["actions"].count("THINK")
            r["rounds"] += len(res["actions"])
    table = []
    for method, r in rows.items():
        n = r["n"]
        lo, hi = wilson(r["correct"], n)
        table.append({"method": method, "n": n, "correct": r["correct"], "accuracy": r["correct"] / n,
                      "accuracy_95ci": [round(lo, 3), round(hi, 3)], "avg_tokens": r["tokens"] / n,
                      "think_share": r["think_rounds"] / r["rounds"] if r["rounds"] else 0.0,
                      "think_token_share": r["think_tokens"] / r["tokens"] if r["tokens"] else 0.0,
                      "support_recall": r["support_recall"] / n})
    return table


def paired_vs(per_question, baseline: str) -> dict:
    """Each method's accuracy minus `baseline`'s on the same questions: difference, 95% bootstrap interval, sign-flip p."""
    from rhea.eval.stats import paired_comparison

    by_method: dict[str, dict[str, float]] = {}
    for rec in per_question:
        for res in rec["results"]:
            by_method.setdefault(res["method"], {})[rec["id"]] = float(bool(res["correct"]))
    if baseline not in by_method or len(per_question) < 2:
        return {}
    return {m: paired_comparison(v, by_method[baseline]).to_dict() for m, v in by_method.items() if m != baseline}


def write(args, per_question, seconds):
    table = table_rows(per_question)
    for row in table:  # ACE is RAG plus rounds: how much each setting adds on the same questions
        row["accuracy_minus_rag"] = paired_vs(per_question, "rag (1 retrieval)").get(row["method"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    meta.update(n_questions=len(per_question), seconds=round(seconds, 1),
                accuracy="normalised gold answer occurs as a whole-word span of the prediction; 95% Wilson interval",
                think_share="the paper's Think %: THINK rounds / rounds (round 1 is RETRIEVE, unvoted)",
                think_token_share="ours: share of tokens spent on THINK steps",
                tokens="prompt+completion of every call per question, from the generator's counters (chat template "
                       "included); constrained votes score the decision prompt once per round",
                paper="LLaMA-3.1-8B-Instruct on MultiHop-RAG / HotpotQA / 2WikiQA (benchmarks/paper_tables.json)",
                paper_tables=paper_ace_tables())
    output_file(out, ".json").write_text(json.dumps({"meta": meta, "table": table, "questions": per_question}, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for row in table:
            lo, hi = row["accuracy_95ci"]
            ax.errorbar(row["avg_tokens"], row["accuracy"], yerr=[[row["accuracy"] - lo], [hi - row["accuracy"]]],
                        fmt="o", capsize=2)
            ax.annotate(row["method"], (row["avg_tokens"], row["accuracy"]), fontsize=7)
        ax.set_xlabel("avg tokens / question"); ax.set_ylabel("accuracy (95% Wilson)")
        ax.set_title(f"ACE on {Path(args.data[0]).stem} ({table[0]['n']} q, {args.model})", fontsize=9)
        fig.tight_layout(); fig.savefig(output_file(out, ".png"), dpi=120); plt.close(fig)
    except ImportError:
        print("matplotlib is not installed: wrote the JSON only (pip install matplotlib for the PNG)")


def main(argv=None):
    from rhea.modeling.loading import add_device_argument

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="zoo name (smollm2-135m, qwen2.5-coder-1.5b) or a directory")
    add_device_argument(ap)
    ap.add_argument("--data", action="append", required=True, help="bAbI task file or HotpotQA JSON (repeatable)")
    ap.add_argument("--n", type=int, default=20, help="questions per data file (random sample)")
    ap.add_argument("--max-passages", type=int, default=20, help="skip bAbI questions with more facts before them")
    ap.add_argument("--max-rounds", type=int, default=8, help="N; answers for every N=1..max (paper Table 2: 1..8)")
    ap.add_argument("--agents", type=int, default=5, help="k voting agents (paper: 5)")
    ap.add_argument("--k", type=int, default=3, help="passages per retrieval (the paper does not say)")
    ap.add_argument("--retriever", choices=["bm25", "dense"], default="bm25")
    ap.add_argument("--vote-mode", choices=["generate", "constrained"], default="generate",
                    help="generate: each agent answers the paper's prompt (the paper); constrained: label log-probs "
                         "(for models too small to answer it)")
    ap.add_argument("--query-mode", choices=["llm", "memory"], default="llm",
                    help="llm: the model writes the search query from M_i (the paper); memory: question + memory text")
    ap.add_argument("--temperature", type=float, default=0.7, help="vote sampling temperature (the paper does not say)")
    ap.add_argument("--vote-tokens", type=int, default=24)
    ap.add_argument("--answer-tokens", type=int, default=16)
    ap.add_argument("--think-tokens", type=int, default=32)
    ap.add_argument("--all-passages", action="store_true", help="add our every-passage-in-context baseline")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/ace")
    ap.add_argument("--no-prefix-cache", action="store_true",
                        help="recompute every prompt in full (default: each generator keeps the KV cache of its last call "
                             "and prefills only the new tokens; same replies, rhea.backends.llm.HFGenerator)")
    ap.add_argument("--no-resume", action="store_true",
                    help="start over even if --out holds a run with the same settings (default: resume it)")
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
