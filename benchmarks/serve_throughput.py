"""Batched serving at long histories: conversations answered per second and bytes held per conversation,
vanilla against rhea, through `rhea serve`'s batching.

    python benchmarks/serve_throughput.py [--model smollm2-135m] [--policies vanilla,rhea] \\
        [--history-tokens 8000] [--batches 8,16,32] [--rounds 2] [--max-tokens 16] [--threads 2] \\
        [--data chats.json] [--device auto] \\
        [--out benchmarks/results/serve_throughput_8k_smollm2-135m_cpu]

For each policy and batch size B, a fresh `rhea serve --policy P --max-batch B --history-entries B` gets B
conversations at once, one client thread each. Each conversation is its own history of at least
``--history-tokens`` content tokens (the built-in verbose exchanges of `benchmarks/cost_curve.py`, a different seed
per conversation, or the chats of ``--data``, each conversation starting at its own offset) and a last question.
Requests are stateless, as the OpenAI API is: the client sends the whole history every time. Round 1 sends each
conversation's history and question; each later round (``--rounds``) appends the reply and a new question, so the
server may reuse what it kept (vanilla: the conversation's keys/values; rhea: cached latents and embeddings).

Per round: wall seconds, conversations answered per second (B / wall), the requests' p50/p95, prompt and completion
tokens. Bytes held per conversation while it is answered: the KV cache of its prompt and reply ((prompt +
completion tokens) x keys and values per token, every layer, at the model's dtype: `<mem>` slots are prompt
positions too) plus the latents its plan shows (turns in the latent tier x one latent's bytes,
`rhea.context.model_latent_bytes`). The ratios compare rhea with vanilla at the same batch size, and at equal batch
memory: conversations per second per GB of batch memory (B x bytes per conversation), the throughput a memory
budget buys if both scale with batch size as measured.

Every request must be answered (200) with its own conversation's turns in the ``rhea`` object; the run fails
otherwise. Writes ``<out>.json`` and ``<out>.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from rhea.errors import RheaConfigError  # noqa: E402
from rhea.storage import output_file  # noqa: E402

SERVER_LOG = Path(tempfile.gettempdir()) / "rhea_serve_throughput.server.log"
QUESTIONS = ("In two sentences, what was the first thing we discussed?", "Which topic came up most often so far?",
             "Summarise your last answer in one sentence.", "What should I read next on the first topic?")


class ThroughputError(RheaConfigError):
    """A bad option of benchmarks/serve_throughput.py, or a run that lost or mixed up a request."""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--policies", default="vanilla,rhea")
    p.add_argument("--history-tokens", type=int, default=8000)
    p.add_argument("--batches", default="8,16,32", help="comma-separated batch sizes (conversations sent at once)")
    p.add_argument("--rounds", type=int, default=2, help="requests per conversation (the first, then continuations)")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    p.add_argument("--data", default=None, help="a JSON list of {messages: [...]} chats (default: built-in exchanges)")
    p.add_argument("--device", default="auto")
    p.add_argument("--request-timeout", type=float, default=3600.0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    try:
        args.batch_sizes = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    except ValueError:
        raise ThroughputError(f"--batches {args.batches!r}: write batch sizes like 8,16,32") from None
    if not args.batch_sizes or min(args.batch_sizes) < 1 or max(args.batch_sizes) > 256:
        raise ThroughputError(f"--batches {args.batches!r}: each batch size must be 1 to 256")
    args.policy_names = [s.strip() for s in args.policies.split(",") if s.strip()]
    from rhea.policies import available_policies

    unknown = [n for n in args.policy_names if n not in available_policies()]
    if not args.policy_names or unknown:
        raise ThroughputError(f"--policies {args.policies!r}: unknown {unknown}; choose from {available_policies()}")
    for name in ("history_tokens", "rounds", "max_tokens", "threads"):
        if getattr(args, name) < 1:
            raise ThroughputError(f"--{name.replace('_', '-')} must be >= 1")
    if args.data is not None and not Path(args.data).is_file():
        raise ThroughputError(f"--data {args.data}: no such file; pass a JSON list of chats or leave it out")
    if args.out is None:
        k = f"{args.history_tokens / 1000:g}k"
        args.out = f"benchmarks/results/serve_throughput_{k}_{args.model}_{'gpu' if args.device == 'cuda' else 'cpu'}"
    return args


def histories(pairs_of, n: int, tokens: int, tokenizer) -> list[list[dict]]:
    """`n` distinct histories of at least `tokens` content tokens each, as chat messages."""
    from cost_curve import history_of

    out = []
    for k in range(n):
        turns, _, _ = history_of(pairs_of(k), tokens, tokenizer)
        messages = []
        for t in turns:
            messages += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.assistant}]
        out.append(messages)
    return out


def pair_source(args):
    """conversation index -> its (user, reply) pairs: a seed of the built-in generator, or --data from an offset."""
    from cost_curve import builtin_turns, data_turns

    if args.data is None:
        return lambda k: builtin_turns(400, seed=1000 + k)
    pairs = data_turns(args.data)

    def rotated(k: int):
        start = (k * 7919) % len(pairs)
        return pairs[start:] + pairs[:start]
    return rotated


def run_round(port: int, model_id: str, conversations: list[list[dict]], max_tokens: int, timeout: float) -> dict:
    """Send every conversation at once (one thread each); append each reply to its conversation."""
    import httpx

    rows: dict[int, dict] = {}

    def one(k: int) -> None:
        body = {"model": model_id, "messages": conversations[k], "max_tokens": max_tokens, "rhea": True}
        t0 = time.perf_counter()
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - recorded as lost
            rows[k] = {"status": None, "error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0}
            return
        seconds = time.perf_counter() - t0
        data = r.json()
        if r.status_code != 200:
            rows[k] = {"status": r.status_code, "error": data.get("error"), "seconds": seconds}
            return
        obj = data["rhea"]
        users = [m["content"] for m in conversations[k][:-1] if m["role"] == "user"]
        mixed = any(t["index"] >= len(users) or not users[t["index"]].startswith(t["user"].rstrip("…"))
                    for t in obj["turns"])
        reply = data["choices"][0]["message"]["content"]
        rows[k] = {"status": 200, "seconds": seconds, "prompt_tokens": data["usage"]["prompt_tokens"],
                   "completion_tokens": data["usage"]["completion_tokens"], "tokens_fed": obj["tokens_fed"],
                   "tokens_full_history": obj["tokens_full_history"], "mixed_up": mixed,
                   "latent_turns": sum(t["tier"] == "latent" for t in obj["turns"]),
                   "dropped_turns": sum(t["tier"] == "drop" for t in obj["turns"]), "reply": reply}

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(conversations))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    ok = [rows[k] for k in sorted(rows) if rows[k]["status"] == 200]
    seconds = sorted(r["seconds"] for r in ok)
    q = statistics.quantiles(seconds, n=20, method="inclusive") if len(seconds) >= 2 else seconds * 19
    return {"rows": [rows[k] for k in range(len(conversations))], "wall_s": wall, "answered": len(ok),
            "lost": len(conversations) - len(ok), "mixed_up": sum(r["mixed_up"] for r in ok),
            "conversations_per_s": len(ok) / wall, "p50_s": statistics.median(seconds) if seconds else None,
            "p95_s": q[18] if seconds else None,
            "prompt_tokens_mean": statistics.fmean(r["prompt_tokens"] for r in ok) if ok else None,
            "tokens_full_history_mean": statistics.fmean(r["tokens_full_history"] for r in ok) if ok else None}


def held_bytes(row: dict, kv_per_token: int, latent_each: int) -> int:
    """Bytes one conversation holds while answered: its prompt's and reply's keys/values, and its plan's latents."""
    return (row["prompt_tokens"] + row["completion_tokens"]) * kv_per_token + row["latent_turns"] * latent_each


