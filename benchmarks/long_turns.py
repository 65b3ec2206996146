"""Long turns against the window: every policy answers every turn of a conversation of long turns.

    OMP_NUM_THREADS=1 python benchmarks/long_turns.py [--model smollm2-135m] [--policies all] \
        [--turns 200] [--user-tokens 200] [--reply-tokens 400] [--max-new-tokens 8] \
        [--answer-every 1] [--window N] [--device auto] \
        [--out benchmarks/results/long_turns_200x600_smollm2-135m]

Each policy gets a fresh `ChatSession` on the model and a conversation of ``--turns`` turns, each a
``--user-tokens`` message (it opens with a fact, "Note 17: the code for locker 17 is 4821.", then
explanatory text) and a ``--reply-tokens`` stored reply, both counted with the model's tokenizer.
Per turn the session plans the context (`ChatSession.begin_turn`: the policy's plan, fitted to the
window less ``--max-new-tokens``) and the model answers that plan for real (`generate_from_plan`,
or the answer a policy wrote while planning, as Sculptor does); the reply stored is the long text,
not the model's short answer, so that every turn weighs ``user + reply`` tokens whatever the
model writes. ``--answer-every K`` answers every K-th turn (and the last) and only plans the
others, for a slow machine; the JSON says so.

Per turn a row: ``rendered_tokens`` (the prompt the model saw, `<mem>` slots included),
``prompt_limit`` (the budget: window less max_new_tokens), ``budget_recorded`` (the plan's
decisions carry the ``budget`` record), ``dropped`` / ``cut`` (turns the fit left out or cut),
``answered`` and ``new_tokens``, ``plan_s`` / ``generate_s``, and ``bytes_held`` (KV cache +
latents + instructions). Per policy: turns, turns answered, turns over the window (must be 0), the
peak prompt, whether every plan recorded its budget. ``--window`` declares a smaller window than
the model's own (its budget is what every plan must fit; recorded in the JSON); the agents' inner
generators keep the model's window.

Writes ``<out>.json`` (the summary) and ``<out>.rows.jsonl`` (one row per policy and turn). A
rerun with the same ``--out`` skips the policies already complete in the rows file (plain or gzipped).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # cost_curve.builtin_turns

from rhea.errors import RheaConfigError  # noqa: E402


class LongTurnsError(RheaConfigError):
    """A bad option of benchmarks/long_turns.py."""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--policies", default="all", help="comma-separated policy names, or all (every registered one)")
    p.add_argument("--turns", type=int, default=200)
    p.add_argument("--user-tokens", type=int, default=200)
    p.add_argument("--reply-tokens", type=int, default=400)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--answer-every", type=int, default=1)
    p.add_argument("--window", type=int, default=None, help="declare this window instead of the model's own")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/long_turns_200x600_smollm2-135m")
    args = p.parse_args(argv)
    for name in ("turns", "user_tokens", "reply_tokens", "max_new_tokens", "answer_every"):
        value = getattr(args, name)
        if value < 1:
            raise LongTurnsError(f"--{name.replace('_', '-')} {value} must be at least 1")
    if args.user_tokens < 16:
        raise LongTurnsError(f"--user-tokens {args.user_tokens} must be at least 16 (the fact opening each message)")
    if args.window is not None and args.window <= args.max_new_tokens + args.user_tokens + 64:
        raise LongTurnsError(f"--window {args.window} leaves no room for one {args.user_tokens}-token message and "
                             f"{args.max_new_tokens} new tokens; give a larger window or leave --window out")
    out = Path(args.out)
    if out.exists() and out.is_dir():
        raise LongTurnsError(f"--out {out} is a directory; give a file stem (it writes <out>.json and <out>.rows.jsonl)")
    return args


def text_of(tokenizer, n_tokens: int, rng: random.Random, opening: str = "") -> str:
    """Explanatory text of exactly `n_tokens` tokens (the model's tokenizer), after `opening`."""
    from cost_curve import builtin_turns

    unk = getattr(tokenizer, "unk_token_id", None)

    def encode(text: str) -> list[int]:  # words a tokenizer cannot spell are left out, so the count round-trips
        return [t for t in tokenizer(text, add_special_tokens=False)["input_ids"] if t != unk]
    ids = encode(opening) if opening else []
    while len(ids) < n_tokens:
        user, reply = builtin_turns(1, seed=rng.randrange(1 << 30))[0]
        ids += encode(" " + reply)
    return tokenizer.decode(ids[:n_tokens], skip_special_tokens=True)


def conversation_texts(tokenizer, args) -> list[tuple[str, str]]:
    rng = random.Random(args.seed)
    out = []
    for i in range(args.turns):
        fact = f"Note {i}: the code for locker {i} is {rng.randrange(1000, 10000)}."
        out.append((text_of(tokenizer, args.user_tokens, rng, fact), text_of(tokenizer, args.reply_tokens, rng)))
    return out


def budget_record(plan) -> dict | None:
    return next((r for r in reversed(plan.decisions.records) if r.get("event") == "budget"), None)


def run_policy(model, name: str, texts, args, write_row) -> dict:
    from rhea.context import measure_budget, render
    from rhea.session import ChatSession
    from rhea.session.generation import Generation, generate_from_plan

    chat = ChatSession(model, policy=name, max_new_tokens=args.max_new_tokens)
    if args.window is not None:
        chat.token_budget = measure_budget(chat.tokenizer, args.window, args.max_new_tokens)
    limit = chat.token_budget.prompt_tokens if chat.token_budget is not None else None
    rows = []
    t_policy = time.perf_counter()
    for i, (user, reply) in enumerate(texts):
        staged = chat.begin_turn(user)
        n = int(render(staged.plan, chat.tokenizer).input_ids.shape[1])
        rec = budget_record(staged.plan)
        answer = i % args.answer_every == 0 or i == len(texts) - 1
        t0 = time.perf_counter()
        new_tokens = None
        if answer:
            if staged.answered is not None:
                gen = chat._answered_generation(staged)
            else:
                gen = generate_from_plan(model, staged.plan, max_new_tokens=args.max_new_tokens,
                                         adapter=chat._adapter_for(staged.plan))
            new_tokens = gen.new_tokens
        t_gen = time.perf_counter() - t0
        chat.end_turn(staged, Generation(reply, n, staged.plan.ledger.latent_slots, new_tokens or 0))
        row = {"policy": name, "turn": i, "rendered_tokens": n, "prompt_limit": limit,
               "budget_recorded": rec is not None, "dropped": len(rec["dropped"]) if rec else None,
               "cut": len(rec["cut"]) if rec else None, "answered": bool(answer),
               "new_tokens": new_tokens, "plan_s": round(staged.t_plan, 4), "generate_s": round(t_gen, 4),
               "bytes_held": chat.bytes_held()}
        write_row(row)
        rows.append(row)
    summary = summarize_rows(rows, len(texts))
    summary["seconds"] = round(time.perf_counter() - t_policy, 1)
    return summary


def summarize_rows(rows: list[dict], n_turns: int) -> dict:
    """A policy's summary from its rows (the run's own, or a resumed run's policies done before)."""
    limit = rows[0]["prompt_limit"]
    over = sum(1 for r in rows if limit is not None and r["rendered_tokens"] > limit)
    asked = [r for r in rows if r["answered"]]
    return {"turns": len(rows), "answered": sum(r["new_tokens"] is not None for r in asked),
            "answered_asked": len(asked),
            "over_window": over, "peak_rendered_tokens": max(r["rendered_tokens"] for r in rows),
            "budget_recorded": sum(r["budget_recorded"] for r in rows), "prompt_limit": limit,
            "dropped_turns_last": rows[-1]["dropped"] or 0,
            "plan_s": round(sum(r["plan_s"] for r in rows), 1), "generate_s": round(sum(r["generate_s"] for r in rows), 1),
            "bytes_held_last": sum(rows[-1]["bytes_held"].values()),
            "ok": over == 0 and len(rows) == n_turns and all(r["budget_recorded"] for r in rows)
            and all(r["new_tokens"] is not None for r in asked)}


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from rhea.modeling.loading import load_rhea_model
    from rhea.policies import available_policies

    names = available_policies() if args.policies == "all" else [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(names) - set(available_policies()))
    if unknown or not names:
        raise LongTurnsError(f"--policies {args.policies!r}: unknown {unknown or 'empty list'}; "
                             f"choose from {', '.join(available_policies())} or all")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from rhea.eval.report import unpack_stored

    rows_path = unpack_stored(out.with_name(out.name + ".rows.jsonl"))  # a committed run's rows are gzipped
    done: dict[str, list[dict]] = {}
    if rows_path.exists():
        for line in rows_path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                done.setdefault(row["policy"], []).append(row)
    complete = {p for p, rows in done.items() if len(rows) == args.turns}
    kept = [row for p in names if p in complete for row in done[p]]
    with open(rows_path, "w", encoding="utf-8") as f:  # drops a policy's partial rows: it reruns whole
        f.writelines(json.dumps(r) + "\n" for r in kept)

    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device == "auto" else args.device)
    model = load_rhea_model(args.model, device=device)
    model.eval()
    texts = conversation_texts(model.tokenizer, args)
    result = {"benchmark": "long_turns", "model": args.model, "device": device, "window": model.max_context,
              "declared_window": args.window, "turns": args.turns, "user_tokens": args.user_tokens,
              "reply_tokens": args.reply_tokens, "max_new_tokens": args.max_new_tokens,
              "answer_every": args.answer_every, "torch_threads": torch.get_num_threads(),
              "torch": torch.__version__, "machine": platform.machine(), "policies": {}}
    for name in names:
        if name in complete:
            result["policies"][name] = {**summarize_rows(done[name], args.turns), "resumed": True}
            continue
        with open(rows_path, "a", encoding="utf-8") as f:
            def write_row(row, f=f):
                f.write(json.dumps(row) + "\n")
                f.flush()
            with torch.inference_mode():
                s = run_policy(model, name, texts, args, write_row)
        result["policies"][name] = s
        print(f"{name:22s} {s['turns']} turns, {s['answered']}/{s['answered_asked']} answered, "
              f"{s['over_window']} over the window, peak {s['peak_rendered_tokens']}/{s['prompt_limit']} tokens, "
              f"{s['seconds']} s", flush=True)
        out.with_name(out.name + ".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    result["all_ok"] = all(s["ok"] for s in result["policies"].values())
    out.with_name(out.name + ".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}.json ({'every policy answered every turn within the window' if result['all_ok'] else 'NOT all ok'})")
    return 0 if result["all_ok"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RheaConfigError as e:
        print(f"long_turns: error: {e}", file=sys.stderr)
        sys.exit(1)
