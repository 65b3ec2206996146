"""Context-Agent vs vanilla (full history) on real topic-switching dialogue and on NTM.

Data (give at least one; paths, nothing is copied in):
- `--topiocqa PATH`: TopiOCQA conversations as MemoChat packs them (``topiocqa_test_question.jsonl``,
  e.g. ../shared/data/dialogue_corpora/memochat_topiocqa_test_question.jsonl): real information-
  seeking dialogue that switches topic (2-8 gold topics per conversation). The history holds the
  gold replies (so every turn is answered from the same history by both policies); each turn's reply
  is scored by token F1 against the gold reply, and with a judge by `rhea.eval.judge.Judge` (1-10,
  with the gold reply as reference). The forest's trees are scored against the gold topic segments.
- `--ntm PATH`: the paper's NTM benchmark JSONL (github.com/Steve2457/Context-Agent,
  input/dataset-full.jsonl). The model's own replies form the history; the final reply is judged
  against the checkpoint question as "x/y goals met" (the paper's task completion rate, TCR): needs
  a judge (--judge-model or --judge-url).
- `--generated N`: our synthetic branching conversations with rule checks (no judge needed).

Tokens per turn are counted as the paper's code counts them: the context before the current query
(system block and earlier turns; neither the query nor the reply). Chat-template prompt tokens of the
reply call and the controller's own tokens are reported beside them.

`--topic-only` runs no LLM: embedding-only topic decisions over the TopiOCQA conversations at each
`--thresholds` value (the fallback threshold `topic_threshold`), scored against the gold segments.

    # GPU session, the capable model for replies, decisions, summaries and the judge:
    python benchmarks/context_agent.py --model qwen2.5-coder-1.5b --device cuda --judge-model qwen2.5-coder-1.5b \
        --topiocqa ../shared/data/dialogue_corpora/memochat_topiocqa_test_question.jsonl --limit 30 \
        --out benchmarks/results/context_agent_qwen.json
    # smoke on the embedded 135M model (it cannot write the JSON decisions; fallbacks are recorded):
    python benchmarks/context_agent.py --topiocqa ../shared/data/dialogue_corpora/memochat_topiocqa_test_question.jsonl \
        --limit 1 --out benchmarks/results/context_agent_smoke.json
"""
from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path
from rhea.storage import output_file

RESULTS = Path(__file__).parent / "results"

CITIES = ["Lisbon", "Vienna", "Krakow", "Seville", "Porto", "Bergen"]
BAKES = [("banana bread", "walnuts"), ("focaccia", "rosemary"), ("scones", "raisins"), ("brioche", "chocolate")]

#: NTM's judging (the paper's evaluate.py protocol, paraphrased): split the checkpoint into goals, count those met.
NTM_JUDGE_SYSTEM = (
    "You grade an assistant's final reply against a checkpoint question that may list several goals. "
    "Split it into its separate goals, check each against the reply only, and count a goal as met only "
    "when the reply clearly meets it. Answer with 'x/y' only: x goals met out of y."
)


def branching_conversation(rng: random.Random, index: int) -> dict:
    """Two interleaved topics, a changed option, a return to the earlier option, a checkpoint."""
    city = rng.choice(CITIES)
    bake, extra = rng.choice(BAKES)
    first, changed = rng.sample([80, 95, 110, 120, 140, 160], 2)
    temp = rng.choice([170, 180, 190])
    turns = [
        f"I am planning a trip to {city}. My hotel budget is {first} euros per night. Suggest an area to stay.",
        f"Different topic: how long should I bake {bake} at {temp} degrees?",
        f"For the {city} trip, change the hotel budget to {changed} euros per night.",
        f"Back to the {bake}: can I add {extra}?",
        f"About {city} again: forget {changed}, go back to the original budget of {first} euros per night.",
        f"Summarize my {city} trip plan: the city and the hotel budget per night.",
    ]
    return {"id": f"generated-{index}", "source": "generated", "user_turns": turns,
            "checkpoint_question": f"Does the reply name (1) {city} and (2) a budget of {first} euros, (3) not {changed}?",
            "checks": {"required": [city, str(first)], "forbidden": [str(changed)]}}


