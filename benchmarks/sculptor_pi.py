"""PI-LLM-style proactive interference: the plain model vs the model with Sculptor tools.

Episodes come from rhea.eval's state-tracking suite (key/value mode, no filler): each
update sets one key to a new value, and the probe asks for the current value of every key.
The number of updates grows across settings, so older values pile up as interference.
With --data the keys and values come from a real PI-LLM vocabulary file (e.g.
dict_category_double-word_46-400_v1-1.json), otherwise from the suite's built-in vocabulary.

Two layouts (--layout):
- stream (default, PI-LLM's own): one user message holds the whole update stream as
  ``key: value`` lines inside <updates>...</updates>, the assistant acknowledges, and the
  probe follows. This is the context Sculptor's tools are made for (fragment the block,
  fold the superseded part, search a key).
- turns: one update per user turn ("Please keep track of this: the current fruit is kiwi."),
  each acknowledged with a fixed "Noted." (so no model reply leaks the state).

Methods, each over the same episodes:
- plain:    the whole history (vanilla policy), one greedy answer;
- sculptor: SculptorPolicy (text-described tools on a template without tool support,
            native tools= otherwise; the first step is nudged to call a tool), whose loop
            answer is scored.
Metrics: key accuracy, JGA, stale rate (old value given), context tokens (the plan's
visible text), prompt tokens spent over every generation, tool calls, seconds.

    python benchmarks/sculptor_pi.py                                  # embedded SmolLM2-135M
    python benchmarks/sculptor_pi.py --data /path/to/pi_llm_vocab.json
    python benchmarks/sculptor_pi.py --endpoint http://127.0.0.1:8000/v1 --model qwen --skip-embedded

Writes benchmarks/results/sculptor_pi.json and sculptor_pi.png.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rhea.agents.sculptor import SculptorPolicy, loop_answer  # noqa: E402
from rhea.context import Conversation, Turn  # noqa: E402
from rhea.eval.suites import StateTrackingSuite  # noqa: E402
from rhea.policies import get_policy  # noqa: E402

ACK = "Noted."
METHODS = ("plain", "sculptor")


def episodes_by_updates(args) -> dict[int, list]:
    data = StateTrackingSuite.load(args.data) if args.data else None
    suite = StateTrackingSuite(data=data, n_episodes=args.episodes, n_keys=args.n_keys, filler_ratio=0.0,
                               n_probes=1)
    # With no filler every body turn is an update: n_turns = updates + the probe.
    return {n: suite.generate(n_turns=n + 1, seed=args.seed) for n in args.updates}


STREAM_INTRO = "Here is a stream of key updates; a later line replaces any earlier value of its key."
STREAM_OUTRO = "Remember the current value of each key."


def conversation_of(episode, layout: str) -> Conversation:
    updates = episode.turns[:-1]
    if layout == "turns":
        return Conversation([Turn(t.user, ACK) for t in updates])
    lines = "\n".join(f"{t.meta['key']}: {t.meta['value']}" for t in updates)
    return Conversation([Turn(f"{STREAM_INTRO}\n<updates>\n{lines}\n</updates>\n{STREAM_OUTRO}", ACK)])


def spent(generator) -> int:
    return int(getattr(generator, "prompt_tokens", 0))


def answer(method: str, generator, tokenizer, conv: Conversation, query: str, args) -> tuple[str, object, object]:
    """(reply, plan, policy) of `method` for one probe."""
    if method == "plain":
        plan = get_policy("vanilla", tokenizer=tokenizer).build(conv, query)
        return generator.generate(plan.text_messages(), max_new_tokens=args.max_new_tokens), plan, None
    policy = SculptorPolicy(generator, max_tool_calls=args.max_tool_calls, force_first_tool=not args.no_force,
                            max_new_tokens=args.max_new_tokens, summary_max_new_tokens=args.max_new_tokens,
                            tokenizer=tokenizer)
    plan = policy.build(conv, query)
    return loop_answer(plan), plan, policy


def run_backend(backend: str, generator, tokenizer, episodes: dict[int, list], args) -> tuple[list[dict], dict | None]:
    rows, example = [], None
    for n_updates, group in episodes.items():
        for episode in group:
            conv, probe = conversation_of(episode, args.layout), episode.turns[-1]
            for method in METHODS:
                before, start = spent(generator), time.perf_counter()
                reply, plan, policy = answer(method, generator, tokenizer, conv, probe.user, args)
                seconds = time.perf_counter() - start
                score = episode.score_turn(probe, reply)
                calls = [r for r in plan.decisions.records if r.get("event") == "tool_call"]
                row = {**score, "backend": backend, "method": method, "updates": n_updates, "reply": reply,
                       "accuracy": score["accuracy"], "joint": float(score["joint"]),
                       "stale": sum(score["stale"].values()) / len(score["stale"]),
                       "context_tokens": plan.ledger.text_tokens, "full_history_tokens": plan.ledger.full_history_tokens,
                       "prompt_tokens_spent": spent(generator) - before, "tool_calls": len(calls),
                       "tool_names": [c["name"] for c in calls], "seconds": round(seconds, 2)}
                rows.append(row)
                print(json.dumps({k: row[k] for k in ("backend", "method", "updates", "accuracy", "context_tokens",
                                                       "prompt_tokens_spent", "tool_calls", "seconds")}), flush=True)
                if policy is not None and example is None:
                    example = trace_of(policy, probe.user, reply, backend)
    return rows, example


def trace_of(policy: SculptorPolicy, query: str, reply: str, backend: str) -> dict:
    result = policy.last_result
    return {"backend": backend, "query": query, "answer": reply,
            "steps": [{"kind": s.kind, "completion": s.completion} for s in result.steps],
            "tool_calls": [{"name": t.name, "arguments": t.arguments, "error": t.error, "result": t.result[:400]}
                           for t in result.trace]}


def summarize(rows: list[dict]) -> list[dict]:
    table = []
    keys = sorted({(r["backend"], r["method"], r["updates"]) for r in rows})
    for backend, method, updates in keys:
        group = [r for r in rows if (r["backend"], r["method"], r["updates"]) == (backend, method, updates)]

        def mean(field):
            return round(sum(r[field] for r in group) / len(group), 3)

        table.append({"backend": backend, "method": method, "updates": updates, "episodes": len(group),
                      **{f: mean(f) for f in ("accuracy", "joint", "stale", "context_tokens", "full_history_tokens",
                                              "prompt_tokens_spent", "tool_calls", "seconds")},
                      "tools_used": dict(Counter(n for r in group for n in r["tool_names"]))})
    return table


def plot(table: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc_ax, tok_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for backend, method in sorted({(r["backend"], r["method"]) for r in table}):
        line = [r for r in table if (r["backend"], r["method"]) == (backend, method)]
        xs = [r["updates"] for r in line]
        label = f"{backend} / {method}"
        acc_ax.plot(xs, [r["accuracy"] for r in line], marker="o", label=label)
        tok_ax.plot(xs, [r["context_tokens"] for r in line], marker="o", label=f"{label}: context")
        tok_ax.plot(xs, [r["prompt_tokens_spent"] for r in line], marker="x", linestyle="--", label=f"{label}: spent")
    acc_ax.set(xlabel="updates in the stream", ylabel="key accuracy", ylim=(-0.05, 1.05), title="PI-LLM-style accuracy")
    tok_ax.set(xlabel="updates in the stream", ylabel="tokens", yscale="log", title="context vs prompt tokens spent")
    acc_ax.legend(fontsize=7)
    tok_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def embedded_backend(args):
    import torch

    from rhea.agents.sculptor import tool_generator
    from rhea.modeling import load_default_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model()
    return tool_generator(model, tokenizer), tokenizer


def endpoint_backend(args):
    from rhea.agents.sculptor import EndpointToolGenerator
    from rhea.backends.llm import OpenAICompatibleGenerator

    client = OpenAICompatibleGenerator(args.endpoint, args.model, timeout=args.timeout)
    # Without tools= it is a plain chat completion, so one generator serves both methods.
    return EndpointToolGenerator(client), None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="PI-LLM vocabulary JSON ({category: [values]}); built-in vocabulary if absent")
    ap.add_argument("--layout", choices=("stream", "turns"), default="stream")
    ap.add_argument("--updates", type=int, nargs="+", default=[4, 8, 16], help="updates per episode (one setting each)")
    ap.add_argument("--episodes", type=int, default=1, help="episodes per setting")
    ap.add_argument("--n-keys", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tool-calls", type=int, default=2,
                    help="tool budget per answer (the policy's default is 20; small here to bound CPU time)")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--no-force", action="store_true", help="do not nudge the first step to call a tool")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-embedded", action="store_true")
    ap.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", help="model name at the endpoint")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    if bool(args.endpoint) != bool(args.model):
        ap.error("--endpoint and --model go together (e.g. --endpoint http://127.0.0.1:8000/v1 --model qwen)")
    if args.skip_embedded and not args.endpoint:
        ap.error("--skip-embedded leaves nothing to run; add --endpoint URL --model NAME")

    episodes = episodes_by_updates(args)
    backends = ([] if args.skip_embedded else [("smollm2-135m", embedded_backend)]) + (
        [(f"endpoint:{args.model}", endpoint_backend)] if args.endpoint else [])
    rows, examples = [], []
    started = time.perf_counter()
    for name, make in backends:
        generator, tokenizer = make(args)
        backend_rows, example = run_backend(name, generator, tokenizer, episodes, args)
        rows += backend_rows
        examples += [example] if example else []
    table = summarize(rows)
    os.makedirs(args.out, exist_ok=True)
    meta = {"args": vars(args), "data": "pi-llm vocabulary" if args.data else "built-in vocabulary",
            "platform": platform.platform(), "python": platform.python_version(),
            "wall_seconds": round(time.perf_counter() - started, 1)}
    with open(os.path.join(args.out, "sculptor_pi.json"), "w") as f:
        json.dump({"meta": meta, "table": table, "example_traces": examples, "rows": rows}, f, indent=1)
    plot(table, os.path.join(args.out, "sculptor_pi.png"))
    for row in table:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
