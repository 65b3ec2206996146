"""ACE vs vanilla / single-step RAG / retrieve-every-round on multi-hop QA.

Data through --data: bAbI task files (e.g. qa2_two-supporting-facts_test.txt; passages =
story sentences before the question) or HotpotQA-format JSON (passages = paragraphs).
For N = 1..max_rounds one run per question yields every N (`answers_by_round`).
Writes <out>.json (table + per-question traces) and <out>.png (accuracy vs tokens).

    .venv/bin/python benchmarks/ace.py --data /path/qa2_two-supporting-facts_test.txt --n 20
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path


def load_items(paths, n, max_passages, seed):
    from rhea.agents.ace.qa import babi_items, hotpot_items

    items = []
    for p in paths:
        got = hotpot_items(p) if p.endswith(".json") else babi_items(p, max_passages=max_passages)
        random.Random(seed).shuffle(got)
        items += got[:n]
    return items


def run(args):
    import torch

    torch.set_num_threads(args.threads)
    from rhea import load_default_model
    from rhea.agents.ace import ACE, IterativeRetrieval, answer_with_all_passages, make_retriever
    from rhea.agents.ace.qa import is_correct
    from rhea.backends.embedding import MiniLMEmbedder
    from rhea.backends.llm import HFGenerator

    model, tok = load_default_model()
    llm = HFGenerator(model.eval(), tok, seed=args.seed)
    embedder = MiniLMEmbedder() if args.retriever == "dense" else None
    common = dict(passages_per_retrieval=args.k, query_mode=args.query_mode, answer_max_new_tokens=args.answer_tokens,
                  think_max_new_tokens=args.think_tokens)
    rows, per_question = {}, []

    def add(method, item, ans):
        support = set(item.supporting)
        found = support & set(ans.memory.passage_indices) if support else set()
        r = rows.setdefault(method, {"correct": 0, "tokens": 0, "think_tokens": 0, "support_recall": 0.0, "n": 0, "think_rounds": 0, "rounds": 0})
        r["n"] += 1
        r["correct"] += is_correct(ans.text, item.answer)
        r["tokens"] += ans.trace.tokens.total
        r["think_tokens"] += ans.trace.tokens.of("thinking")
        r["support_recall"] += len(found) / len(support) if support else 0.0
        r["think_rounds"] += ans.trace.actions.count("THINK")
        r["rounds"] += len(ans.trace.actions)
        return {"method": method, "answer": ans.text, "correct": is_correct(ans.text, item.answer), "tokens": ans.trace.tokens.total}

    items = load_items(args.data, args.n, args.max_passages, args.seed)
    start = time.time()
    for q, item in enumerate(items):
        retr = make_retriever(embedder if embedder else "bm25", list(item.passages))
        rec = {"id": item.id, "question": item.question, "gold": item.answer, "results": []}
        rec["results"].append(add("vanilla", item, answer_with_all_passages(llm, list(item.passages), item.question,
                                                                             answer_max_new_tokens=args.answer_tokens)))
        it = IterativeRetrieval(llm, retr, rounds=args.max_rounds, **common).answers_by_round(item.question)
        for n, ans in enumerate(it, 1):
            rec["results"].append(add("rag" if n == 1 else f"iter-retrieve N={n}", item, ans))
        ace = ACE(llm, retr, n_agents=args.agents, rounds=args.max_rounds, vote_mode=args.vote_mode,
                  vote_temperature=args.temperature, seed=args.seed + q, **common).answers_by_round(item.question)
        for n, ans in enumerate(ace, 1):
            rec["results"].append(add(f"ace N={n}", item, ans))
        rec["ace_trace"] = ace[-1].to_dict()
        per_question.append(rec)
        print(f"[{q + 1}/{len(items)}] {time.time() - start:.0f}s {item.question} gold={item.answer} "
              f"ace={ace[-1].text!r} actions={ace[-1].trace.actions}", flush=True)
        write(args, rows, per_question, time.time() - start)


def write(args, rows, per_question, seconds):
    table = []
    for method, r in rows.items():
        n = r["n"]
        table.append({"method": method, "n": n, "accuracy": r["correct"] / n, "avg_tokens": r["tokens"] / n,
                      "think_share": r["think_tokens"] / r["tokens"] if r["tokens"] else 0.0,
                      "think_round_share": r["think_rounds"] / r["rounds"] if r["rounds"] else 0.0,
                      "support_recall": r["support_recall"] / n})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {k: v for k, v in vars(args).items()}
    meta.update(model="SmolLM2-135M-Instruct (embedded)", seconds=round(seconds, 1),
                accuracy="normalised gold answer occurs as a whole-word span of the prediction",
                tokens="prompt+completion per question, from the generator's counters; constrained votes score the "
                       "decision prompt once per round")
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "table": table, "questions": per_question}, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for row in table:
            ax.scatter(row["avg_tokens"], row["accuracy"])
            ax.annotate(row["method"], (row["avg_tokens"], row["accuracy"]), fontsize=7)
        ax.set_xlabel("avg tokens / question"); ax.set_ylabel("accuracy")
        ax.set_title(f"ACE on {Path(args.data[0]).stem} ({table[0]['n']} q, SmolLM2-135M)", fontsize=9)
        fig.tight_layout(); fig.savefig(out.with_suffix(".png"), dpi=120); plt.close(fig)
    except ImportError:
        print("matplotlib is not installed: wrote the JSON only (pip install matplotlib for the PNG)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", required=True, help="bAbI task file or HotpotQA JSON (repeatable)")
    ap.add_argument("--n", type=int, default=20, help="questions per data file (random sample)")
    ap.add_argument("--max-passages", type=int, default=20, help="skip bAbI questions with more facts before them")
    ap.add_argument("--max-rounds", type=int, default=5)
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--k", type=int, default=2, help="passages per retrieval")
    ap.add_argument("--retriever", choices=["bm25", "dense"], default="bm25")
    ap.add_argument("--vote-mode", choices=["generate", "constrained"], default="constrained")
    ap.add_argument("--query-mode", choices=["llm", "memory"], default="memory")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--answer-tokens", type=int, default=8)
    ap.add_argument("--think-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/ace")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
