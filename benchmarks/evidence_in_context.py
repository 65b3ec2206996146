"""Is the turn a question needs in the context, and at what share of the full history's tokens? Plan-only.

The multi-session-qa suite's episodes (`rhea.eval.suites.multi_session_qa`: conversations concatenated into
histories of 300+ turns, each turn carrying its session header, then independent questions with annotated
evidence turns), answered through the policy's public path exactly as ``rhea bench`` does up to generation:
a `ChatSession` with the policy's defaults catches up on the history (`rhea.eval.episodes.feed_history`), then
each question is planned and fitted to the window (`ChatSession.begin_turn`: the policy's `build` and
`rhea.context.fit_plan`), one after the other, so a plan kept from an earlier question serves the next ones
as it would in a real run. Nothing is generated: a question's plan does not depend on the replies to the
others (`ChatSession.ask` leaves them out of the conversation), so these numbers are the suite's
``evidence_in_context`` without the generation time.

Per policy, with 95% bootstrap intervals over questions:

* ``evidence_in_context``: share of the question's evidence turns in the context (raw, latent or recalled),
  and ``evidence_raw`` (as text), as `rhea.eval.episodes.evidence_row` scores them;
* ``content_ratio``: the plan's content tokens (text tokens + latent slots) over the full history's, both
  counted by the model's tokenizer as message text (`TokenLedger`);
* ``dated``: of the evidence turns shown, the share whose session and date the context states (a recalled copy
  opens with its session header; a turn in place carries it or follows, with no gap, turns of its session the
  first of which does: `rhea.policies.assemble.assemble_plan`);
* the catch-up seconds and compress calls (what a policy spends before the first question), and plan seconds.

    python benchmarks/evidence_in_context.py --data /work/shared/data/dialogue_corpora/memochat_topiocqa_test_question.jsonl \\
        --model smollm2-135m --episodes 4 --questions 10 --out benchmarks/results/evidence_in_context_topiocqa_smollm2.json

With ``--haystack CHATS --history-tokens N`` the histories are padded with filler chats to N tokens (the suite's
haystack option: LongMemEval's construction)::

    python benchmarks/evidence_in_context.py --data /work/shared/data/dialogue_corpora/memochat_topiocqa_test_question.jsonl \\
        --haystack /work/shared/data/dialogue_corpora/ultrachat_200k_sample20.json --history-tokens 20000 \\
        --model smollm2-135m --policies rhea,bm25,recent-k --episodes 4 --questions 10 \\
        --out benchmarks/results/evidence_in_context_topiocqa_haystack_20k_smollm2.json
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rhea.context.conversation import session_header, session_of  # noqa: E402
from rhea.errors import RheaError  # noqa: E402
from rhea.eval.episodes import evidence_row, feed_history  # noqa: E402
from rhea.eval.suites.multi_session_qa import MultiSessionQASuite  # noqa: E402
from rhea.policies.registry import policy_class  # noqa: E402


def bootstrap(values, n: int = 2000, seed: int = 0) -> dict:
    """Mean and 95% percentile-bootstrap interval of `values`."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    rng = np.random.default_rng(seed)
    means = rng.choice(x, size=(n, x.size), replace=True).mean(1)
    return {"mean": round(float(x.mean()), 4), "lo": round(float(np.percentile(means, 2.5)), 4),
            "hi": round(float(np.percentile(means, 97.5)), 4), "n": int(x.size)}


