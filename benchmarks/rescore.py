"""Re-score committed `rhea bench` runs offline with the current checkers (no model runs).

    python benchmarks/rescore.py benchmarks/results/bench_qwen_ep8 benchmarks/results/bench_qwen_ep8_bf16 \
        --out runs/rescore_qwen [--in-place]

Every ``results.json`` or ``results.json.gz`` (instruction-retention and state-tracking) under the given folders
keeps its replies; each reply is scored again by the suite's current `score_turn` against the
turn it answered (rebuilt from the run's own ``episodes``), then aggregated and given the
episode-level statistics of `rhea.eval.stats_report`. Writes ``<out>.json`` and ``<out>.md``: per
run and policy, the committed headline numbers beside the re-scored ones (strict and loose
IAR, non-answers, per-rule pass rates; state accuracy and JGA). With ``--in-place`` each run's
``results.json`` rows, aggregates and statistics, ``summary.md`` and plots are rewritten too
(the replies and costs are untouched).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rhea.eval.report import write_outputs  # noqa: E402
from rhea.eval.report import scores_only  # noqa: E402
from rhea.eval.suites import Episode, get_suite  # noqa: E402
from rhea.storage import output_file  # noqa: E402

SUITES = ("instruction-retention", "state-tracking")
#: Score fields of the old rows that the new scoring replaces (everything else is kept).
SCORE_KEYS = ("iar", "iar_loose", "adherence", "adherence_loose", "non_answer", "distance",
              "revoked_followed", "accuracy", "joint", "exact", "final", "correct", "stale",
              "n_updates", "turns_since_update")


def rescore(results: dict) -> dict:
    """`results` with every row re-scored and every aggregate recomputed (a new dict)."""
    suite = get_suite(results["config"]["suite"], n_episodes=1)
    episodes = {e["episode_id"]: Episode.from_dict(e, suite) for e in results["episodes"]}
    out = json.loads(json.dumps(results))
    for policy, data in out["policies"].items():
        rows = []
        for row in data["turns"]:
            episode = episodes[row["episode_id"]]
            turn = episode.turns[row["turn_index"]]
            kept = {k: v for k, v in row.items() if k not in SCORE_KEYS}
            rows.append({**episode.score_turn(turn, row.get("reply", "")), **kept})
        # the aggregate as first committed, kept once so a second re-score still compares with it
        data.setdefault("aggregate_as_committed", data["aggregate"])
        data["turns"] = rows
        data["aggregate"] = suite.aggregate([scores_only(r) for r in rows])
    return out


HEAD = {"instruction-retention": ("iar", "iar_loose", "non_answers"),
        "state-tracking": ("accuracy", "jga", "probe_jga")}


def _fmt(v) -> str:
    return "–" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", help="folders holding rhea-bench results.json files")
    parser.add_argument("--out", required=True, help="report path without extension (.json and .md are written)")
    parser.add_argument("--in-place", action="store_true", help="also rewrite each run's results, summary and plots")
    args = parser.parse_args(argv)
    from rhea.eval.report import read_results, results_file

    # one dump per run folder: results.json, or results.json.gz where that is what the folder holds
    paths = sorted({results_file(p.parent) for folder in args.folders
                    for pattern in ("results.json", "results.json.gz") for p in Path(folder).rglob(pattern)})
    report, lines = {}, ["# Committed runs re-scored with the current checkers", "",
                         "Replies as committed; only the scoring changed (`python benchmarks/rescore.py "
                         + " ".join(args.folders) + f" --out {args.out}`). IAR strict: non-answers fail every rule, "
                         "the options rule needs the whole reply to be an option; loose: IFEval's loose reading. "
                         "State tracking: multi-key extraction; JGA = the final probe with every key exact. "
                         "Every run here has **one episode**: no interval is possible.", ""]
    for path in paths:
        results = read_results(path)
        suite = results.get("config", {}).get("suite")
        if results.get("format") != "rhea-bench/1" or suite not in SUITES:
            continue
        new = rescore(results)
        name = str(path.parent)
        heads = HEAD[suite]
        old_key = {"iar_loose": None, "non_answers": None, "probe_jga": "jga", "jga": "episode_jga"}
        lines += [f"## {name} ({suite}, {results['config']['n_episodes']} episode × {results['config']['n_turns']} turns)",
                  "", "| policy | " + " | ".join(f"{h} committed | {h} now" for h in heads) + " |",
                  "|---|" + "---|---|" * len(heads)]
        entry = {}
        for policy, data in new["policies"].items():
            before = results["policies"][policy].get("aggregate_as_committed",
                                                     results["policies"][policy]["aggregate"])
            after = data["aggregate"]
            cells = []
            for h in heads:
                ok = old_key.get(h, h)
                cells += [_fmt(before.get(ok)) if ok else "–", _fmt(after.get(h))]
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
            entry[policy] = {"committed": {k: before.get(k) for k in ("iar", "accuracy", "jga", "episode_jga")
                                           if k in before},
                             "rescored": {k: v for k, v in after.items() if not isinstance(v, dict) or k in (
                                 "iar_by_instruction", "iar_loose_by_instruction", "non_answers_by_reason")}}
        if suite == "instruction-retention":
            rules = sorted({r for d in new["policies"].values() for r in d["aggregate"]["iar_by_instruction"]})
            lines += ["", "Per rule, committed (IFEval strict, no gate) → strict now / loose now (0-10):", "",
                      "| policy | " + " | ".join(rules) + " |", "|---|" + "---|" * len(rules)]
            for policy, data in new["policies"].items():
                b = results["policies"][policy].get("aggregate_as_committed",
                                                    results["policies"][policy]["aggregate"]).get("iar_by_instruction", {})
                a = data["aggregate"]
                lines.append(f"| {policy} | " + " | ".join(
                    f"{_fmt(b.get(r))} → {_fmt(a['iar_by_instruction'].get(r))} / "
                    f"{_fmt(a['iar_loose_by_instruction'].get(r))}" for r in rules) + " |")
        lines.append("")
        report[name] = entry
        if args.in_place:
            write_outputs(new, path.parent)
    output_file(Path(args.out), ".json").write_text(json.dumps(report, indent=1))
    output_file(Path(args.out), ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