def measure(args) -> dict:
    from serve_load import _free_port, start_server

    from cost_curve import kv_bytes_per_token
    from rhea.context.latent import model_latent_bytes
    from rhea.modeling.loading import load_rhea_model

    model = load_rhea_model(args.model, device=args.device)  # the dtype the server picks: the zoo entry's
    model = model[0] if isinstance(model, tuple) else model
    kv_per_token, latent_each = kv_bytes_per_token(model), model_latent_bytes(model, dtype_bytes=model.dtype.itemsize)
    tokenizer, window, dtype = model.tokenizer, getattr(model, "max_context", None), str(model.dtype).split(".")[-1]
    del model
    source = pair_source(args)
    largest = max(args.batch_sizes)
    base = histories(source, largest, args.history_tokens, tokenizer)
    SERVER_LOG.write_text("")
    result = {"benchmark": "serve_throughput", "model": args.model, "dtype": dtype, "device": args.device,
              "window": window, "history_tokens": args.history_tokens, "rounds": args.rounds,
              "max_tokens": args.max_tokens, "threads": args.threads, "kv_bytes_per_token": kv_per_token,
              "latent_bytes_each": latent_each, "data": os.path.basename(args.data) if args.data else "built-in",
              "machine": platform.machine(), "processor": platform.processor(), "cpu_count": os.cpu_count(),
              "policies": {}}
    for policy in args.policy_names:
        result["policies"][policy] = {}
        for b in args.batch_sizes:
            port = _free_port()
            extra = ["--policy", policy, "--history-entries", str(b), "--max-queue", str(max(64, 2 * b)),
                     "--batch-wait-ms", "500", "--device", args.device]
            proc = start_server(args.model, port, b, args.max_tokens, args.threads, SERVER_LOG, extra)
            try:
                conversations = [list(m) + [{"role": "user", "content": QUESTIONS[0]}] for m in base[:b]]
                rounds = []
                for r in range(args.rounds):
                    done = run_round(port, args.model, conversations, args.max_tokens, args.request_timeout)
                    for k, row in enumerate(done["rows"]):
                        if row["status"] == 200:
                            row["held_bytes"] = held_bytes(row, kv_per_token, latent_each)
                            conversations[k] += [{"role": "assistant", "content": row.pop("reply")},
                                                 {"role": "user", "content": QUESTIONS[(r + 1) % len(QUESTIONS)]}]
                    held = [row["held_bytes"] for row in done["rows"] if row["status"] == 200]
                    done["held_mb_per_conversation"] = statistics.fmean(held) / 1e6 if held else None
                    rounds.append(done)
                    print(f"{policy} batch {b} round {r + 1}: {done['answered']}/{b} in {done['wall_s']:.1f} s, "
                          f"{done['conversations_per_s']:.3f} conv/s, {done['held_mb_per_conversation']:.1f} MB/conv, "
                          f"prompt {done['prompt_tokens_mean']:.0f} tokens", flush=True)
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except Exception:  # noqa: BLE001 - a server that does not stop is killed
                    proc.kill()
            result["policies"][policy][str(b)] = {"rounds": rounds}
    bad = [(p, b, i) for p, by in result["policies"].items() for b, e in by.items()
           for i, rd in enumerate(e["rounds"]) if rd["lost"] or rd["mixed_up"]]
    result["all_answered"] = not bad
    result["ratios"] = ratios(result)
    return result


