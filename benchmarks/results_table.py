"""The README's results table, rendered from the results index.

    python benchmarks/results_table.py [--index benchmarks/results/index.jsonl] [--run RUN_ID ...]
    python benchmarks/results_table.py --write-readme [README.md]     # replace the block between the markers
    python benchmarks/results_table.py --check [README.md]            # fail if the README's block differs

One row per policy of each run: the suite's quality metric (mean over episodes [95% bootstrap interval]) and
context tokens per turn, each with its paired difference against vanilla on the same episodes [95% interval]
and the sign-flip permutation p, and the number of episodes. The efficiency suite has no quality metric; its
row shows latency per turn. The README holds the table between the lines ``<!-- results-table:start -->`` and
``<!-- results-table:end -->``; a test checks that it equals what this script renders.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rhea.errors import RheaError  # noqa: E402
from rhea.eval.results_index import ResultsIndexError, Row, read_index  # noqa: E402

INDEX = ROOT / "benchmarks" / "results" / "index.jsonl"
README = ROOT / "README.md"
START, END = "<!-- results-table:start -->", "<!-- results-table:end -->"
#: The runs the headline table shows, in this order: the capable model, shipped adapters, current defaults.
HEADLINE_RUNS = ("qwen2.5-coder-1.5b/instruction-retention/bf16-ep8", "qwen2.5-coder-1.5b/state-tracking/bf16-ep8",
                 "qwen2.5-coder-1.5b/long-horizon/bf16-ep8", "qwen2.5-coder-1.5b/multi-session-qa/bf16-ep4",
                 "qwen2.5-coder-1.5b/mt-eval-recollection/fp32-ep14", "qwen2.5-coder-1.5b/efficiency/fp32-ep1")
#: Per suite: the metric shown beside context tokens, its label and digits.
QUALITY = {"instruction-retention": ("iar", "IAR (0-10)", 2), "state-tracking": ("accuracy", "key accuracy", 2),
           "long-horizon": ("judge_mean", "judge (1-10)", 2), "multi-session-qa": ("f1", "token F1", 3),
           "mt-eval-recollection": ("iar", "IAR (0-10)", 2), "efficiency": ("latency_s", "latency (s/turn)", 1)}
TOKENS = ("context_tokens", 0)
BASELINE = "vanilla"


class TableError(ResultsIndexError):
    """What keeps the table from being rendered or written: a run the index lacks, README markers missing."""


def interval_cell(row: Row | None, digits: int) -> str:
    if row is None:
        return "–"
    if row.ci_low is None:
        return f"{row.mean:.{digits}f}"
    return f"{row.mean:.{digits}f} [{row.ci_low:.{digits}f}, {row.ci_high:.{digits}f}]"


def paired_cell(row: Row | None, digits: int) -> str:
    if row is None or row.paired_diff is None:
        return "–"
    if row.paired_low is None:  # one episode: a difference, no interval, no test
        return f"{row.paired_diff:+.{digits}f}"
    return (f"{row.paired_diff:+.{digits}f} [{row.paired_low:+.{digits}f}, {row.paired_high:+.{digits}f}] "
            f"p={row.p:.2g}")


def _policies(rows: list[Row]) -> list[tuple[str, str]]:
    """(policy, options key) of `rows` in table order: the baseline, rhea, then the others as the index has them."""
    seen = list(dict.fromkeys((r.policy, r.key[2]) for r in rows))
    rank = {BASELINE: 0, "rhea": 1}
    return sorted(seen, key=lambda p: rank.get(p[0], 2))


def render(rows: list[Row], runs=HEADLINE_RUNS) -> str:
    """The markdown table of `runs` (their rows in `rows`), with a line that says where it comes from."""
    lines = ["| suite | policy | metric | mean [95% CI] | vs vanilla [95% CI] | context tokens/turn | vs vanilla "
             "[95% CI] | episodes |", "|---|---|---|---|---|---|---|---|"]
    described = []
    for run_id in runs:
        run = [r for r in rows if r.run_id == run_id]
        if not run:
            raise TableError(f"no rows of run {run_id!r} in the index; run python benchmarks/build_index.py, or "
                             "pass --run with a run id the index holds")
        suite = run[0].suite
        metric, label, digits = QUALITY.get(suite, (None, None, 2))
        for policy, options in _policies(run):
            mine = {r.metric: r for r in run if (r.policy, r.key[2]) == (policy, options)}
            quality, tokens = mine.get(metric), mine.get(TOKENS[0])
            some = quality or tokens or next(iter(mine.values()))
            lines.append(f"| {suite} | {some.label} | {label or '–'} | {interval_cell(quality, digits)} | "
                         f"{paired_cell(quality, digits)} | {interval_cell(tokens, TOKENS[1])} | {paired_cell(tokens, TOKENS[1])} "
                         f"| {some.episodes} |")
        carried: dict[str, list[str]] = {}  # adapters -> the policies whose model carried them
        for r in run:
            names = carried.setdefault(r.adapters or "none", [])
            if r.label not in names:
                names.append(r.label)
        adapters = ", ".join(f"{name} ({', '.join(labels)})" for name, labels in carried.items())
        described.append(f"`{run_id}` ({run[0].dtype}, {run[0].device}, {run[0].turns} turns; adapters {adapters})")
    lines += ["", "Mean over episodes with a 95% bootstrap interval; vs vanilla: the paired difference on the same "
                  "episodes with its interval and a two-sided sign-flip permutation p (one episode: no interval, no "
                  "test). Runs: " + "; ".join(described) + ". Generated by `python benchmarks/results_table.py` "
                  "from `benchmarks/results/index.jsonl`."]
    return "\n".join(lines) + "\n"


def block(table: str) -> str:
    """`table` between the README markers."""
    return f"{START}\n{table}{END}"


def readme_block(text: str, where: str = "README.md") -> tuple[int, int]:
    """(start, end) offsets of the marked block in `text`, markers included; an error naming `where` unless each
    marker is there exactly once, in order."""
    counts = {m: text.count(m) for m in (START, END)}
    if counts != {START: 1, END: 1} or text.index(START) > text.index(END):
        raise TableError(f"{where} needs one line {START} and, after it, one line {END} around the results table "
                         f"(found {counts[START]} and {counts[END]})")
    return text.index(START), text.index(END) + len(END)


def replace_block(text: str, table: str, where: str = "README.md") -> str:
    """`text` with the marked block replaced by `table`."""
    start, end = readme_block(text, where)
    return text[:start] + block(table) + text[end:]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, default=INDEX)
    p.add_argument("--run", action="append", default=None, metavar="RUN_ID",
                   help=f"a run to show (repeatable; default: {', '.join(HEADLINE_RUNS)})")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--write-readme", nargs="?", const=README, type=Path, metavar="README",
                      help="replace the table between the markers in README (default README.md)")
    what.add_argument("--check", nargs="?", const=README, type=Path, metavar="README",
                      help="exit 1 if the README's table is not the one rendered now")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except RheaError as e:
        print(f"results_table: {e}", file=sys.stderr)
        return 1


def _run(args) -> int:
    table = render(read_index(args.index), tuple(args.run or HEADLINE_RUNS))
    target = args.write_readme or args.check
    if target is None:
        print(table, end="")
        return 0
    text = target.read_text(encoding="utf-8")
    new = replace_block(text, table, str(target))
    if args.check:
        if new != text:
            print(f"{target}: the results table differs from the index; run python benchmarks/results_table.py "
                  "--write-readme", file=sys.stderr)
            return 1
        return 0
    if new != text:
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(target)
    print(f"{target}: results table written ({table.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
