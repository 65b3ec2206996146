"""A scripted multi-turn `ChatSession` on a real model, written out with its decision trace.

One policy (``--policy rhea``): a 20-turn transcript in markdown (+ JSON beside it) with,
per turn, the instructional memory and what the recognizer/IM did, each past turn's tier and
score, tokens fed vs the full history, and the latency split (compress the query, score and
plan, prefill, decode, compress the reply). The script sets two global instructions at the
start, adds a third, revokes it mid-way, replaces the length rule, asks verbose travel
questions, and asks late for a fact given early (recall).

All policies (``--all-policies``): the same conversation under every offline policy, written
as a tokens-fed-per-turn table (markdown + JSON).

    flock /tmp/rhea-heavy.lock nice -n 10 .venv/bin/python scripts/transcript.py \\
        --policy rhea --turns 20 --out benchmarks/results/transcript_rhea_smollm2.md
    flock /tmp/rhea-heavy.lock nice -n 10 .venv/bin/python scripts/transcript.py \\
        --all-policies --turns 20 --out benchmarks/results/tokens_per_turn_smollm2.md

The default model is the embedded SmolLM2-135M-Instruct (``--model`` takes any name
`rhea.modeling.loading.load_rhea_model` accepts). It is far too small to follow the
instructions; the transcript shows the machinery, not answer quality.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from rhea.storage import output_file

SCRIPT = [
    "Hi! From now on, answer every question in at most three sentences.",
    "Call me Captain in all your replies.",
    "I'm planning a two-week trip to Portugal in April with my partner. We love food, hiking and old towns, "
    "and we don't want to rent a car. Could you suggest how to split the time between Lisbon, Porto and the "
    "Algarve, and explain what we would miss if we skipped one of them?",
    "Always end your replies with the word 'Over.'",
    "My partner is vegetarian and I am allergic to shellfish. Which Portuguese dishes should we try, which "
    "should we avoid, and how do we explain our needs in a restaurant where the staff may not speak English?",
    "How do the trains between Lisbon and Porto work? I would like to know the difference between the Alfa "
    "Pendular and the Intercidades, how far ahead we should book, and whether there are discounts.",
    "What are the best day hikes near Sintra and along the Rota Vicentina for two reasonably fit people who "
    "have never hiked in Portugal? Please mention distances and how to reach the trailheads without a car.",
    "Is April a good time for the beaches in the Algarve, or will the sea be too cold for swimming? What "
    "else could we do there if the weather is bad?",
    "Stop ending your replies with 'Over.'",
    "Which neighbourhoods in Lisbon are good for a first visit, if we want to walk everywhere, avoid the "
    "steepest hills with luggage, and stay close to places that serve good vegetarian food?",
    "From now on, keep every answer under 40 words.",
    "What is a typical daily budget for two people in Porto if we stay in a mid-range guesthouse, eat out "
    "twice a day, and visit a couple of museums and a port wine cellar?",
    "Can you explain the history of the azulejo tiles we will see everywhere, and where the best places are "
    "to see old ones rather than modern copies?",
    "We are thinking of adding a day in Coimbra between Lisbon and Porto. Is it worth it, and what should we "
    "see there in one afternoon?",
    "How do we get from Porto to the Algarve by public transport, and is it better to fly or to take the "
    "train and bus?",
    "What should we pack for a spring trip that includes city walking, coastal hiking and maybe a fancy "
    "dinner, if we only want to carry one backpack each?",
    "Are there any local festivals or events in Portugal in the second half of April that we should plan "
    "around?",
    "What is a polite way to ask for the bill and to say thank you in Portuguese, and do people expect tips?",
    "Remind me: what did I tell you about my partner's diet and my allergy, and which dishes did you say we "
    "should avoid?",
    "Thanks! Summarise the whole plan for me in a few lines.",
]

#: Every registered policy that runs offline with the session's own model.
OFFLINE_POLICIES = ["vanilla", "recent-k", "bm25", "summary", "reply-soft-compress", "rhea", "rhea-no-im",
                    "rhea-all-raw", "rhea-drop-all"]


def _recognizer_records(plan) -> list[dict]:
    return [r for r in plan.decisions.records if isinstance(r, dict) and "recognizer" in r]


def run(model, policy: str, turns: list[str], max_new_tokens: int, log=print) -> list[dict]:
    """Drive a `ChatSession` through `turns`; one trace dict per turn (TurnRecord + plan decisions)."""
    from dataclasses import asdict

    from rhea.session import ChatSession

    chat = ChatSession(model, policy=policy, max_new_tokens=max_new_tokens)
    traces = []  # the session reports each finished turn: its record (timings, compress work) and plan
    chat.add_observer(traces.append)
    rows = []
    for i, text in enumerate(turns):
        reply = chat.send(text)
        plan, rec = traces[-1].plan, traces[-1].record
        t = rec.timings
        compress_query = t.get("plan_compress_s", 0.0)  # the query's latents, made while planning
        row = {
            "turn": i,
            "user": text,
            "assistant": reply,
            "record": asdict(rec),
            "instructions": list(plan.decisions.instructions),
            "recognizer": _recognizer_records(plan),
            "past_turns": [{"turn": d.turn, "tier": d.tier, "score": d.score} for d in plan.decisions.turns],
            "tokens_fed": plan.ledger.text_tokens + plan.ledger.latent_slots,
            "text_tokens": plan.ledger.text_tokens,
            "latent_slots": plan.ledger.latent_slots,
            "full_history_tokens": plan.ledger.full_history_tokens,
            "prompt_tokens": rec.prompt_tokens,
            "latency_s": {
                "compress_query": compress_query,
                "score_and_plan": max(t["plan_s"] - compress_query, 0.0),
                "prefill": t["prefill_s"],
                "decode": t["decode_s"],
                "compress_reply": t.get("compress_s", 0.0) - compress_query,
            },
            "prefix_reused_tokens": int(t.get("prefix_reused_tokens", 0)),
        }
        rows.append(row)
        lat = row["latency_s"]
        log(f"[{policy}] turn {i + 1:2d}/{len(turns)}: fed {row['tokens_fed']:5d} tok (full history "
            f"{row['full_history_tokens']:5d}), IM {len(row['instructions'])}, tiers {rec.tiers}, "
            f"prefill {lat['prefill']:.2f}s decode {lat['decode']:.2f}s")
    return rows


def _fmt_s(x: float) -> str:
    return f"{x:.2f}"


def transcript_markdown(rows: list[dict], meta: dict) -> str:
    """The transcript: a summary table, then every turn with its full decision trace."""
    out = [f"# Transcript: policy `{meta['policy']}` on {meta['model']}, {len(rows)} turns", ""]
    out += [f"- command: `{meta['command']}`", f"- date: {meta['date']}, device: {meta['device']}",
            f"- max_new_tokens={meta['max_new_tokens']}, greedy, repetition_penalty 1.15; adapters trained: "
            f"{meta['adapters_trained']}", f"- wall time: {meta['wall_s']:.0f} s", "",
            "Tokens fed = text tokens + latent slots of the plan (the REPL's count); full history = every past "
            "turn verbatim plus the query. Prompt = what the model prefilled, chat template included. Latency: "
            "compress the query (Vq), score the turns and plan (incl. the recognizer), prefill (prompt -> first "
            "token; the instruction block's KV cache is reused while the IM is unchanged), decode, compress the "
            "reply (Vk). The shared CPU was loaded by other jobs: compare latencies within this file only.", "",
            "| turn | IM | raw/latent/drop | fed | full history | prompt | reused prefix | compress q | score+plan | prefill | decode | compress reply |",
            "|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        tiers = r["record"]["tiers"]
        lat = r["latency_s"]
        out.append(f"| {r['turn'] + 1} | {len(r['instructions'])} | {tiers.get('raw', 0)}/{tiers.get('latent', 0)}/"
                   f"{tiers.get('drop', 0)} | {r['tokens_fed']} | {r['full_history_tokens']} | {r['prompt_tokens']} | "
                   f"{r['prefix_reused_tokens']} | {_fmt_s(lat['compress_query'])} | {_fmt_s(lat['score_and_plan'])} | "
                   f"{_fmt_s(lat['prefill'])} | {_fmt_s(lat['decode'])} | {_fmt_s(lat['compress_reply'])} |")
    out.append("")
    for r in rows:
        out += [f"## Turn {r['turn'] + 1}", "", f"**User:** {r['user']}", "", f"**Assistant:** {r['assistant'] or '(empty)'}", ""]
        for rec in r["recognizer"]:
            g = rec["recognizer"]
            conf = f", p={g['confidence']:.2f}" if g.get("confidence") is not None else ""
            out.append(f"- recognizer: **{g['kind']}** (source {g['source']}{conf}"
                       + (f", matched {g['matched']!r}" if g.get("matched") else "") + ")")
            for e in rec["im_events"]:
                out.append(f"  - IM {e['action']}: {e['text']!r} — {e['reason']}")
        if r["instructions"]:
            out.append("- IM contents:")
            out += [f"  - {text}" for text in r["instructions"]]
        else:
            out.append("- IM contents: (empty)")
        if r["past_turns"]:
            out.append("- past turns: " + ", ".join(
                f"#{d['turn'] + 1} {d['tier']}" + (f" ({d['score']:.3f})" if d["score"] is not None else "")
                for d in r["past_turns"]))
            scores = [d["score"] for d in r["past_turns"] if d["score"] is not None]
            tiers = [d["tier"] for d in r["past_turns"]]
            top = max(set(tiers), key=tiers.count)
            if scores:
                out.append(f"- scores: min {min(scores):.3f}, mean {sum(scores) / len(scores):.3f}, max {max(scores):.3f}"
                           + (f"; WARNING: {tiers.count(top)}/{len(tiers)} turns in tier {top!r}, the thresholds do not "
                              "separate this model's scores" if len(tiers) >= 5 and tiers.count(top) >= 0.9 * len(tiers) else ""))
        lat = r["latency_s"]
        out += [f"- tokens fed {r['tokens_fed']} ({r['text_tokens']} text + {r['latent_slots']} latent slots) vs full "
                f"history {r['full_history_tokens']}; prompt {r['prompt_tokens']} incl. template, "
                f"{r['prefix_reused_tokens']} from the reused instruction-block cache",
                f"- latency: compress query {_fmt_s(lat['compress_query'])} s, score+plan {_fmt_s(lat['score_and_plan'])} s, "
                f"prefill {_fmt_s(lat['prefill'])} s, decode {_fmt_s(lat['decode'])} s "
                f"({r['record']['new_tokens']} tokens), compress reply {_fmt_s(lat['compress_reply'])} s", ""]
    return "\n".join(out)


def tokens_table_markdown(results: dict, meta: dict) -> str:
    """Tokens fed per turn for each policy (rows: turns; columns: policies + the full history)."""
    policies = list(results)
    n = max(len(rows) for rows in results.values())
    full = next(iter(results.values()))
    out = [f"# Tokens fed per turn on {meta['model']} ({n} turns, max_new_tokens={meta['max_new_tokens']})", "",
           f"- command: `{meta['command']}`", f"- date: {meta['date']}", "",
           "Tokens fed = text tokens + latent slots of each policy's plan for that turn. The full history "
           "column is vanilla's need (every past turn verbatim + the query) in the first policy's own conversation; "
           "replies differ between policies, so each policy's own full history is in the JSON.", "",
           "| turn | " + " | ".join(policies) + " | full history |",
           "|---:|" + "---:|" * (len(policies) + 1)]
    for i in range(n):
        cells = [str(results[p][i]["tokens_fed"]) if i < len(results[p]) else "" for p in policies]
        out.append(f"| {i + 1} | " + " | ".join(cells) + f" | {full[i]['full_history_tokens'] if i < len(full) else ''} |")
    out.append("| **total** | " + " | ".join(str(sum(r["tokens_fed"] for r in results[p])) for p in policies)
               + f" | {sum(r['full_history_tokens'] for r in full)} |")
    out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--policy", help="one policy: write its transcript")
    which.add_argument("--all-policies", action="store_true", help="every offline policy: write the tokens-per-turn table")
    p.add_argument("--policies", nargs="+", default=OFFLINE_POLICIES, help="with --all-policies: which ones")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", required=True, help="markdown path; the JSON goes beside it")
    p.add_argument("--rerender", action="store_true", help="with --policy: rewrite the markdown from the JSON beside --out")
    args = p.parse_args(argv)
    if args.rerender:
        saved = json.loads(output_file(Path(args.out), ".json").read_text())
        Path(args.out).write_text(transcript_markdown(saved["turns"], saved["meta"]))
        return 0
    if not 1 <= args.turns <= len(SCRIPT):
        p.error(f"--turns must be in 1..{len(SCRIPT)} (the script has {len(SCRIPT)} messages)")
    out = Path(args.out)
    if out.suffix != ".md":
        p.error(f"--out {out} must end in .md (the JSON is written beside it)")

    import torch

    torch.set_num_threads(args.threads)
    from rhea.modeling.loading import load_rhea_model

    model = load_rhea_model(args.model).eval()
    turns = SCRIPT[: args.turns]
    started = time.time()
    meta = {
        "model": model.config.base_model or args.model,
        "device": f"{model.device} ({torch.get_num_threads()} threads)",
        "max_new_tokens": args.max_new_tokens,
        "adapters_trained": model.adapters_trained,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "scripts/transcript.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.policy:
        rows = run(model, args.policy, turns, args.max_new_tokens, log)
        meta.update(policy=args.policy, wall_s=time.time() - started)
        out.write_text(transcript_markdown(rows, meta))
        output_file(out, ".json").write_text(json.dumps({"meta": meta, "turns": rows}, indent=1, ensure_ascii=False))
    else:
        results = {}
        for policy in args.policies:  # written after every policy, so a cut-short run keeps what it has
            results[policy] = run(model, policy, turns, args.max_new_tokens, log)
            meta["wall_s"] = time.time() - started
            out.write_text(tokens_table_markdown(results, meta))
            table = {name: [{k: r[k] for k in ("turn", "tokens_fed", "text_tokens", "latent_slots", "full_history_tokens",
                                               "prompt_tokens", "prefix_reused_tokens")}
                            | {"tiers": r["record"]["tiers"], "instructions": len(r["instructions"]),
                               "seconds": sum(r["latency_s"].values())} for r in rows]
                     for name, rows in results.items()}
            output_file(out, ".json").write_text(json.dumps({"meta": meta, "policies": table}, indent=1, ensure_ascii=False))
    log(f"wrote {out} and {output_file(out, '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