def ratios(result: dict) -> dict:
    """rhea over vanilla per batch size and round: conversations/s, MB per conversation, and conversations/s per
    GB of batch memory (the equal-memory comparison)."""
    pol = result["policies"]
    if "vanilla" not in pol:
        return {}
    out = {}
    for other in (p for p in pol if p != "vanilla"):
        for b, entry in pol[other].items():
            base = pol["vanilla"].get(b)
            if base is None:
                continue
            for i, (mine, ref) in enumerate(zip(entry["rounds"], base["rounds"])):
                if not mine["answered"] or not ref["answered"]:
                    continue
                per_gb = [rd["conversations_per_s"] / (int(b) * rd["held_mb_per_conversation"] / 1e3)
                          for rd in (mine, ref)]
                out[f"{other}/batch{b}/round{i + 1}"] = {
                    "conversations_per_s": mine["conversations_per_s"] / ref["conversations_per_s"],
                    "held_mb_per_conversation": mine["held_mb_per_conversation"] / ref["held_mb_per_conversation"],
                    "conversations_per_s_per_gb": per_gb[0] / per_gb[1]}
    return out


def plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for policy, by in result["policies"].items():
        sizes = sorted(by, key=int)
        for i in range(result["rounds"]):
            style = "-" if i == 0 else "--"
            label = f"{policy}, request {i + 1}"
            axes[0].plot([int(b) for b in sizes], [by[b]["rounds"][i]["conversations_per_s"] for b in sizes], style,
                         marker="o", label=label)
            axes[1].plot([int(b) for b in sizes], [by[b]["rounds"][i]["held_mb_per_conversation"] for b in sizes],
                         style, marker="o", label=label)
            axes[2].plot([int(b) for b in sizes], [by[b]["rounds"][i]["conversations_per_s"] /
                                                   (int(b) * by[b]["rounds"][i]["held_mb_per_conversation"] / 1e3)
                                                   for b in sizes], style, marker="o", label=label)
    for ax, title in zip(axes, ("conversations answered / s", "MB held per conversation (KV + latents)",
                                "conversations / s per GB of batch memory")):
        ax.set_xlabel("batch (conversations at once)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.suptitle(f"rhea serve on {result['model']} ({result['dtype']}, {result['device']}): "
                 f"{result['history_tokens']}-token histories, {result['max_tokens']} new tokens")
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=110)


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
    except ThroughputError as e:
        print(f"serve_throughput: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    result = measure(args)
    output_file(out, ".json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    plot(result, out)
    print(f"-> {out}.json/.png; every request answered: {result['all_answered']}")
    for key, r in result["ratios"].items():
        print(f"{key}: {r['conversations_per_s']:.2f}x conv/s, {r['held_mb_per_conversation']:.2f}x MB/conv, "
              f"{r['conversations_per_s_per_gb']:.2f}x conv/s per GB")
    if not result["all_answered"]:
        print(f"serve_throughput: a request was lost or mixed up; see {SERVER_LOG}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
