"""Speed-up from advancing K episodes of one policy together (`rhea bench --batch-episodes K`).

    OMP_NUM_THREADS=1 python benchmarks/batched_episodes.py [--model smollm2-135m] [--episodes 8] \
        [--turns 4] [--k 1,2,4,8] [--policies vanilla,rhea] [--max-new-tokens 32] \
        [--out benchmarks/results/batched_episodes]

Runs the instruction-retention suite (3 instructions, 1 revoked) for each policy with every
K (``--suite long-horizon --judge-local MODEL``: chained MT-Bench questions, every reply rated by
a local judge, K episodes' replies of a turn rated in one batch too; ``--judge-max-new-tokens``), timing the whole run (wall clock, and the process's CPU time: on a shared machine the
single-threaded CPU time is the steadier measure of the work) and checking the replies
against K=1's. Writes
``<out>.json`` and ``<out>.png`` (seconds per episode-turn and speed-up against K). Greedy
decoding; a different K may change a reply in the last bits of the logits (padding changes
the reduction order), which the JSON counts.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rhea.storage import output_file  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--k", default="1,2,4,8")
    parser.add_argument("--policies", default="vanilla,rhea")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--suite", default="instruction-retention", choices=("instruction-retention", "long-horizon"))
    parser.add_argument("--judge-local", default=None, metavar="MODEL",
                        help="long-horizon: rate every reply with this local model (adapters off; the benched model "
                             "itself when the names match)")
    parser.add_argument("--judge-max-new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/batched_episodes"))
    args = parser.parse_args(argv)
    if args.judge_local and args.suite != "long-horizon":
        parser.error("--judge-local rates long-horizon replies; pass --suite long-horizon")
    ks = [int(k) for k in args.k.split(",")]
    if 1 not in ks or any(k < 1 for k in ks):
        parser.error("--k must list integers >= 1 and include 1 (the baseline)")

    import torch

    from rhea.backends.llm import HFGenerator
    from rhea.eval.judge import Judge
    from rhea.eval.runner import run_suite
    from rhea.modeling.loading import load_rhea_model

    model = load_rhea_model(args.model, device=args.device).eval()
    judge_model = None
    if args.judge_local:
        judge_model = model if args.judge_local == args.model else load_rhea_model(args.judge_local,
                                                                                   device=args.device).eval()
    if args.suite == "instruction-retention":
        suite_kwargs, quality = {"n_instructions": 3, "n_revoke": 1}, "iar"
    else:
        suite_kwargs, quality = {"n_facts": 1}, "judge_mean"
    rows = []
    for policy in args.policies.split(","):
        replies_k1 = None
        for k in sorted(ks):
            kwargs = dict(suite_kwargs)
            if judge_model is not None:  # the judge batches what the runner hands it: K replies of one turn
                kwargs["judge"] = Judge(HFGenerator(judge_model), max_new_tokens=args.judge_max_new_tokens,
                                        batch_size=k)
            t0, c0 = time.perf_counter(), time.process_time()
            result = run_suite(model, args.suite, [policy], n_turns=args.turns, n_episodes=args.episodes,
                               suite_kwargs=kwargs, max_new_tokens=args.max_new_tokens,
                               progress=False, batch_episodes=k, model_name=args.model)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            turns = result["policies"][policy]["turns"]
            replies = [r["reply"] for r in turns]
            if k == 1:
                replies_k1 = replies
            same = sum(a == b for a, b in zip(replies, replies_k1))
            rows.append({"policy": policy, "k": k, "wall_s": wall, "cpu_s": cpu, "episode_turns": len(turns),
                         "s_per_episode_turn": wall / len(turns), "cpu_s_per_episode_turn": cpu / len(turns),
                         "new_tokens": sum(r.get("new_tokens") or 0 for r in turns),
                         quality: result["policies"][policy]["aggregate"][quality],
                         "replies_same_as_k1": same})
            if judge_model is not None:
                ratings = [r.get("judge_rating") for r in turns]
                if k == 1:
                    ratings_k1 = ratings
                rows[-1]["ratings_same_as_k1"] = sum(a == b for a, b in zip(ratings, ratings_k1))
                rows[-1]["judged_replies"] = sum(r is not None for r in ratings)
            print(json.dumps(rows[-1]), flush=True)
    for row in rows:
        base = next(r for r in rows if r["policy"] == row["policy"] and r["k"] == 1)
        row["speedup_vs_k1"] = base["wall_s"] / row["wall_s"]
        row["cpu_speedup_vs_k1"] = base["cpu_s"] / row["cpu_s"]
    meta = {"model": args.model, "device": args.device, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "machine": platform.machine(), "episodes": args.episodes, "turns": args.turns,
            "max_new_tokens": args.max_new_tokens,
            "suite": ("instruction-retention (3 instructions, 1 revoked)" if args.suite == "instruction-retention"
                      else f"long-horizon (1 planted fact), judge {args.judge_local or 'none'}"
                           + (f" ({args.judge_max_new_tokens} new tokens)" if args.judge_local else "")),
            "command": "python benchmarks/batched_episodes.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    output_file(args.out, ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    plot(rows, meta, output_file(args.out, ".png"))
    return 0


def plot(rows, meta, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        a.plot([r["k"] for r in mine], [r["cpu_s_per_episode_turn"] for r in mine], marker="o", label=f"{policy} (CPU s)")
        a.plot([r["k"] for r in mine], [r["s_per_episode_turn"] for r in mine], marker="x", linestyle=":",
               label=f"{policy} (wall s)")
        b.plot([r["k"] for r in mine], [r["cpu_speedup_vs_k1"] for r in mine], marker="o", label=f"{policy} (CPU)")
        b.plot([r["k"] for r in mine], [r["speedup_vs_k1"] for r in mine], marker="x", linestyle=":",
               label=f"{policy} (wall)")
    a.set_xlabel("episodes per batch (K)")
    a.set_ylabel("seconds per episode-turn")
    b.set_xlabel("episodes per batch (K)")
    b.set_ylabel("speed-up over K=1")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{meta['suite']}: {meta['model']} on {meta['device']} ({meta['threads']} thread(s)), "
                 f"{meta['episodes']} episodes x {meta['turns']} turns, {meta['max_new_tokens']} new tokens", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
