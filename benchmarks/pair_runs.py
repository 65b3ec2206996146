"""Pair policies from several `rhea bench` runs of the same episodes: intervals and paired tests in one report.

A policy rerun later (other adapters, other options) lands in its own ``--out`` folder; its episodes are the
earlier run's when the suite, turns, episodes and seed are the same (``config.episodes_sha256``). This merges the
chosen policies of those runs under new labels and reports them as one run (`rhea.eval.stats_report`), so the
rerun is compared with the earlier baseline episode by episode.

    python benchmarks/pair_runs.py \\
        --policy vanilla=benchmarks/results/bench_qwen_ep8_bf16/instruction-retention:vanilla \\
        --policy rhea-per-turn=benchmarks/results/bench_qwen_ep8_step1181/instruction-retention:rhea \\
        --policy rhea-kept-plans=benchmarks/results/bench_qwen_ep8_step1181/instruction-retention-replan8:rhea \\
        --baseline vanilla --out runs/paired/instruction-retention

``--by-turn`` makes the unit the scored turn (a multi-session-qa question, an instruction-retention
check) rather than the episode: every turn is paired with the same turn of the other policy. Turns of
one conversation are not independent, so its intervals are narrower than the episode's and the report
gives both (the episode-level statistics under ``by_episode``).

``--pair LABEL=OTHER`` (repeatable) adds the paired differences of two other labels (e.g. a rerun with trained
adapters against its untrained row) under "Further pairs". Writes ``<out>.json`` (the statistics, and where each
label came from) and ``<out>.md``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rhea.storage import output_file  # noqa: E402


def parse_policy(spec: str) -> tuple[str, Path, str]:
    """``LABEL=RUN_DIR:POLICY`` -> (label, run dir, policy)."""
    label, sep, rest = spec.partition("=")
    run, sep2, policy = rest.rpartition(":")
    if not (sep and sep2 and label and run and policy):
        raise SystemExit(f"--policy {spec!r}: write LABEL=RUN_DIR:POLICY, e.g. vanilla=benchmarks/results/x/suite:vanilla")
    return label, Path(run), policy


def merge(specs: list[tuple[str, Path, str]]) -> dict:
    """One results dict holding each (label, run, policy) as policy `label`; the runs must share their episodes."""
    runs: dict[Path, dict] = {}
    merged: dict = {}
    for label, run, policy in specs:
        if run not in runs:
            from rhea.eval.report import read_results, results_file

            path = results_file(run)
            if not path.is_file():
                raise SystemExit(f"{path}: no such file, nor {path.name}.gz (pass a `rhea bench --out` folder that "
                                 "holds a finished run)")
            runs[run] = read_results(path)
        res = runs[run]
        if policy not in res.get("policies", {}):
            raise SystemExit(f"{run}: no policy {policy!r} in results.json (it has {sorted(res.get('policies', {}))})")
        if not merged:
            merged = {"format": res["format"], "config": dict(res["config"]), "episodes": res["episodes"], "policies": {},
                      "sources": {}}
        elif res["config"].get("episodes_sha256") != merged["config"].get("episodes_sha256"):
            raise SystemExit(f"{run} ran other episodes than {specs[0][1]} (episodes_sha256 differs): pairing them "
                             "would compare different conversations")
        if label in merged["policies"]:
            raise SystemExit(f"label {label!r} is given twice; give each --policy its own label")
        merged["policies"][label] = res["policies"][policy]
        merged["sources"][label] = {"run": str(run), "policy": policy,
                                    "adapters_trained": res["config"].get("adapters_trained"),
                                    "policy_kwargs": (res["config"].get("policy_kwargs") or {}).get(policy, {}),
                                    "dtype": dtypes_of(res["policies"][policy])}
    merged["config"]["policies"] = list(merged["policies"])
    return merged


def dtypes_of(entry: dict) -> str:
    """What a policy's turns were decoded in, as its recorded machines say ("float32", "float32, bfloat16"
    for a run that changed part-way; "" when not recorded): labels from runs in different dtypes compare
    numerics as well as policies."""
    from rhea.eval.checkpoint import environment_dtypes

    return ", ".join(dict.fromkeys(environment_dtypes(entry)))


def parse_pair(spec: str, labels: list[str]) -> tuple[str, str]:
    """``LABEL=OTHER`` -> (label, other), both among `labels`."""
    label, sep, other = spec.partition("=")
    if not sep or label not in labels or other not in labels or label == other:
        raise SystemExit(f"--pair {spec!r}: write LABEL=OTHER with two different labels of --policy ({labels})")
    return label, other


def further_pairs(merged: dict, pairs: list[tuple[str, str]], seed: int) -> list[dict]:
    """For each (label, other): the paired differences label − other on every metric, as for the baseline."""
    from rhea.eval.stats_report import statistics

    out = []
    for label, other in pairs:
        two = {**merged, "policies": {other: merged["policies"][other], label: merged["policies"][label]}}
        stats = statistics(two, baseline=other, seed=seed)
        out.append({"label": label, "other": other, "vs": stats["policies"][label]["vs_baseline"]})
    return out


def pairs_markdown(pairs: list[dict], metrics: list[str]) -> list[str]:
    from rhea.eval.stats_report import LABELS, versus_row

    metrics = [m for m in metrics if any(m in pair["vs"] for pair in pairs)]  # the metrics every run has
    if not pairs or not metrics:
        return []
    lines = ["", "Further pairs (label − other, the same episodes):", "",
             "| pair | " + " | ".join(LABELS.get(m, m) for m in metrics) + " |", "|---|" + "---|" * len(metrics)]
    return lines + [versus_row(f"{pair['label']} − {pair['other']}", pair["vs"], metrics) for pair in pairs]


def by_turn(merged: dict) -> dict:
    """`merged` with each turn its own unit: a row's ``episode_id`` becomes ``episode_id#turn_index``, so the
    per-episode statistics are per turn (turns that score nothing give no value and drop out)."""
    policies = {}
    for label, entry in merged["policies"].items():
        turns = [{**row, "episode_id": f"{row.get('episode_id')}#{row.get('turn_index')}"} for row in entry["turns"]]
        policies[label] = {**entry, "turns": turns}
    return {**merged, "policies": policies}


def _scored_units(stats: dict) -> int:
    return max((i.get("n", 0) for d in stats["policies"].values() for i in d["intervals"].values()), default=0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", action="append", required=True, metavar="LABEL=RUN_DIR:POLICY")
    p.add_argument("--baseline", default="vanilla", help="the label the others are paired with")
    p.add_argument("--pair", action="append", default=[], metavar="LABEL=OTHER",
                   help="also pair LABEL with OTHER (two of the labels), e.g. a rerun with its earlier row; repeatable")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--by-turn", action="store_true",
                   help="pair turn by turn (each scored question its own unit) as well as episode by episode")
    p.add_argument("--out", required=True, type=Path, help="path stem of the report (.json and .md are written)")
    args = p.parse_args(argv)
    specs = [parse_policy(s) for s in args.policy]
    labels = [label for label, _, _ in specs]
    if args.baseline not in labels:
        raise SystemExit(f"--baseline {args.baseline!r} is none of the labels {labels}")
    pairs = [parse_pair(s, labels) for s in args.pair]
    merged = merge(specs)
    from rhea.eval.stats_report import statistics, statistics_markdown

    stats = statistics(merged, baseline=args.baseline, seed=args.seed)
    if pairs:
        stats["pairs"] = further_pairs(merged, pairs, args.seed)
    if args.by_turn:
        per_turn = by_turn(merged)
        episode_stats, stats = stats, statistics(per_turn, baseline=args.baseline, seed=args.seed)
        stats["unit"], stats["n_episodes"] = "turn", _scored_units(stats)
        if pairs:
            stats["pairs"] = further_pairs(per_turn, pairs, args.seed)
        stats["by_episode"] = episode_stats
        if "repeated_replies" in episode_stats:  # repeats are within a conversation: count them over its turns
            stats["repeated_replies"] = episode_stats["repeated_replies"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"sources": merged["sources"], "baseline": args.baseline, "statistics": stats,
              "command": "python benchmarks/pair_runs.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    output_file(args.out, ".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    unit = "turn" if args.by_turn else "episode"
    lines = [f"# {merged['config']['suite']}: runs paired {unit} by {unit}", "",
             "| label | run | policy | adapters trained | options | dtype |", "|---|---|---|---|---|---|"]
    lines += [f"| {label} | `{s['run']}` | {s['policy']} | {s['adapters_trained']} | {s['policy_kwargs'] or ''} | "
              f"{s.get('dtype') or 'not recorded'} |" for label, s in merged["sources"].items()]
    lines += ["", statistics_markdown(stats)] + pairs_markdown(stats.get("pairs") or [], stats["metrics"])
    if args.by_turn:
        lines += ["", "Episode by episode, the same runs:", "", statistics_markdown(stats["by_episode"])]
        lines += pairs_markdown(stats["by_episode"].get("pairs") or [], stats["by_episode"]["metrics"])
    lines += ["", f"Command: `{report['command']}`", ""]
    output_file(args.out, ".md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
