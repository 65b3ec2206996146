"""Two judges on the same policy replies: does a second judge rank two policies' answers as the run's judge did?

`judge_agreement.py` measures a judge on MT-Bench's reference answers (good vs mismatched: an easy
contrast). What a quality claim needs is finer: on the replies of a judged long-horizon run, two
policies' answers to the same turn of the same episode are close, and the claim rests on which one
the judge prefers. This takes a run rated by `rhea judge` (or inline), draws --pairs turns that
both policies answered (seeded), rates both replies with a second judge (the same FastChat
prompts: `rhea.eval.judge_run.pending`), and reports

* how the two judges' ratings go together over the replies: Pearson and Spearman correlation, mean
  absolute difference, each with a 95% bootstrap interval over pairs;
* whether they prefer the same policy on a pair: agreement among the pairs neither judge ties, and
  how many pairs each ties;
* the paired difference (first policy minus second) on the drawn pairs by each judge, with intervals.

Resumable: each rating is appended to ``<out>.rows.jsonl`` as it is made (under the judge recorded in
``<out>.rows.judge.json``; another judge is refused). Writes ``<out>.json``,
``<out>.md`` and ``<out>.png`` (the second judge's rating against the run's).

    python benchmarks/judge_consistency.py --run benchmarks/results/bench_qwen_ep8_lh/long-horizon \\
        --judge-local qwen2.5-coder-1.5b --pairs 16 --out benchmarks/results/judge_consistency_qwen_lh
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rhea.storage import output_file  # noqa: E402

N_BOOT = 2000


def paired_turns(results: dict, policies: tuple[str, str], differing: bool = False) -> list[tuple[str, int]]:
    """(episode id, turn index) of every question turn both `policies` answered and the run's judge rated;
    with `differing`, only those where the two replies are not word for word the same (a judge given the same
    reply in the same conversation rates it the same, so those pairs say nothing about a difference)."""
    rated, replies = [], []
    for policy in policies:
        rows = [r for r in results["policies"][policy]["turns"] if r["kind"] == "query"]
        rated.append({(r["episode_id"], r["turn_index"]): r.get("judge_rating") for r in rows})
        replies.append({(r["episode_id"], r["turn_index"]): r.get("reply") for r in rows})
    return sorted(k for k in rated[0] if k in rated[1] and rated[0][k] is not None and rated[1][k] is not None
                  and not (differing and replies[0][k] == replies[1][k]))


def draw(turns: list[tuple[str, int]], n: int, seed: int) -> list[tuple[str, int]]:
    """`n` of `turns` (all of them when fewer), seeded, in the run's order."""
    if n >= len(turns):
        return list(turns)
    return sorted(random.Random(seed).sample(turns, n))


def rate(results: dict, judge, policies: tuple[str, str], pairs: list[tuple[str, int]], rows_path: Path,
         log=print) -> dict[tuple[str, str, int], dict]:
    """The second judge's rating of both policies' replies on each pair, resumed from and appended to `rows_path`."""
    from rhea.eval.checkpoint import read_rows
    from rhea.eval.judge_run import pending, rate_into

    wanted = {(p, e, t) for e, t in pairs for p in policies}
    done = {(r["policy"], r["episode_id"], r["turn_index"]): r for r in read_rows(rows_path)}
    todo = [(k, req) for k, req in pending(results) if k in wanted and k not in done]
    if todo and judge is None:
        raise SystemExit(f"{len(todo)} ratings are still to be made: pass --judge-local or --judge-url")
    if todo:
        rate_into(rows_path, todo, judge, done,
                  on_batch=lambda _, seconds: log(f"{len(done)} of {len(wanted)} ratings ({seconds:.1f} s each)"))
    return {k: v for k, v in done.items() if k in wanted}


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _pearson(a: list[float], b: list[float]) -> float | None:
    if len(a) < 2 or statistics.pstdev(a) == 0 or statistics.pstdev(b) == 0:
        return None
    return statistics.correlation(a, b)


def _spearman(a: list[float], b: list[float]) -> float | None:
    return _pearson(_ranks(a), _ranks(b))


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _interval(pairs: list, stat, seed: int = 0) -> dict:
    """`stat(pairs)` and its 95% percentile-bootstrap interval over pairs (resamples where it is undefined are skipped)."""
    value = stat(pairs)
    rng = random.Random(seed)
    boot = [s for s in (stat([rng.choice(pairs) for _ in pairs]) for _ in range(N_BOOT)) if s is not None]
    if value is None or len(boot) < N_BOOT // 2:
        return {"value": value, "low": None, "high": None}
    boot.sort()
    return {"value": value, "low": boot[int(0.025 * len(boot))], "high": boot[min(len(boot) - 1, int(0.975 * len(boot)))]}


