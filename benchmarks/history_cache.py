"""What reusing the last prompt's and reply's keys/values saves (`ChatSession(reuse_prefix_cache=...)`).

    OMP_NUM_THREADS=1 python benchmarks/history_cache.py [--model smollm2-135m] [--turns 12] \
        [--k 1,8] [--policies vanilla,rhea,recent-k] [--max-new-tokens 32] \
        [--out benchmarks/results/history_cache]

Plays the state-tracking suite's first K episodes (6 keys, 3 probes per probe turn) turn by
turn through `ChatSession`s, once with `HistoryKVCache` and once without, K conversations per
batch (`send_batch`, as `rhea bench --batch-episodes K` does). Per policy and K: prefill and
decode seconds summed over turns (each batch's seconds counted once), the process's CPU
seconds (steadier than wall time on a shared machine), the prompt tokens the cache spared,
and how many replies equal the uncached run's (greedy; a prefill split in two may change a
reply in the last bits of the logits). Writes ``<out>.json`` and ``<out>.png`` (prefill
seconds per turn index, with and without, and the ratios).
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


def play(model, policy: str, episodes, k: int, reuse: bool, max_new_tokens: int) -> dict:
    """Run the first `k` episodes together; per turn index, the batch's prefill/decode seconds."""
    from rhea.session import ChatSession
    from rhea.session.batch import send_batch

    chats = [ChatSession(model, policy=policy, max_new_tokens=max_new_tokens, reuse_prefix_cache=reuse)
             for _ in range(k)]
    per_turn, replies = [], []
    c0, t0 = time.process_time(), time.perf_counter()
    for index in range(len(episodes[0].turns)):
        out = send_batch(chats, [episodes[e].turns[index].user for e in range(k)])
        replies.extend(str(r) for r in out)
        timings = [c.records[-1].timings for c in chats]
        per_turn.append({"turn": index, "prefill_s": timings[0]["prefill_s"], "decode_s": timings[0]["decode_s"],
                         "prompt_tokens": sum(c.records[-1].prompt_tokens for c in chats),
                         "reused_tokens": sum(t.get("prefix_reused_tokens", 0.0) for t in timings)})
    return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0, "turns": per_turn,
            "replies": replies}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--k", default="1,8")
    parser.add_argument("--policies", default="vanilla,rhea,recent-k")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/history_cache"))
    args = parser.parse_args(argv)
    ks = sorted({int(k) for k in args.k.split(",")})
    if any(k < 1 for k in ks):
        parser.error("--k must list integers >= 1")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from rhea.eval.suites import get_suite
    from rhea.modeling.loading import load_rhea_model

    episodes = get_suite("state-tracking", n_keys=6, n_probes=3).generate(n_turns=args.turns, seed=0)
    while len(episodes) < max(ks):
        episodes += get_suite("state-tracking", n_keys=6, n_probes=3).generate(n_turns=args.turns,
                                                                               seed=len(episodes))
    model = load_rhea_model(args.model, device=args.device)
    model = (model[0] if isinstance(model, tuple) else model).eval()
    rows = []
    for policy in args.policies.split(","):
        for k in ks:
            off = play(model, policy, episodes, k, False, args.max_new_tokens)
            on = play(model, policy, episodes, k, True, args.max_new_tokens)
            pre_off = sum(t["prefill_s"] for t in off["turns"])
            pre_on = sum(t["prefill_s"] for t in on["turns"])
            rows.append({
                "policy": policy, "k": k, "turns": len(off["turns"]),
                "prefill_s_off": pre_off, "prefill_s_on": pre_on, "prefill_ratio_on_off": pre_on / pre_off,
                "decode_s_off": sum(t["decode_s"] for t in off["turns"]),
                "decode_s_on": sum(t["decode_s"] for t in on["turns"]),
                "cpu_s_off": off["cpu_s"], "cpu_s_on": on["cpu_s"], "cpu_ratio_on_off": on["cpu_s"] / off["cpu_s"],
                "wall_s_off": off["wall_s"], "wall_s_on": on["wall_s"],
                "prompt_tokens": sum(t["prompt_tokens"] for t in on["turns"]),
                "reused_tokens": sum(t["reused_tokens"] for t in on["turns"]),
                "replies_same": sum(a == b for a, b in zip(on["replies"], off["replies"])),
                "replies": len(on["replies"]),
                "per_turn_prefill_s_off": [t["prefill_s"] for t in off["turns"]],
                "per_turn_prefill_s_on": [t["prefill_s"] for t in on["turns"]],
            })
            r = rows[-1]
            print(json.dumps({key: (round(v, 3) if isinstance(v, float) else v) for key, v in r.items()
                              if not key.startswith("per_turn")}), flush=True)
    meta = {"model": args.model, "device": args.device, "dtype": str(model.dtype), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "machine": platform.machine(), "turns": args.turns,
            "max_new_tokens": args.max_new_tokens, "suite": "state-tracking (6 keys, 3 probes)",
            "command": "python benchmarks/history_cache.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    from rhea.eval.environment import cpu_name

    meta["cpu"] = cpu_name()  # handles a missing /proc/cpuinfo itself
    args.out.parent.mkdir(parents=True, exist_ok=True)
    output_file(args.out, ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    plot(rows, meta, output_file(args.out, ".png"))
    return 0


def plot(rows, meta, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        x = list(range(len(r["per_turn_prefill_s_off"])))
        line, = a.plot(x, r["per_turn_prefill_s_off"], linestyle=":", label=f"{r['policy']} K={r['k']} without")
        a.plot(x, r["per_turn_prefill_s_on"], color=line.get_color(), marker="o", markersize=3,
               label=f"{r['policy']} K={r['k']} with")
    labels = [f"{r['policy']}\nK={r['k']}" for r in rows]
    xs = range(len(rows))
    b.bar([x - 0.2 for x in xs], [r["prefill_ratio_on_off"] for r in rows], width=0.4, label="prefill s (with / without)")
    b.bar([x + 0.2 for x in xs], [r["cpu_ratio_on_off"] for r in rows], width=0.4, label="whole run CPU s (with / without)")
    b.axhline(1.0, color="k", linewidth=0.8)
    b.set_xticks(list(xs), labels, fontsize=7)
    b.set_ylabel("ratio (lower is better)")
    a.set_xlabel("turn index")
    a.set_ylabel("prefill seconds (batch)")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"history KV reuse: {meta['model']} on {meta['device']} ({meta['threads']} thread(s), "
                 f"{meta['dtype']}), {meta['turns']} turns, {meta['max_new_tokens']} new tokens", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
