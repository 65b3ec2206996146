"""PI-LLM (proactive interference): the plain model vs the model with Sculptor tools (paper Table 1).

The Sculptor paper's Table 1 evaluates PI-LLM (46 keys, each updated 4 ... 256 times, 1K ...
64K tokens) with and without the tools, the tools run with the PI-LLM system prompt of
appendix D.1 and ``tool_choice="required"`` on the first step (section 3.1), at most 20 tool
calls (section 4.1). ``--paper-setting`` runs that; smaller settings are for smoke runs.

Episodes come from rhea.eval's state-tracking suite (key/value mode, no filler) over a real
PI-LLM vocabulary (``--data``, e.g. /path/to/pi_llm/dict_category_double-word_46-400_v1-1.json):
each update sets one key to a new value, the probe asks for the current value of every key.
Layout ``stream`` (default, PI-LLM's own): one user message holds the whole update stream as
``key: value`` lines inside <updates>...</updates>, then the probe. Layout ``turns``: one update
per user turn, each acknowledged "Noted.".

Methods, each over the same episodes:
- plain:    the whole history (vanilla policy), one greedy answer (the paper's "Baseline");
- sculptor: SculptorPolicy with the chosen paper prompt (``--prompt pi-llm``: appendix D.1;
            ``unified``: D.2), whose loop answer is scored (the paper's "w/ ACM Tools");
- rag-bm25: (opt-in, ``--methods plain sculptor rag-bm25``) Table 2's "RAG (BM25)" baseline as
            appendix D.4 describes it: 200-token chunks of the history, BM25-ranked against the
            query, concatenated high to low until ~1500 tokens, then one greedy answer.
Metrics per (method, updates per key): key accuracy (the paper's PI-LLM number) with a 95%
Wilson interval over keys, JGA (every key right) with its interval over episodes, stale rate,
context tokens, prompt tokens spent over all generations, tool calls, seconds, and for
sculptor rows Eq. 4's reward (correct = every key right).

The embedded SmolLM2-135M cannot drive the tools or answer 46 keys: on it this is a smoke run
of the pipeline, not a measurement. The measurement (a GPU session):

    python benchmarks/sculptor_pi.py --paper-setting --model qwen2.5-coder-1.5b --device cuda \\
        --data /path/to/pi_llm/dict_category_double-word_46-400_v1-1.json \\
        --episodes 5 --out benchmarks/results/sculptor_pi_qwen15
    # smoke (CPU, embedded model, 1 episode of 4 keys x 2 updates):
    python benchmarks/sculptor_pi.py --data .../dict_category_double-word_46-400_v1-1.json \\
        --n-keys 4 --updates-per-key 2 --max-tool-calls 3 --max-new-tokens 48
    # an OpenAI-compatible endpoint instead of a local model:
    python benchmarks/sculptor_pi.py --paper-setting --data ... --endpoint http://127.0.0.1:8000/v1 --endpoint-model qwen

Rows are appended to <out>.rows.jsonl as they finish; a rerun with the same settings skips
the rows already there (resume). Writes <out>.json and <out>.png.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rhea.agents.sculptor import PAPER_PROMPTS, SculptorPolicy, loop_answer, run_reward  # noqa: E402
from rhea.context import Conversation, Turn  # noqa: E402
from rhea.errors import RheaConfigError  # noqa: E402
from rhea.eval.checkpoint import read_rows  # noqa: E402
from rhea.eval.fact_recall import wilson  # noqa: E402
from rhea.eval.suites import StateTrackingSuite  # noqa: E402
from rhea.eval.stats import bootstrap_ci, paired_comparison  # noqa: E402
from rhea.policies import get_policy  # noqa: E402
from rhea.policies.assemble import count_tokens  # noqa: E402

ACK = "Noted."
METHODS = ("plain", "sculptor", "rag-bm25")
DEFAULT_METHODS = ("plain", "sculptor")
#: Appendix D.4's BM25 RAG: 200-token chunks, ranked by BM25, concatenated from high to low
#: score until about 1500 tokens; "The system prompt constrains the model to answer strictly
#: based on the retrieved context" (the paper prints no wording: this one is ours).
RAG_CHUNK_TOKENS, RAG_BUDGET_TOKENS = 200, 1500
RAG_SYSTEM_PROMPT = "Answer the question strictly based on the retrieved context below."
#: Table 1's PI-LLM setting: 46 keys, 4 ... 256 updates per key, 20 tool calls, PI-LLM prompt,
#: tool_choice="required" on the first step. max_new_tokens fits 46 "key: value" lines.
PAPER_SETTING = {"n_keys": 46, "updates_per_key": [4, 8, 16, 32, 64, 128, 256], "max_tool_calls": 20,
                 "max_new_tokens": 1024, "prompt": "pi-llm"}
SMOKE_DEFAULTS = {"n_keys": 2, "updates_per_key": [2, 4, 8], "max_tool_calls": 2, "max_new_tokens": 40,
                  "prompt": "pi-llm"}
#: Table 1, PI-LLM (update count per key / context length), for the plot and the JSON.
PAPER_TABLE1 = {"updates_per_key": [4, 8, 16, 32, 64, 128, 256], "claude-4-sonnet": {
    "baseline": [99.13, 95.65, 92.17, 84.78, 81.74, 65.22, 69.57], "acm": [90.43, 91.74, 98.26, 92.17, 91.74, 87.39, 77.83]},
    "gpt-4.1": {"baseline": [96.96, 91.30, 79.57, 67.83, 63.04, 63.91, 50.43],
                "acm": [92.17, 89.13, 93.04, 83.91, 76.09, 64.35, 60.43]},
    "deepseek-v3": {"baseline": [95.22, 85.65, 70.00, 63.91, 33.04, 32.17, 21.74],
                    "acm": [73.91, 90.00, 79.13, 37.39, 53.04, 55.65, 11.74]}}

STREAM_INTRO = "Here is a stream of key updates; a later line replaces any earlier value of its key."
STREAM_OUTRO = "Remember the current value of each key."


def settings(args) -> dict:
    """The run's settings: explicit flags, else the paper's (--paper-setting) or the smoke defaults."""
    base = PAPER_SETTING if args.paper_setting else SMOKE_DEFAULTS
    out = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in base.items()}
    out.update(layout=args.layout, episodes=args.episodes, seed=args.seed, force_first_tool=not args.no_force,
               methods=list(args.methods), data=os.path.abspath(args.data))
    return out


def episodes_by_updates(data: dict, cfg: dict) -> dict[int, list]:
    episodes = {}
    for per_key in cfg["updates_per_key"]:
        suite = StateTrackingSuite(data=data, n_episodes=cfg["episodes"], n_keys=cfg["n_keys"], filler_ratio=0.0,
                                   n_probes=1)
        # No filler: every body turn is an update; n_keys x per_key updates (keys drawn at random,
        # each key at least once), then the probe.
        episodes[per_key] = suite.generate(n_turns=cfg["n_keys"] * per_key + 1, seed=cfg["seed"])
    return episodes


def conversation_of(episode, layout: str) -> Conversation:
    updates = episode.turns[:-1]
    if layout == "turns":
        return Conversation([Turn(t.user, ACK) for t in updates])
    lines = "\n".join(f"{t.meta['key']}: {t.meta['value']}" for t in updates)
    return Conversation([Turn(f"{STREAM_INTRO}\n<updates>\n{lines}\n</updates>\n{STREAM_OUTRO}", ACK)])


def spent(generator, counter: str = "prompt_tokens") -> int:
    return int(getattr(generator, counter, 0))


def rag_chunks(text: str, tokenizer, size: int = RAG_CHUNK_TOKENS) -> list[str]:
    """`text` cut into chunks of about `size` tokens at line ends (PI-LLM's sentences are lines)."""
    chunks, current, count = [], [], 0
    for line in text.splitlines():
        n = count_tokens(line, tokenizer)
        if current and count + n > size:
            chunks.append("\n".join(current))
            current, count = [], 0
        current.append(line)
        count += n
    if current:
        chunks.append("\n".join(current))
    return chunks


def rag_messages(conv: Conversation, query: str, tokenizer) -> tuple[list[dict], int]:
    """Appendix D.4's BM25 RAG prompt for `query`, and its context tokens."""
    from rhea.backends.retrieval import BM25Retriever

    chunks = [c for turn in conv.turns for text in (turn.user, turn.assistant) for c in rag_chunks(text, tokenizer)]
    retriever = BM25Retriever(chunks)
    picked, used = [], 0
    for index, _ in retriever.search(query, len(chunks)):
        n = count_tokens(chunks[index], tokenizer)
        if picked and used + n > RAG_BUDGET_TOKENS:
            break
        picked.append(chunks[index])
        used += n
    context = "\n\n".join(picked)
    return [{"role": "system", "content": RAG_SYSTEM_PROMPT},
            {"role": "user", "content": f"Retrieved context:\n{context}\n\nQuestion: {query}"}], used


def answer(method: str, generator, tokenizer, conv: Conversation, query: str, cfg: dict) -> dict:
    """What `method` did for one probe: reply, context and full-history tokens, tool calls, policy."""
    full = get_policy("vanilla", tokenizer=tokenizer).build(conv, query)
    if method == "rag-bm25":
        messages, used = rag_messages(conv, query, tokenizer)
        reply = generator.generate(messages, max_new_tokens=cfg["max_new_tokens"])
        return {"reply": reply, "context_tokens": used + count_tokens(query, tokenizer),
                "full_history_tokens": full.ledger.full_history_tokens, "calls": [], "policy": None}
    if method == "plain":
        reply = generator.generate(full.text_messages(), max_new_tokens=cfg["max_new_tokens"])
        return {"reply": reply, "context_tokens": full.ledger.text_tokens,
                "full_history_tokens": full.ledger.full_history_tokens, "calls": [], "policy": None}
    policy = SculptorPolicy(generator, max_tool_calls=cfg["max_tool_calls"], force_first_tool=cfg["force_first_tool"],
                            max_new_tokens=cfg["max_new_tokens"], summary_max_new_tokens=cfg["max_new_tokens"],
                            loop_prompt=PAPER_PROMPTS[cfg["prompt"]], tokenizer=tokenizer)
    plan = policy.build(conv, query)
    return {"reply": loop_answer(plan), "context_tokens": plan.ledger.text_tokens,
            "full_history_tokens": plan.ledger.full_history_tokens,
            "calls": [r for r in plan.decisions.records if r.get("event") == "tool_call"], "policy": policy}


def run_backend(backend: str, generator, tokenizer, episodes: dict[int, list], cfg: dict, rows_path: Path,
                done: set) -> dict | None:
    example = None
    for per_key, group in episodes.items():
        for episode in group:
            conv, probe = conversation_of(episode, cfg["layout"]), episode.turns[-1]
            for method in cfg["methods"]:
                if (backend, method, per_key, episode.episode_id) in done:
                    continue
                before, cached, start = spent(generator), spent(generator, "cached_prompt_tokens"), time.perf_counter()
                done_by = answer(method, generator, tokenizer, conv, probe.user, cfg)
                seconds = time.perf_counter() - start
                reply, calls, policy = done_by["reply"], done_by["calls"], done_by["policy"]
                score = episode.score_turn(probe, reply)
                row = {"backend": backend, "method": method, "updates_per_key": per_key, "episode": episode.episode_id,
                       "n_keys": len(score["correct"]), "keys_correct": sum(score["correct"].values()),
                       "accuracy": score["accuracy"], "joint": bool(score["joint"]),
                       "stale": sum(score["stale"].values()) / len(score["stale"]), "reply": reply,
                       "context_tokens": done_by["context_tokens"], "full_history_tokens": done_by["full_history_tokens"],
                       "prompt_tokens_spent": spent(generator) - before,
                       "prompt_tokens_cached": spent(generator, "cached_prompt_tokens") - cached, "tool_calls": len(calls),
                       "tool_names": [c["name"] for c in calls],
                       # what each call asked and got back (heads), to tell a model's choice from a tool's failure
                       "tool_trace": [{"name": c["name"], "arguments": c["arguments"], "error": c["error"],
                                       "result_head": str(c["result"])[:240]} for c in calls],
                       "seconds": round(seconds, 2)}
                if policy is not None:
                    reward = run_reward(policy.last_result, correct=bool(score["joint"]), tokenizer=tokenizer)
                    row.update(reward=reward.reward, reward_reason=reward.reason,
                               budget_exhausted=policy.last_result.budget_exhausted)
                    if example is None:
                        example = trace_of(policy, probe.user, reply, backend)
                with rows_path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps({k: row[k] for k in ("backend", "method", "updates_per_key", "accuracy",
                                                       "context_tokens", "tool_calls", "seconds")}), flush=True)
    return example