def summarise(results: dict, policies: tuple[str, str], pairs: list[tuple[str, int]],
              second: dict[tuple[str, str, int], dict]) -> dict:
    """The statistics over the pairs both judges rated (a pair with an unrated reply is left out and counted)."""
    first = {(p, r["episode_id"], r["turn_index"]): r.get("judge_rating")
             for p in policies for r in results["policies"][p]["turns"]}
    table = []  # per pair: (a_p1, a_p2, b_p1, b_p2)
    for e, t in pairs:
        ratings = [first.get((p, e, t)) for p in policies] + [(second.get((p, e, t)) or {}).get("rating")
                                                               for p in policies]
        if all(x is not None for x in ratings):
            table.append(tuple(float(x) for x in ratings))

    def flat(rows):
        return [x for r in rows for x in (r[0], r[1])], [x for r in rows for x in (r[2], r[3])]

    def pearson(rows):
        return _pearson(*flat(rows))

    def spearman(rows):
        return _spearman(*flat(rows))

    def mad(rows):
        a, b = flat(rows)
        return statistics.fmean(abs(x - y) for x, y in zip(a, b)) if a else None

    def decided(rows):
        return [r for r in rows if _sign(r[0] - r[1]) and _sign(r[2] - r[3])]

    def agreement(rows):
        both = decided(rows)
        return statistics.fmean(_sign(r[0] - r[1]) == _sign(r[2] - r[3]) for r in both) if both else None

    def diff(i, j):
        return lambda rows: statistics.fmean(r[i] - r[j] for r in rows) if rows else None

    return {
        "policies": list(policies), "pairs_drawn": len(pairs), "pairs_rated": len(table),
        "pearson": _interval(table, pearson), "spearman": _interval(table, spearman),
        "mean_abs_difference": _interval(table, mad),
        "preference_agreement": _interval(table, agreement), "pairs_both_decided": len(decided(table)),
        "ties_run_judge": sum(1 for r in table if r[0] == r[1]), "ties_second_judge": sum(1 for r in table if r[2] == r[3]),
        "difference_run_judge": _interval(table, diff(0, 1)), "difference_second_judge": _interval(table, diff(2, 3)),
        "mean_rating_run_judge": statistics.fmean(flat(table)[0]) if table else None,
        "mean_rating_second_judge": statistics.fmean(flat(table)[1]) if table else None,
        "table": [list(r) for r in table],
    }


def _fmt(stat: dict, digits: int = 2) -> str:
    if stat["value"] is None:
        return "undefined"
    if stat["low"] is None:
        return f"{stat['value']:.{digits}f}"
    return f"{stat['value']:.{digits}f} [{stat['low']:.{digits}f}, {stat['high']:.{digits}f}]"


def report(summary: dict, run_judge: str, second_judge: str, command: str) -> str:
    p1, p2 = summary["policies"]
    s = summary
    return "\n".join([
        f"# Two judges on the same replies: {run_judge} vs {second_judge}", "",
        f"{s['pairs_rated']} turns (of {s['pairs_drawn']} drawn) answered by both `{p1}` and `{p2}`; each reply rated by "
        "the run's judge and by the second judge (FastChat prompts, the run's own multi-turn context). Intervals: 95% "
        "bootstrap over pairs.", "",
        f"- Pearson r over the {2 * s['pairs_rated']} replies: **{_fmt(s['pearson'])}**; Spearman ρ: {_fmt(s['spearman'])}",
        f"- mean |difference| of the ratings: {_fmt(s['mean_abs_difference'])} (mean rating: run's judge "
        f"{s['mean_rating_run_judge'] or float('nan'):.2f}, second judge {s['mean_rating_second_judge'] or float('nan'):.2f})",
        f"- the same policy preferred on **{_fmt(s['preference_agreement'])}** of the {s['pairs_both_decided']} pairs "
        f"neither judge ties (ties: run's judge {s['ties_run_judge']}, second judge {s['ties_second_judge']})",
        f"- `{p1}` minus `{p2}` on these pairs: run's judge {_fmt(s['difference_run_judge'])}, second judge "
        f"{_fmt(s['difference_second_judge'])}", "",
        f"Reproduce: `{command}`", ""])


