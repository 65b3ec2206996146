"""Every method family on the same conversations, one table per suite, rendered from the results index.

    python benchmarks/side_by_side.py [--index benchmarks/results/index.jsonl] [--model qwen2.5-coder-1.5b]
                                      [--suite SUITE ...] [--best] [--out REPORT.md]

One row per (run, policy, options) of each suite on the model: the method's family (full history, Rhea,
soft tokens, KV-cache compression, prompt compression, retrieval, recent window, summary, agents), the
suite's quality metric (mean over episodes [95% bootstrap interval]), its paired difference against the
run's own vanilla on the same episodes [95% interval] and sign-flip p, context tokens, MB held (KV cache +
latents + instruction block) and seconds per turn, episodes, and for a peer the library version its run
recorded (kvpress, llmlingua). ``--best`` keeps the best row of each family (by the quality metric), as the
README shows it. Rows are never recomputed here: what the table shows is what the index holds, and a row
the index lacks (a peer not run on a suite, a cost an older run did not record) is a dash.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_table import QUALITY as README_QUALITY, interval_cell, paired_cell  # noqa: E402
from rhea.errors import RheaError  # noqa: E402
from rhea.eval.results_index import ResultsIndexError, Row, read_index  # noqa: E402

INDEX = ROOT / "benchmarks" / "results" / "index.jsonl"
#: Per suite: the quality metric, its label and digits (the README table's, and the suites it does not show).
QUALITY = {**README_QUALITY, "long-mt-bench-plus": ("retrospective_judge_mean", "retrospective judge (1-10)", 2)}
#: Suites whose quality metric is better when lower.
LOWER_IS_BETTER = {"efficiency"}
#: The families a user chooses between, in table order: (family, policies by name or name prefix ending in "-").
FAMILIES = (("full history", ("vanilla",)),
            ("Rhea", ("rhea", "rhea-")),
            ("soft tokens", ("reply-soft-compress",)),
            ("KV-cache compression (kvpress)", ("kvpress-",)),
            ("prompt compression (LLMLingua)", ("llmlingua", "longllmlingua")),
            ("retrieval", ("bm25",)),
            ("recent window", ("recent-k",)),
            ("summary", ("summary",)),
            ("agents", ("acr", "ace", "context-agent", "sculptor")))
#: The peer libraries whose version a run's environments record (`rhea.eval.environment.peer_versions`).
LIBRARIES = {"kvpress-": "kvpress", "llmlingua": "llmlingua", "longllmlingua": "llmlingua"}


class SideBySideError(ResultsIndexError):
    """What keeps the table from being rendered: no rows for the model or suite asked for."""


def family_of(policy: str) -> str:
    """The family a policy belongs to ("other" for one this table does not know).

    >>> family_of("kvpress-snapkv-q"), family_of("rhea-no-im"), family_of("bm25"), family_of("mine")
    ('KV-cache compression (kvpress)', 'Rhea', 'retrieval', 'other')
    """
    for family, names in FAMILIES:
        if any(_named(policy, n) for n in names):
            return family
    return "other"


def _named(policy: str, name: str) -> bool:
    """`policy` is `name`, or starts with it where `name` is a prefix (ends in "-")."""
    return policy == name or (name.endswith("-") and policy.startswith(name))


def library_of(policy: str) -> str | None:
    """The peer library a policy runs through, or None for the project's own policies."""
    return next((library for name, library in LIBRARIES.items() if _named(policy, name)), None)


def recorded_version(row: Row, library: str, root: Path = ROOT) -> str:
    """The `library` version the row's run recorded in its environments ("not recorded" where it did not)."""
    environments = _environments(root / row.source, row.policy) if row.source else ()
    versions = list(dict.fromkeys(e[library] for e in environments if isinstance(e, dict) and e.get(library)))
    return ", ".join(versions) or "not recorded"


@functools.lru_cache(maxsize=None)
def _environments(folder: Path, policy: str) -> tuple:
    """The environments `policy` recorded in the run dump in `folder` (read once per folder and policy; none where
    the dump is missing or unreadable)."""
    from rhea.eval.report import read_results, results_file

    try:
        path = results_file(folder)
        if not path.is_file():
            return ()
        return tuple(read_results(path).get("policies", {}).get(policy, {}).get("environments") or ())
    except (OSError, ValueError, RheaError):
        return ()


def _mean(row: Row | None, digits: int) -> str:
    return "–" if row is None else f"{row.mean:,.{digits}f}"


