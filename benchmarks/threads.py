"""Torch intra-op threads for interactive chat: seconds per turn with 1 thread vs the default.

Each run is a fresh process (thread settings are per process) that loads the embedded model
and answers the scripted demo conversation (`rhea.session.demo.SCRIPT`, policy ``rhea``,
32 new tokens) with ``torch.set_num_threads(T)``; the settings alternate run by run so
machine load hits them alike. Per run it records each turn's seconds (plan + prefill + decode
+ compressing the reply), the replies (greedy: they must match across settings) and the load
average. `rhea chat` / `rhea bench` default to the fastest setting measured here (see
docs/guides/sessions-and-policies.md, "Threads").

    nice -n 10 .venv/bin/python benchmarks/threads.py --repeats 3
    # -> benchmarks/results/threads.json and .png
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, os, sys, time, torch
n = int(sys.argv[1])
if n > 0:
    torch.set_num_threads(n)
from rhea import load_default_model
from rhea.session import ChatSession
from rhea.session.demo import SCRIPT
from rhea.storage import output_file
model, _ = load_default_model()
chat = ChatSession(model, policy="rhea", max_new_tokens=32)
load = os.getloadavg()[0]
seconds, replies = [], []
for step in SCRIPT:
    t = time.perf_counter()
    replies.append(chat.send(step.user))
    seconds.append(time.perf_counter() - t)
print(json.dumps({"threads": torch.get_num_threads(), "seconds": seconds, "replies": replies,
                  "load_before": load, "load_after": os.getloadavg()[0]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,0", help="comma list; 0 = torch's default (one per core)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/threads")
    args = parser.parse_args()
    settings = [int(t) for t in args.threads.split(",")]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    runs = []
    for r in range(args.repeats):
        for n in (settings if r % 2 == 0 else settings[::-1]):
            proc = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, capture_output=True, text=True, check=True)
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["setting"] = n
            runs.append(row)
            print(f"threads={row['threads']} ({'default' if n == 0 else n}): median turn "
                  f"{statistics.median(row['seconds']):.2f}s, load {row['load_before']:.1f}", flush=True)
    summary = {}
    for n in settings:
        rows = [r for r in runs if r["setting"] == n]
        per_turn = [s for r in rows for s in r["seconds"]]
        summary[str(n)] = {"threads": rows[0]["threads"], "runs": len(rows),
                           "median_turn_s": statistics.median(per_turn), "min_turn_s": min(per_turn),
                           "max_turn_s": max(per_turn),
                           "median_conversation_s": statistics.median(sum(r["seconds"]) for r in rows)}
    replies = {json.dumps(r["replies"]) for r in runs}
    result = {"cpu_count": os.cpu_count(), "script_turns": len(runs[0]["seconds"]), "summary": summary,
              "identical_replies": len(replies) == 1, "runs": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_file(out, ".json").write_text(json.dumps(result, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [f"{s['threads']} thread{'s' if s['threads'] > 1 else ''}" + (" (torch default)" if n == "0" else "")
              for n, s in summary.items()]
    data = [[x for r in runs if r["setting"] == int(n) for x in r["seconds"]] for n in summary]
    ax.boxplot(data)
    ax.set_xticks(range(1, len(labels) + 1), labels)
    ax.set_ylabel("seconds per turn")
    ax.set_title(f"rhea chat turn latency, SmolLM2-135M, {os.cpu_count()} cores ({args.repeats} runs each)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=110)
    print(json.dumps({"summary": summary, "identical_replies": result["identical_replies"]}, indent=1))


if __name__ == "__main__":
    main()