def rule_score(reply: str, checks: dict) -> tuple[int, int]:
    met = sum(1 for s in checks["required"] if s.lower() in reply.lower())
    met += sum(1 for s in checks["forbidden"] if not re.search(rf"\b{re.escape(s)}\b", reply))
    return met, len(checks["required"]) + len(checks["forbidden"])


def ntm_judge_score(judge, reply: str, question: str) -> tuple[int | None, int | None, str]:
    verdict = judge.generate([{"role": "system", "content": NTM_JUDGE_SYSTEM},
                              {"role": "user", "content": f"Final reply: {{{reply}}}\nCheckpoint question: {question}"}],
                             max_new_tokens=16)
    match = re.search(r"(\d+)\s*/\s*(\d+)", verdict)
    if not match or int(match.group(2)) == 0 or int(match.group(1)) > int(match.group(2)):
        return None, None, verdict  # recorded as unscored, never guessed
    return int(match.group(1)), int(match.group(2)), verdict


def run_episode(policy, answerer, tokenizer, episode: dict, max_new_tokens: int, judge=None) -> dict:
    from rhea.agents.context_agent.evaluation import context_tokens, token_f1
    from rhea.context import Conversation, Turn, render

    policy.reset()
    conv, per_turn = Conversation(), []
    gold = episode.get("gold_replies")
    for t, user in enumerate(episode["user_turns"]):
        t0 = time.perf_counter()
        plan = policy.build(conv, user)
        t_build = time.perf_counter() - t0
        messages = plan.text_messages()
        reply = answerer.generate(messages, max_new_tokens=max_new_tokens)
        row = {"context_tokens": context_tokens(messages, tokenizer),
               "prompt_tokens": int(render(plan, tokenizer).input_ids.shape[1]), "build_s": round(t_build, 2),
               "reply": reply, "tiers": [d.tier for d in plan.decisions.turns],
               "records": plan.decisions.records if policy.name == "context-agent" else []}
        if gold is not None:
            row["f1"] = token_f1(reply, gold[t])
            if judge is not None:
                j = judge.rate(user, reply, reference=gold[t])
                row.update(judge_rating=j.rating, judge_error=j.error)
        conv.append(Turn(user, gold[t] if gold is not None else reply))
        policy.observe(conv[-1])
        per_turn.append(row)
    out = {"id": episode["id"], "source": episode["source"], "final_reply": per_turn[-1]["reply"], "turns": per_turn}
    if hasattr(policy, "forest"):
        out["forest_trace"] = policy.forest.trace()
        out["tree_per_turn"] = [n.tree_id for n in sorted(policy.forest.nodes(), key=lambda n: n.turn)]
    return out


def _interval(values):
    from rhea.eval.stats import bootstrap_ci

    values = [v for v in values if v is not None]
    return bootstrap_ci(values).to_dict() if values else None


def summarise(rows: list[dict], episodes: dict, names: list[str]) -> dict:
    """Means over conversations (each conversation's mean over its turns) with 95% bootstrap intervals."""
    from rhea.agents.context_agent.evaluation import topic_agreement

    summary = {}
    for name in names:
        mine = [r for r in rows if r["policy"] == name]
        s = {"conversations": len(mine),
             "context_tokens_per_turn": _interval([sum(t["context_tokens"] for t in r["turns"]) / len(r["turns"]) for r in mine]),
             "prompt_tokens_per_turn": _interval([sum(t["prompt_tokens"] for t in r["turns"]) / len(r["turns"]) for r in mine])}
        topi = [r for r in mine if r["source"] == "topiocqa"]
        if topi:
            s["topiocqa_f1"] = _interval([sum(t["f1"] for t in r["turns"]) / len(r["turns"]) for r in topi])
            ratings = [[t["judge_rating"] for t in r["turns"] if t.get("judge_rating") is not None] for r in topi]
            s["topiocqa_judge_rating"] = _interval([sum(x) / len(x) for x in ratings if x])
            s["topiocqa_judge_unparsed_turns"] = sum(1 for r in topi for t in r["turns"] if "judge_rating" in t
                                                     and t["judge_rating"] is None)
            if name == "context-agent":
                agree = [topic_agreement(r["tree_per_turn"], episodes[r["id"]]["topics"]) for r in topi]
                s["topic_pair_agreement"] = _interval([a["pair_agreement"] for a in agree])
                s["topic_switch_accuracy"] = _interval([a["switch_accuracy"] for a in agree])
        scored = [r for r in mine if r.get("met") is not None]
        s["task_completion_rate"] = _interval([r["met"] / r["goals"] for r in scored])
        s["unscored_checkpoints"] = sum(1 for r in mine if r["source"] in ("ntm", "generated") and r.get("met") is None)
        controller = [r for r in mine if "controller_prompt_tokens" in r]
        if controller:
            for key in ("controller_prompt_tokens", "controller_completion_tokens", "controller_llm_calls"):
                s[key] = sum(r[key] for r in controller)
        summary[name] = s
    if "vanilla" in names:
        summary["paired_vs_vanilla"] = paired_vs_vanilla(rows, [n for n in names if n != "vanilla"])
    return summary