def entries(rows: list[Row], suite: str) -> list[dict]:
    """One entry per (run, policy, options) of `suite` in `rows`: its metrics by name, family and label."""
    out: dict[tuple, dict] = {}
    for r in rows:
        if r.suite != suite:
            continue
        entry = out.setdefault((r.run_id, r.policy, r.key[2]), {"run_id": r.run_id, "policy": r.policy,
                                                                  "label": r.label, "family": family_of(r.policy),
                                                                  "metrics": {}})
        entry["metrics"][r.metric] = r
    order = {family: i for i, (family, _) in enumerate(FAMILIES)}
    return sorted(out.values(), key=lambda e: (order.get(e["family"], len(order)), e["policy"], e["run_id"]))


def best_of_families(found: list[dict], suite: str) -> list[dict]:
    """The entry of each family with the best quality metric (entries without it are kept only where the
    family has no entry with it)."""
    metric = QUALITY.get(suite, (None,))[0]
    higher = suite not in LOWER_IS_BETTER
    best: dict[str, dict] = {}
    for e in found:
        value = e["metrics"].get(metric)
        held = best.get(e["family"])
        if held is None:
            best[e["family"]] = e
            continue
        other = held["metrics"].get(metric)
        if value is not None and (other is None or (value.mean > other.mean if higher else value.mean < other.mean)):
            best[e["family"]] = e
    return [e for e in found if best.get(e["family"]) is e]


def render_suite(rows: list[Row], suite: str, *, best: bool = False, root: Path = ROOT) -> str:
    """The markdown table of one suite."""
    metric, label, digits = QUALITY.get(suite, (None, None, 2))
    found = entries(rows, suite)
    if not found:
        raise SideBySideError(f"no rows of suite {suite!r} in the index; run `rhea bench --suite {suite} ...` (it "
                              "writes DIR/index.jsonl) and add its rows, or pass a --suite the index holds")
    if best:
        found = best_of_families(found, suite)
    lines = [f"### {suite}", "",
             f"| family | policy | {label or 'quality'} [95% CI] | vs vanilla [95% CI] | context tokens/turn | "
             "MB held/turn | s/turn | episodes | library | run |", "|---|---|---|---|---|---|---|---|---|---|"]
    for e in found:
        m = e["metrics"]
        quality = m.get(metric)
        some = quality or next(iter(m.values()))
        library = library_of(e["policy"])
        version = f"{library} {recorded_version(some, library, root)}" if library else "–"
        lines.append(f"| {e['family']} | {e['label']} | {interval_cell(quality, digits)} | {paired_cell(quality, digits)} | "
                     f"{_mean(m.get('context_tokens'), 0)} | {_mean(m.get('held_mb'), 1)} | "
                     f"{_mean(m.get('latency_s'), 1)} | {some.episodes} | {version} | `{e['run_id']}` |")
    return "\n".join(lines) + "\n"


def render(rows: list[Row], *, model: str, suites=None, best: bool = False, root: Path = ROOT) -> str:
    """The tables of `suites` (default: every suite the index has for `model`) for `model`."""
    mine = [r for r in rows if r.model == model]
    if not mine:
        models = sorted({r.model for r in rows})
        raise SideBySideError(f"no rows of model {model!r} in the index (it has {models}); pass --model")
    suites = list(suites or dict.fromkeys(r.suite for r in mine))
    parts = [render_suite(mine, suite, best=best, root=root) for suite in suites]
    note = ("Mean over episodes with a 95% bootstrap interval; vs vanilla: the paired difference against the same "
            "run's vanilla on the same episodes, with its interval and a two-sided sign-flip permutation p. MB held: "
            "the conversation's KV cache, latents and instruction block after a turn (a dash where the run did not "
            "record it). " + ("The best row of each family by the quality metric. " if best else "")
            + f"Model {model}. Generated by `python benchmarks/side_by_side.py` from `benchmarks/results/index.jsonl`.")
    return "\n".join(parts) + "\n" + note + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, default=INDEX)
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--suite", action="append", default=None, help="a suite to show (repeatable; default: all)")
    p.add_argument("--best", action="store_true", help="only the best row of each family")
    p.add_argument("--out", type=Path, default=None, help="write the tables to this markdown file")
    args = p.parse_args(argv)
    try:
        text = render(read_index(args.index), model=args.model, suites=args.suite, best=args.best)
    except RheaError as e:
        print(f"side_by_side: {e}", file=sys.stderr)
        return 1
    if args.out is None:
        print(text, end="")
        return 0
    from rhea.storage import atomic_write_bytes

    atomic_write_bytes(args.out, text.encode("utf-8"))
    print(f"{args.out}: {text.count(chr(10))} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