def plot(summary: dict, path: Path, run_judge: str, second_judge: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.2))
    rng = random.Random(0)
    for i, (policy, marker) in enumerate(zip(summary["policies"], "os")):
        xs = [r[i] + rng.uniform(-0.08, 0.08) for r in summary["table"]]
        ys = [r[2 + i] + rng.uniform(-0.08, 0.08) for r in summary["table"]]
        ax.scatter(xs, ys, marker=marker, alpha=0.6, label=policy)
    ax.plot([1, 10], [1, 10], color="grey", lw=0.8, ls="--")
    ax.set_xlabel(f"run's judge ({run_judge})", fontsize=8)
    ax.set_ylabel(f"second judge ({second_judge})", fontsize=8)
    ax.set_title(f"r = {_fmt(summary['pearson'])}; same preference {_fmt(summary['preference_agreement'])}", fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _name(described: dict) -> str:
    return described["judge"] + (" (direct)" if described.get("explain") is False else " (explaining)")


def _saved_judge(rows_path: Path) -> dict | None:
    path = rows_path.with_suffix(".judge.json")
    return json.loads(path.read_text()) if path.is_file() else None


def _save_judge(rows_path: Path, described: dict) -> None:
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    rows_path.with_suffix(".judge.json").write_text(json.dumps(described, indent=1))


def main(argv=None, judge=None) -> int:
    """`judge`: a ready `rhea.eval.judge.Judge` instead of the one the arguments describe (tests)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a judged long-horizon `rhea bench` folder (results.json)")
    ap.add_argument("--policies", default=None, help="the two policies to pair, a,b (default: the run's first two)")
    ap.add_argument("--pairs", type=int, default=16, help="turns to draw (both policies' replies rated on each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--differing", action="store_true",
                    help="draw only turns where the two policies' replies differ (identical replies rate alike)")
    ap.add_argument("--judge-local", default=None, help="zoo name or path of the second judge")
    ap.add_argument("--judge-url", default=None, help="OpenAI-compatible endpoint of the second judge")
    ap.add_argument("--judge-model", default="gpt-4")
    ap.add_argument("--direct", action="store_true", help="the second judge rates without an explanation")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4, help="ratings decoded together")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, required=True, help="output path without extension")
    args = ap.parse_args(argv)
    if args.pairs < 2 or args.batch < 1:
        ap.error("--pairs must be >= 2 and --batch >= 1")
    if judge is None and args.judge_local and args.judge_url:
        ap.error("pass one of --judge-local and --judge-url")
    if args.direct and args.judge_url:
        ap.error("--direct reads a local judge's probabilities; pass --judge-local MODEL")

    from rhea.eval.judge_run import read_run

    try:
        results = read_run(args.run)
    except Exception as e:  # BenchError: what is wrong with the folder, and how to go on
        ap.error(str(e))
    run_described = (results["config"].get("suite_kwargs") or {}).get("judge")
    if not run_described:
        ap.error(f"{args.run} is not judged yet: rate it first (`rhea judge {args.run} ...`)")
    policies = tuple(args.policies.split(",")) if args.policies else tuple(results["policies"])[:2]
    if len(policies) != 2 or any(p not in results["policies"] for p in policies) or policies[0] == policies[1]:
        ap.error(f"--policies: name two different policies of the run ({', '.join(results['policies'])})")
    pairs = draw(paired_turns(results, policies, differing=args.differing), args.pairs, args.seed)
    if len(pairs) < 2:
        ap.error(f"{args.run}: fewer than 2 turns rated for both {policies[0]} and {policies[1]}")

    rows_path = output_file(args.out, ".rows.jsonl")
    if judge is None and (args.judge_local or args.judge_url):
        from rhea.eval.judge import Judge

        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        if args.judge_local:
            from rhea.backends.llm import HFGenerator
            from rhea.modeling.loading import load_rhea_model

            generator = HFGenerator(load_rhea_model(args.judge_local, device=args.device))
        else:
            from rhea.backends.llm import OpenAICompatibleGenerator

            generator = OpenAICompatibleGenerator(args.judge_url, model=args.judge_model)
        judge = Judge(generator, max_new_tokens=args.max_new_tokens, batch_size=args.batch, explain=not args.direct)
    saved = _saved_judge(rows_path)
    second_described = judge.describe() if judge is not None else saved
    if judge is not None and saved is not None and saved != second_described:
        ap.error(f"{rows_path} holds ratings by another judge ({saved}); pass the same settings or another --out")
    if second_described is None:
        ap.error(f"no ratings in {rows_path} yet: pass --judge-local MODEL or --judge-url URL")
    if second_described == run_described:
        ap.error("the second judge is the run's judge with the same settings: pass another judge, or --direct")
    _save_judge(rows_path, second_described)
    run_judge, second_judge = _name(run_described), _name(second_described)
    started = time.perf_counter()
    second = rate(results, judge, policies, pairs, rows_path)
    summary = summarise(results, policies, pairs, second)
    command = "python benchmarks/judge_consistency.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"run": str(args.run), "run_judge": run_described, "second_judge": second_described, "seed": args.seed,
              "seconds_this_call": round(time.perf_counter() - started, 1),
              "seconds_per_rating": (statistics.fmean(r["seconds"] for r in second.values()) if second else None),
              "summary": summary, "command": command}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    output_file(args.out, ".json").write_text(json.dumps(result, indent=1))
    output_file(args.out, ".md").write_text(report(summary, run_judge, second_judge, command))
    plot(summary, output_file(args.out, ".png"), run_judge, second_judge)
    print(report(summary, run_judge, second_judge, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
