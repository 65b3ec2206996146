"""Model-zoo smoke benchmark: load a zoo model, chat 3 turns under a policy, record the costs.

One (model, dtype) per process, so peak RSS is that run's own. Rows are merged into
benchmarks/results/model_zoo.json (keyed by model, dtype and whether the cache was warm)
and plotted to model_zoo.png.

    flock /tmp/rhea-heavy.lock nice -n 10 .venv/bin/python benchmarks/model_zoo.py --model qwen2.5-coder-1.5b --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch
from rhea.storage import output_file

RESULTS = Path(__file__).resolve().parent / "results"
TURNS = [
    "From now on, answer in one sentence.",
    "What should I pack for a weekend in Lisbon?",
    "Write a Python function that reverses a string.",
]


def run(model_name: str, dtype: str, policy: str, max_new_tokens: int) -> dict:
    from rhea.modeling.loading import load_rhea_model
    from rhea.modeling.zoo import MODEL_ZOO
    from rhea.session import ChatSession

    cached_before = MODEL_ZOO[model_name].is_cached() if model_name in MODEL_ZOO else None
    t0 = time.perf_counter()
    model = load_rhea_model(model_name, dtype=getattr(torch, dtype))
    load_s = time.perf_counter() - t0
    model.eval()
    chat = ChatSession(model, policy=policy, max_new_tokens=max_new_tokens)
    turns = []
    for text in TURNS:
        t = time.perf_counter()
        reply = chat.send(text)
        g = chat.last_generation
        turns.append({
            "user": text, "reply": reply, "wall_s": round(time.perf_counter() - t, 2),
            "prompt_tokens": g.prompt_tokens, "new_tokens": g.new_tokens,
            **{k: round(v, 3) for k, v in g.timings.items()},
        })
    decode_tokens = sum(max(t["new_tokens"] - 1, 0) for t in turns)  # the first new token is prefill's
    decode_s = sum(t["decode_s"] for t in turns)
    return {
        "model": model_name, "dtype": dtype, "policy": policy, "max_new_tokens": max_new_tokens,
        "cache_warm_before_load": cached_before, "load_s": round(load_s, 1),
        "decode_tokens_per_s": round(decode_tokens / decode_s, 2) if decode_s else None,
        "prefill_tokens_per_s": round(sum(t["prompt_tokens"] for t in turns) / sum(t["prefill_s"] for t in turns), 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),  # ru_maxrss is KiB on Linux
        "torch_threads": torch.get_num_threads(),
        "instructions_kept": chat.last_plan.decisions.instructions,
        "turns": turns,
    }


def plot(rows: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(rows)
    labels = [f"{rows[k]['model']}\n{rows[k]['dtype']}" for k in keys]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, field, title in zip(axes, ("decode_tokens_per_s", "load_s", "peak_rss_gb"),
                                ("decode tokens/s (3-turn chat)", "load seconds", "peak RSS (GB)")):
        ax.bar(range(len(keys)), [rows[k][field] or 0 for k in keys], color="tab:blue")
        ax.set_xticks(range(len(keys)), labels, fontsize=7)
        ax.set_title(title, fontsize=9)
    fig.suptitle("model zoo on this CPU (2 shared cores)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--policy", default="rhea")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--out", default=str(RESULTS / "model_zoo.json"))
    args = p.parse_args()
    row = run(args.model, args.dtype, args.policy, args.max_new_tokens)
    print(json.dumps(row, indent=2))
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.is_file() else {}
    rows[f"{args.model}/{args.dtype}/{'warm' if row['cache_warm_before_load'] else 'cold'}"] = row
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")
    plot({k: v for k, v in rows.items() if k.endswith("/warm")} or rows, output_file(out, ".png"))


if __name__ == "__main__":
    main()