def paired_vs_vanilla(rows: list[dict], names: list[str]) -> dict:
    """Each policy minus vanilla over the conversations both ran: difference, 95% bootstrap interval, sign-flip p."""
    from rhea.eval.stats import paired_comparison

    def per_conversation(name, metric):
        out = {}
        for r in rows:
            if r["policy"] != name:
                continue
            if metric == "task_completion_rate":
                out[r["id"]] = r["met"] / r["goals"] if r.get("met") is not None else None
            elif all(metric in t for t in r["turns"]):
                out[r["id"]] = sum(t[metric] for t in r["turns"]) / len(r["turns"])
        return out

    result = {}
    for name in names:
        mine = {}
        for metric in ("f1", "context_tokens", "prompt_tokens", "task_completion_rate"):
            a, b = per_conversation(name, metric), per_conversation("vanilla", metric)
            if any(k in b and a[k] is not None and b[k] is not None for k in a):
                mine[metric] = paired_comparison(a, b).to_dict()
        result[name] = mine
    return result


def topic_only(args, episodes: list[dict]) -> dict:
    """Embedding-only topic decisions (no LLM) at each threshold, against the gold segments."""
    from rhea.agents.context_agent import ContextAgent
    from rhea.agents.context_agent.evaluation import topic_agreement
    from rhea.backends.embedding import MiniLMEmbedder
    from rhea.context import Conversation, Turn

    embedder = MiniLMEmbedder()
    out = {}
    trivial = {"baseline: one tree": lambda n: ["t1"] * n, "baseline: a new tree every turn": lambda n: [str(i) for i in range(n)]}
    for name, labels in trivial.items():
        agree = [topic_agreement(labels(len(ep["topics"])), ep["topics"]) for ep in episodes]
        out[name] = {"pair_agreement": _interval([a["pair_agreement"] for a in agree]),
                     "switch_accuracy": _interval([a["switch_accuracy"] for a in agree]),
                     "predicted_switches": sum(a["predicted_switches"] for a in agree),
                     "gold_switches": sum(a["gold_switches"] for a in agree)}
    for threshold in args.thresholds:
        agree = []
        for ep in episodes:
            agent = ContextAgent(None, embedder, topic_threshold=threshold)
            conv = Conversation()
            for user, gold in zip(ep["user_turns"], ep["gold_replies"]):
                agent.build(conv, user)
                conv.append(Turn(user, gold))
                agent.observe(conv[-1])
            trees = [n.tree_id for n in sorted(agent.forest.nodes(), key=lambda n: n.turn)]
            agree.append(topic_agreement(trees, ep["topics"]))
        out[str(threshold)] = {"pair_agreement": _interval([a["pair_agreement"] for a in agree]),
                               "switch_accuracy": _interval([a["switch_accuracy"] for a in agree]),
                               "predicted_switches": sum(a["predicted_switches"] for a in agree),
                               "gold_switches": sum(a["gold_switches"] for a in agree)}
        print(f"topic_threshold={threshold}: pair agreement {out[str(threshold)]['pair_agreement']['mean']:.3f} "
              f"switch accuracy {out[str(threshold)]['switch_accuracy']['mean']:.3f} "
              f"switches {out[str(threshold)]['predicted_switches']} predicted / {out[str(threshold)]['gold_switches']} gold",
              flush=True)
    return out