def parse_option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} must be KEY=VALUE, e.g. replan_every=1")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a multi-session file rhea.eval.loaders.load_multi_session reads")
    p.add_argument("--model", default="smollm2-135m", help="zoo name or Rhea directory (its defaults are the policy's)")
    p.add_argument("--policies", default="rhea,bm25", help="comma-separated policy names")
    p.add_argument("--option", type=parse_option, action="append", default=[],
                   help="KEY=VALUE policy option for every policy that takes it (repeatable)")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--questions", type=int, default=10, help="questions per episode")
    p.add_argument("--min-history-turns", type=int, default=None, help="default: the suite's (300)")
    p.add_argument("--haystack", default=None, metavar="PATH",
                   help="filler chats (UltraChat / ShareGPT) placed between the evidence sessions until the history "
                        "holds --history-tokens tokens (the suite's haystack option)")
    p.add_argument("--history-tokens", type=int, default=None,
                   help="with --haystack: the content tokens each history reaches, counted by the model's tokenizer")
    p.add_argument("--max-new-tokens", type=int, default=32, help="reserved in the window, as the suite's run does")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="JSON file for the summary and per-question rows")
    return p.parse_args(argv)


def session_stated(plan, conversation, turn: int) -> bool | None:
    """Whether the context states the session (and date) of `turn`: a recalled copy opens with its session header;
    a turn shown in place does, or follows, with no turn left out between, turns of its session the first of which
    does. None when the turn is not in the context."""
    decision = next(d for d in plan.decisions.turns if d.turn == turn)
    header = session_header(conversation[turn])
    if header is None:
        return None

    def opens(index: int, recalled: bool) -> bool:
        users = [m for m, src in enumerate(plan.sources) if src == index and plan.messages[m]["role"] == "user"]
        if not users:
            return False
        content = plan.messages[users[-1] if recalled else users[0]]["content"]
        return isinstance(content, str) and content.startswith(session_header(conversation[index]))

    if decision.recalled and opens(turn, True):
        return True
    if decision.tier == "drop":
        return None if not decision.recalled else False
    first = turn
    while first > 0 and plan.decisions.turns[first - 1].tier != "drop" and \
            session_of(conversation[first - 1]) == session_of(conversation[turn]):
        first -= 1
    return opens(first, False)


def history_summary(episode) -> dict:
    """The episode's history in numbers: turns, sessions, and with a haystack its tokens and filler."""
    meta = episode.meta
    out = {k: meta[k] for k in ("history_turns", "sessions", "history_tokens") if k in meta}
    if "filler_turns" in meta:
        out.update(filler_turns=len(meta["filler_turns"]), filler_sessions=len(meta["filler_sessions"]))
    return out


def plan_episode(model, policy: str, episode, *, max_new_tokens: int, kwargs: dict) -> tuple[dict, list[dict]]:
    """The catch-up cost and one row per question of `episode` under `policy`, planned and not answered."""
    from rhea.session import ChatSession

    session = ChatSession(model, policy=policy, max_new_tokens=max_new_tokens, policy_kwargs=kwargs)
    before = session.policy.counters()
    fed_s = feed_history(session, episode)
    after = session.policy.counters()
    catch = {"history_turns": len(session.conversation), "catch_up_s": round(fed_s, 3),
             **{f"catch_up_{k}": round(after[k] - before.get(k, 0.0), 3) for k in after}}
    rows = []
    for turn in episode.turns:
        t0 = time.perf_counter()
        try:
            plan = session.begin_turn(turn.user).plan
        except RheaError as e:
            rows.append({"question": turn.user, "error": f"{type(e).__name__}: {e}", "evidence_in_context": 0.0})
            continue
        plan_s = time.perf_counter() - t0
        ledger = plan.ledger
        evidence = list(turn.meta["evidence"])
        dated = [session_stated(plan, session.conversation, e) for e in evidence]
        by_turn = {d.turn: d for d in plan.decisions.turns}
        rows.append({
            "question": turn.user, "category": turn.meta.get("category"), "evidence": evidence,
            **evidence_row(turn, plan),
            "evidence_tiers": [by_turn[e].tier + ("+recalled" if by_turn[e].recalled else "") for e in evidence],
            "evidence_notes": [by_turn[e].note for e in evidence],
            "dated": sum(d for d in dated if d is not None) / max(sum(d is not None for d in dated), 1),
            "content_tokens": ledger.text_tokens + ledger.latent_slots, "full_history_tokens": ledger.full_history_tokens,
            "content_ratio": (ledger.text_tokens + ledger.latent_slots) / max(ledger.full_history_tokens, 1),
            "tiers": {t: sum(d.tier == t for d in plan.decisions.turns) for t in ("raw", "latent", "drop")},
            "recalled": sum(d.recalled for d in plan.decisions.turns), "plan_s": round(plan_s, 3),
            "fresh_plan": next((r["replan"]["fresh"] for r in plan.decisions.records if "replan" in r), True),
        })
    return catch, rows