def trace_of(policy: SculptorPolicy, query: str, reply: str, backend: str) -> dict:
    result = policy.last_result
    return {"backend": backend, "query": query, "answer": reply,
            "steps": [{"kind": s.kind, "completion": s.completion} for s in result.steps],
            "tool_calls": [{"name": t.name, "arguments": t.arguments, "error": t.error, "result": t.result[:400]}
                           for t in result.trace]}


def summarize(rows: list[dict]) -> list[dict]:
    table = []
    for backend, method, per_key in sorted({(r["backend"], r["method"], r["updates_per_key"]) for r in rows}):
        group = [r for r in rows if (r["backend"], r["method"], r["updates_per_key"]) == (backend, method, per_key)]

        def mean(field):
            return round(sum(r[field] for r in group) / len(group), 4)

        keys, right = sum(r["n_keys"] for r in group), sum(r["keys_correct"] for r in group)
        joint = sum(r["joint"] for r in group)
        entry = {"backend": backend, "method": method, "updates_per_key": per_key, "episodes": len(group),
                 "keys": keys, "accuracy": round(right / keys, 4), "accuracy_ci95": [round(x, 4) for x in wilson(right, keys)],
                 "jga": round(joint / len(group), 4), "jga_ci95": [round(x, 4) for x in wilson(joint, len(group))],
                 **{f: mean(f) for f in ("stale", "context_tokens", "full_history_tokens", "prompt_tokens_spent",
                                         "tool_calls", "seconds")},
                 "tools_used": dict(Counter(n for r in group for n in r["tool_names"]))}
        if method == "sculptor":
            entry["reward_mean"] = mean("reward")
            entry["reward_reasons"] = dict(Counter(r["reward_reason"] for r in group))
        # the episode is the unit (keys of one episode share a context): bootstrap over episodes,
        # and each method against plain on the same episodes (difference, interval, sign-flip p)
        by_episode = {r["episode"]: r["accuracy"] for r in group}
        ci = bootstrap_ci(by_episode.values())
        entry["accuracy_episode_ci95"] = [None if x is None else round(x, 4) for x in (ci.low, ci.high)]
        plain = {r["episode"]: r["accuracy"] for r in rows
                 if (r["backend"], r["method"], r["updates_per_key"]) == (backend, "plain", per_key)}
        if method != "plain" and set(plain) & set(by_episode):
            cmp = paired_comparison(by_episode, plain)
            entry["accuracy_vs_plain"] = {"diff": round(cmp.diff, 4), "episodes": cmp.n, "p": round(cmp.p_value, 4),
                                          "ci95": [None if x is None else round(x, 4) for x in (cmp.low, cmp.high)]}
        table.append(entry)
    return table