def main(argv=None) -> None:
    from rhea.errors import RheaConfigError
    from rhea.modeling.loading import add_device_argument

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="zoo name or directory: replies, decisions, summaries")
    add_device_argument(parser)
    parser.add_argument("--topiocqa", help="MemoChat's topiocqa_test_question.jsonl (real topic-switching dialogue)")
    parser.add_argument("--ntm", help="the NTM benchmark JSONL (dataset-full.jsonl)")
    parser.add_argument("--generated", type=int, default=0, help="number of generated branching conversations")
    parser.add_argument("--limit", type=int, default=None, help="conversations per data file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--topic-mode", choices=["per-path", "batched"], default="per-path")
    parser.add_argument("--judge-model", help="local judge: zoo name or directory (e.g. qwen2.5-coder-1.5b)")
    parser.add_argument("--judge-url", help="OpenAI-compatible base URL of a judge (e.g. http://127.0.0.1:8000/v1)")
    parser.add_argument("--judge-name", default="judge", help="model name sent to --judge-url")
    parser.add_argument("--topic-only", action="store_true", help="no LLM: embedding-only topic decisions vs gold")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "context_agent.json"))
    parser.add_argument("--no-prefix-cache", action="store_true",
                        help="recompute every prompt in full (default: each generator keeps the KV cache of its last call "
                             "and prefills only the new tokens; same replies, rhea.backends.llm.HFGenerator)")
    parser.add_argument("--no-resume", action="store_true",
                        help="start over even if --out holds a run with the same settings (default: resume it)")
    args = parser.parse_args(argv)

    from rhea.agents.context_agent.evaluation import load_ntm, load_topiocqa

    if not (args.topiocqa or args.ntm or args.generated > 0):
        raise RheaConfigError("no data: pass --topiocqa PATH, --ntm PATH and/or --generated N")
    if args.limit is not None and args.limit < 1:
        raise RheaConfigError(f"--limit {args.limit} must be >= 1")
    if args.judge_model and args.judge_url:
        raise RheaConfigError("pass one judge: --judge-model (local) or --judge-url (a server), not both")
    if args.topic_only and not args.topiocqa:
        raise RheaConfigError("--topic-only scores topics against TopiOCQA's gold segments: pass --topiocqa PATH")
    rng = random.Random(args.seed)
    episodes = load_topiocqa(args.topiocqa, args.limit) if args.topiocqa else []  # validated before any model loads
    if args.ntm:
        episodes += load_ntm(args.ntm, args.limit)
    episodes += [branching_conversation(rng, i) for i in range(args.generated)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    import torch

    torch.set_num_threads(args.threads)
    if args.topic_only:
        topiocqa = [e for e in episodes if e["source"] == "topiocqa"]
        result = topic_only(args, topiocqa)
        out.write_text(json.dumps({"mode": "topic-only (embedding decisions, MiniLM, no LLM)", "args": vars(args),
                                   "conversations": len(topiocqa), "by_threshold": result}, indent=1))
        return

    rows = previous_rows(out, args, episodes)  # checked before the model loads
    from rhea.agents.context_agent import ContextAgent
    from rhea.backends.embedding import MiniLMEmbedder
    from rhea.backends.llm import HFGenerator, OpenAICompatibleGenerator
    from rhea.eval.judge import Judge
    from rhea.modeling.loading import load_rhea_model
    from rhea.policies import get_policy

    model = load_rhea_model(args.model, device=args.device).eval()
    tokenizer = model.tokenizer
    # adapters off: the plain base model answers for both policies. Each turn re-sends the conversation and
    # each controller question its instructions, so the generators keep their KV prefix (HFGenerator).
    cache = not args.no_prefix_cache
    answerer = HFGenerator(model, tokenizer, prefix_cache=cache)
    controller = HFGenerator(model, tokenizer, prefix_cache=cache)
    judge_gen = None
    if args.judge_model:
        judge_gen = HFGenerator(model, tokenizer, prefix_cache=cache) if args.judge_model == args.model else \
            HFGenerator(load_rhea_model(args.judge_model, device=args.device).eval(), prefix_cache=cache)
    elif args.judge_url:
        judge_gen = OpenAICompatibleGenerator(args.judge_url, args.judge_name)
    judge = Judge(judge_gen) if judge_gen is not None else None
    policies = {
        "vanilla": get_policy("vanilla", tokenizer=tokenizer),
        "context-agent": ContextAgent(controller, MiniLMEmbedder(), tokenizer=tokenizer, topic_mode=args.topic_mode),
    }
    by_id = {e["id"]: e for e in episodes}
    done = {(r["id"], r["policy"]) for r in rows}
    for episode in episodes:
        for name, policy in policies.items():
            if (episode["id"], name) in done:
                continue
            t0 = time.perf_counter()
            before = (controller.prompt_tokens, controller.completion_tokens, policies["context-agent"].navigator.llm_calls)
            result = run_episode(policy, answerer, tokenizer, episode, args.max_new_tokens,
                                 judge if episode["source"] == "topiocqa" else None)
            result.update(policy=name, seconds=round(time.perf_counter() - t0, 1), prefix_cache=not args.no_prefix_cache)
            if name == "context-agent":  # per conversation, so a resumed run adds up the same totals
                result.update(controller_prompt_tokens=controller.prompt_tokens - before[0],
                              controller_completion_tokens=controller.completion_tokens - before[1],
                              controller_llm_calls=policies["context-agent"].navigator.llm_calls - before[2])
            if episode["source"] == "generated":
                met, total = rule_score(result["final_reply"], episode["checks"])
                result.update(met=met, goals=total, scored_by="rules")
            elif episode["source"] == "ntm":
                if judge_gen is not None:
                    met, total, verdict = ntm_judge_score(judge_gen, result["final_reply"], episode["checkpoint_question"])
                    result.update(met=met, goals=total, scored_by="judge", verdict=verdict)
                else:
                    result.update(met=None, goals=None, scored_by="unscored (NTM needs --judge-model or --judge-url)")
            rows.append(result)
            turns = result["turns"]
            extra = f" F1 {sum(t['f1'] for t in turns) / len(turns):.3f}" if "f1" in turns[0] else ""
            print(f"{episode['id']:>16} {name:>13}: context tokens/turn {sum(t['context_tokens'] for t in turns) / len(turns):.0f}"
                  f"{extra} score {result.get('met')}/{result.get('goals')} ({result['seconds']} s)", flush=True)
            write(out, args, policies["context-agent"].config(), rows, by_id, list(policies))
    summary = write(out, args, policies["context-agent"].config(), rows, by_id, list(policies))
    plot(rows, output_file(out, ".png"), args.model)
    print(json.dumps(summary, indent=1))


def write(out: Path, args, config: dict, rows: list[dict], by_id: dict, names: list[str]) -> dict:
    summary = summarise(rows, by_id, names)
    out.write_text(json.dumps({"model": args.model, "args": vars(args), "config": config, "summary": summary,
                               "episodes": rows}, indent=1, ensure_ascii=False))
    return summary


#: settings a resumed run must share with the file's (--limit and --generated may change: conversations are
#: matched by id, and generated conversation i is the same whatever N)
RESUME_KEYS = ("model", "topiocqa", "ntm", "seed", "max_new_tokens", "topic_mode", "judge_model",
               "judge_url", "judge_name")


def previous_rows(out: Path, args, episodes: list[dict]) -> list[dict]:
    """Conversations an earlier run with the same settings wrote to `out` (resume), else []."""
    from rhea.eval.checkpoint import BenchError, load_resumable

    saved = None if args.no_resume else load_resumable(out, vars(args), RESUME_KEYS, settings="args", records="episodes")
    if saved is None:
        return []
    if any(r["policy"] == "context-agent" and "controller_llm_calls" not in r for r in saved["episodes"]):
        raise BenchError(f"{out} predates resumable runs (no per-conversation controller counts); "
                         "pass another --out or --no-resume")
    ids = {e["id"] for e in episodes}
    kept = [r for r in saved["episodes"] if r["id"] in ids]
    print(f"resuming {out}: {len({r['id'] for r in kept})} conversations already run", flush=True)
    return kept


def plot(rows: list[dict], path: Path, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in sorted({r["policy"] for r in rows}):
        mine = [r for r in rows if r["policy"] == name]
        longest = max(len(r["turns"]) for r in mine)
        means = [sum(r["turns"][i]["context_tokens"] for r in mine if i < len(r["turns"])) /
                 sum(1 for r in mine if i < len(r["turns"])) for i in range(longest)]
        ax.plot(range(1, longest + 1), means, marker="o", label=name)
    ax.set_xlabel("turn")
    ax.set_ylabel("context tokens (before the query)")
    ax.set_title(f"Context-Agent vs vanilla, {model}, {len({r['id'] for r in rows})} conversations", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