def summarize(rows: list[dict], catches: list[dict], kwargs: dict) -> dict:
    """One policy's measures over `rows` (one per question), with the catch-up cost of each episode."""
    ok = [r for r in rows if "error" not in r]
    mean = lambda key: float(np.mean([r[key] for r in ok])) if ok else None  # noqa: E731
    return {
        "kwargs": kwargs,
        "evidence_in_context": bootstrap(r["evidence_in_context"] for r in rows),
        "evidence_raw": bootstrap(r.get("evidence_raw") for r in ok),
        "content_ratio": bootstrap(r["content_ratio"] for r in ok),
        "dated": bootstrap(r["dated"] for r in ok if r["evidence_in_context"] > 0),
        "content_tokens_mean": mean("content_tokens"), "full_history_tokens_mean": mean("full_history_tokens"),
        "plan_s_mean": mean("plan_s"), "errors": len(rows) - len(ok), "catch_up": catches, "rows": rows,
    }


def write(out: dict, path: str | None) -> None:
    """`out` as JSON at `path` (atomically: a temporary file renamed over it); nothing when `path` is None."""
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
        tmp.replace(path)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from rhea.modeling.loading import load_rhea_model

    suite_kwargs = {} if args.min_history_turns is None else {"min_history_turns": args.min_history_turns}
    if args.haystack is not None or args.history_tokens is not None:
        suite_kwargs.update(haystack=args.haystack, history_tokens=args.history_tokens)
    # every file is read (and a bad one refused) before the model loads; the histories need its tokenizer
    suite = MultiSessionQASuite(data=MultiSessionQASuite.load(args.data), n_episodes=args.episodes, **suite_kwargs)
    model = load_rhea_model(args.model)
    suite.tokenizer = model.tokenizer
    episodes = suite.generate(n_turns=args.questions, seed=args.seed)
    options = dict(args.option)
    out = {"benchmark": "evidence_in_context", "command": " ".join(sys.argv), "model": args.model,
           "data": Path(args.data).name, "episodes": args.episodes, "questions_per_episode": args.questions,
           "seed": args.seed, "threads": args.threads, "options": options,
           **({"haystack": Path(args.haystack).name, "history_tokens_target": args.history_tokens}
              if args.haystack else {}),
           "histories": [history_summary(e) for e in episodes],
           "complete": False, "policies": {}}
    for policy in args.policies.split(","):
        accepted = inspect.signature(policy_class(policy).__init__).parameters
        kwargs = {k: v for k, v in options.items() if k in accepted}
        catches, rows = [], []
        for n, episode in enumerate(episodes):
            catch, ep_rows = plan_episode(model, policy, episode, max_new_tokens=args.max_new_tokens, kwargs=kwargs)
            catches.append(catch)
            rows += [{"episode": n, **r} for r in ep_rows]
            print(f"{policy} episode {n}: {catch} evidence "
                  f"{np.mean([r['evidence_in_context'] for r in ep_rows]):.3f}", flush=True)
            out["policies"][policy] = summarize(rows, catches, kwargs)
            write(out, args.out)  # after each episode, so a long run stopped early keeps what it measured
        s = out["policies"][policy]
        print(f"{policy}: evidence {s['evidence_in_context']} ratio {s['content_ratio']} dated {s['dated']}", flush=True)
    out["complete"] = True
    write(out, args.out)
    return out


if __name__ == "__main__":
    main()