def plot(table: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc_ax, tok_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for backend, method in sorted({(r["backend"], r["method"]) for r in table}):
        line = [r for r in table if (r["backend"], r["method"]) == (backend, method)]
        xs = [r["updates_per_key"] for r in line]
        label = f"{backend} / {method}"
        acc = [r["accuracy"] for r in line]
        # the episode bootstrap where there are 2+ episodes, else Wilson over keys (narrower: keys share a context)
        by_episode = all(None not in r.get("accuracy_episode_ci95", [None]) for r in line)
        ci = [r["accuracy_episode_ci95"] if by_episode else r["accuracy_ci95"] for r in line]
        err = [[max(a - c[0], 0) for a, c in zip(acc, ci)], [max(c[1] - a, 0) for a, c in zip(acc, ci)]]
        acc_ax.errorbar(xs, acc, yerr=err, marker="o", capsize=3,
                        label=f"{label} (95% {'bootstrap, episodes' if by_episode else 'Wilson, keys'})")
        tok_ax.plot(xs, [r["context_tokens"] for r in line], marker="o", label=f"{label}: context")
        tok_ax.plot(xs, [r["prompt_tokens_spent"] for r in line], marker="x", linestyle="--", label=f"{label}: spent")
    paper = PAPER_TABLE1["claude-4-sonnet"]
    acc_ax.plot(PAPER_TABLE1["updates_per_key"], [v / 100 for v in paper["baseline"]], ":", color="grey",
                label="paper Table 1, Claude-4-Sonnet baseline")
    acc_ax.plot(PAPER_TABLE1["updates_per_key"], [v / 100 for v in paper["acm"]], "--", color="grey",
                label="paper Table 1, Claude-4-Sonnet w/ ACM tools")
    acc_ax.set(xlabel="updates per key", ylabel="key accuracy", ylim=(-0.05, 1.05), xscale="log", title=title)
    tok_ax.set(xlabel="updates per key", ylabel="tokens", yscale="log", xscale="log", title="context vs prompt tokens spent")
    acc_ax.legend(fontsize=6)
    tok_ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def local_backend(args):
    import torch

    from rhea.agents.sculptor import tool_generator
    from rhea.modeling.loading import resolve_device
    from rhea.modeling.zoo import load_base_model

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model, tokenizer = load_base_model(args.model, dtype=torch.bfloat16 if device.type == "cuda" else None)
    return tool_generator(model.to(device).eval(), tokenizer), tokenizer


def endpoint_backend(args):
    from rhea.agents.sculptor import EndpointToolGenerator
    from rhea.backends.llm import OpenAICompatibleGenerator

    client = OpenAICompatibleGenerator(args.endpoint, args.endpoint_model, timeout=args.timeout)
    # Without tools= it is a plain chat completion, so one generator serves both methods.
    return EndpointToolGenerator(client), None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="PI-LLM vocabulary JSON ({category: [values]}), e.g. "
                    "dict_category_double-word_46-400_v1-1.json")
    ap.add_argument("--paper-setting", action="store_true", help="Table 1's PI-LLM setting: 46 keys, 4..256 "
                    "updates per key, 20 tool calls, the PI-LLM prompt (flags below override single items)")
    ap.add_argument("--layout", choices=("stream", "turns"), default="stream")
    ap.add_argument("--updates-per-key", type=int, nargs="+", help="updates per key, one setting each")
    ap.add_argument("--n-keys", type=int)
    ap.add_argument("--episodes", type=int, default=1, help="episodes per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tool-calls", type=int, help="tool budget per answer (paper: 20)")
    ap.add_argument("--max-new-tokens", type=int)
    ap.add_argument("--prompt", choices=sorted(PAPER_PROMPTS), help="the sculptor method's system prompt "
                    "(appendix D; Table 1 used pi-llm)")
    ap.add_argument("--no-force", action="store_true", help="no tool_choice='required' on the first step")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS),
                    help="plain (Table 1 baseline), sculptor (w/ ACM tools), rag-bm25 (Table 2's BM25 RAG, D.4)")
    ap.add_argument("--model", default="smollm2-135m", help="zoo name (smollm2-135m, qwen2.5-coder-1.5b) or a "
                    "local model directory")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--endpoint", help="OpenAI-compatible base URL (instead of a local model)")
    ap.add_argument("--endpoint-model", help="model name at the endpoint")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--summarize-only", action="store_true", help="rewrite <out>.json and .png from the rows "
                    "already in <out>.rows.jsonl (same settings), loading no model")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "sculptor_pi"),
                    help="output stem: writes <out>.json, <out>.png, <out>.rows.jsonl")
    args = ap.parse_args(argv)
    if bool(args.endpoint) != bool(args.endpoint_model):
        ap.error("--endpoint and --endpoint-model go together (e.g. --endpoint http://127.0.0.1:8000/v1 "
                 "--endpoint-model qwen)")
    for name in ("n_keys", "max_tool_calls", "max_new_tokens", "episodes"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "max_tool_calls" else 1):
            ap.error(f"--{name.replace('_', '-')}={value} is too small")
    if args.updates_per_key and min(args.updates_per_key) < 1:
        ap.error("--updates-per-key values must be >= 1")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    # Validate the data and the episodes before any model is loaded.
    if not os.path.isfile(args.data):
        raise RheaConfigError(f"--data {args.data!r} is not a file; pass a PI-LLM vocabulary JSON")
    data = StateTrackingSuite.load(args.data)
    cfg = settings(args)
    episodes = episodes_by_updates(data, cfg)
    backend = f"endpoint:{args.endpoint_model}" if args.endpoint else args.model
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows_path, meta_path = out.with_name(out.name + ".rows.jsonl"), out.with_name(out.name + ".json")
    earlier_doc = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    earlier = earlier_doc.get("meta", {})
    if earlier.get("settings") not in (None, cfg) and rows_path.is_file():
        raise RheaConfigError(f"{rows_path} holds rows of other settings; use another --out or delete it")
    done = {(r["backend"], r["method"], r["updates_per_key"], r["episode"]) for r in read_rows(rows_path)}

    started = time.perf_counter()
    if args.summarize_only:
        if not done:
            raise RheaConfigError(f"--summarize-only: {rows_path} holds no rows; run without it first")
        example = None
    else:
        generator, tokenizer = (endpoint_backend if args.endpoint else local_backend)(args)
        example = run_backend(backend, generator, tokenizer, episodes, cfg, rows_path, done)
    rows = read_rows(rows_path)
    table = summarize(rows)
    meta = {"settings": cfg, "backend": backend, "device": args.device, "platform": platform.platform(),
            "python": platform.python_version(), "wall_seconds": round(time.perf_counter() - started, 1),
            "paper_setting": args.paper_setting,
            "note": "accuracy_ci95 (Wilson) treats keys as independent, though keys of one episode share a "
                    "context; accuracy_episode_ci95 bootstraps over episodes, and accuracy_vs_plain pairs "
                    "episodes (sign-flip p)"}
    if args.summarize_only:
        meta["wall_seconds"] = earlier.get("wall_seconds")
    if example is None:
        example = earlier_doc.get("example_trace")
    meta_path.write_text(json.dumps({"meta": meta, "table": table, "paper_table1": PAPER_TABLE1,
                                     "example_trace": example}, indent=1))
    plot(table, out.with_name(out.name + ".png"), f"PI-LLM, {backend}")
    for row in table:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
