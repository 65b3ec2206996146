"""Build the results index (``benchmarks/results/index.jsonl``) from the committed `rhea bench` runs.

    python benchmarks/build_index.py [--results benchmarks/results] [--out benchmarks/results/index.jsonl] [--check]

Each run id below is one set of policies answering the same episodes (equal ``config.episodes_sha256``), paired with
vanilla episode by episode. Its policies may come from several committed folders (a rerun of one policy lands in a
folder of its own); they are merged as ``benchmarks/pair_runs.py`` does and their statistics recomputed from the
per-turn dumps (``results.json`` or ``results.json.gz``) with `rhea.eval.stats_report.statistics`, so every number
in the index can be rebuilt from the dumps. A run id says what varies (model, suite, dtype, episodes, a policy
option), never when.

What each row records about where it came from is read, not typed: dtype and device from the machines the policy's
turns recorded, the adapters by name and SHA-256 from the shipped adapter directory in the commit that added the dump
(``rhea/data/adapters/<model>``; none for a run whose adapters were untrained), ``commit`` and ``date`` from that
commit. A policy option the run took from the shipped defaults rather than the command line (``replan_every`` before
kept plans became the default) is written out, and checked against the shipped config of that commit.

A policy whose turns ran in another dtype than the run's (e.g. part float32, part bfloat16) is refused, not mixed in.
``--check`` rebuilds the index in memory and fails if the committed file differs (the test suite runs it).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from rhea.eval.report import results_file  # noqa: E402
from rhea.eval.results_index import Row, ResultsIndexError, read_index, rows_from_statistics  # noqa: E402

MODEL = "qwen2.5-coder-1.5b"
#: Where the model zoo's shipped adapters live in the repository.
ADAPTERS = "rhea/data/adapters"


@dataclass(frozen=True)
class Source:
    """One policy of a run: the committed folder that holds its turns, the policy there, and the options it ran
    with: the policy options the folder's config records (`options`), the model settings its command line set
    (`settings`, e.g. ``anchor_bias`` from ``rhea bench --anchor-bias``, recorded at the config's top level), and
    any it took from the shipped defaults (`defaults`, checked against the shipped config of its commit)."""

    policy: str
    folder: str
    options: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    run_id: str
    suite: str
    dtype: str
    sources: tuple[Source, ...]
    baseline: str = "vanilla"


def _ir(folder: str) -> str:
    return f"{folder}/instruction-retention"


#: The current runs on the capable model: the shipped step-1,181 adapters, bfloat16, 8 episodes (efficiency: one
#: 40-turn episode in float32), with their vanilla and the baselines that ran the same episodes in the same dtype.
#: Policies that read no latents (vanilla, recent-k, bm25, summary) generate with the base model whatever adapters
#: are loaded (the generate LoRA is not trained), so their rows from runs with untrained adapters say so (no adapters).
RUNS = (
    Run(f"{MODEL}/instruction-retention/bf16-ep8", "instruction-retention", "bfloat16", (
        Source("vanilla", _ir("bench_qwen_ep8_bf16")),
        Source("rhea", _ir("bench_qwen_ep8_step1181") + "-replan8", {"replan_every": 8}),
        Source("summary", _ir("bench_qwen_ep8")),
    )),
    Run(f"{MODEL}/instruction-retention/bf16-ep8-per-turn-plans", "instruction-retention", "bfloat16", (
        Source("vanilla", _ir("bench_qwen_ep8_bf16")),
        Source("rhea", _ir("bench_qwen_ep8_step1181"), defaults={"replan_every": 1}),
    )),
    Run(f"{MODEL}/instruction-retention/bf16-ep8-latent-off", "instruction-retention", "bfloat16", (
        Source("vanilla", _ir("bench_qwen_ep8_bf16")),
        Source("rhea", _ir("bench_qwen_ep8_step1181") + "-latent-off", {"latent_tier": "off"},
               defaults={"replan_every": 1}),
    )),
    *(Run(f"{MODEL}/instruction-retention/bf16-ep8-anchor-bias-{beta:g}", "instruction-retention", "bfloat16", (
        Source("vanilla", _ir("bench_qwen_ep8_bf16")),
        Source("rhea", f"anchor_bias_{MODEL}/instruction-retention_beta{beta:g}",
               defaults={"replan_every": 8, **({"anchor_bias": 0.0} if beta == 0 else {})},
               settings={} if beta == 0 else {"anchor_bias": beta}),
    )) for beta in (0.0, 1.0, 4.0)),
    Run(f"{MODEL}/state-tracking/bf16-ep8", "state-tracking", "bfloat16", (
        Source("vanilla", "bench_qwen_ep8_bf16/state-tracking"),
        Source("rhea", "bench_qwen_ep8_step1181/state-tracking-replan8", {"replan_every": 8}),
        Source("recent-k", "bench_qwen_ep8_bf16/state-tracking"),
        Source("bm25", "bench_qwen_ep8_bf16/state-tracking"),
        Source("summary", "bench_qwen_ep8/state-tracking"),
        Source("reply-soft-compress", "bench_qwen_ep8_bf16/state-tracking"),
    )),
    Run(f"{MODEL}/long-horizon/bf16-ep8", "long-horizon", "bfloat16", (
        Source("vanilla", "bench_qwen_ep8_lh_baselines/long-horizon"),
        Source("rhea", "bench_qwen_ep8_step1181/long-horizon-replan8", {"replan_every": 8}),
        Source("bm25", "bench_qwen_ep8_lh_baselines/long-horizon"),
        Source("summary", "bench_qwen_ep8_lh_more/long-horizon"),
        Source("reply-soft-compress", "bench_qwen_ep8_lh_more/long-horizon"),
    )),
    Run(f"{MODEL}/long-horizon/bf16-ep8-per-turn-plans", "long-horizon", "bfloat16", (
        Source("vanilla", "bench_qwen_ep8_lh_baselines/long-horizon"),
        Source("rhea", "bench_qwen_ep8_step1181/long-horizon", defaults={"replan_every": 1}),
    )),
    Run(f"{MODEL}/multi-session-qa/bf16-ep4", "multi-session-qa", "bfloat16", (
        Source("vanilla", "multi_session_qa_qwen_topiocqa_300turns/vanilla"),
        Source("rhea", "multi_session_qa_qwen_topiocqa_300turns/rhea"),
        Source("bm25", "multi_session_qa_qwen_topiocqa_300turns/bm25"),
    )),
    Run(f"{MODEL}/multi-session-qa/haystack20k-fp32-ep1", "multi-session-qa", "float32", (
        Source("vanilla", "multi_session_qa_qwen_topiocqa_haystack20k/vanilla"),
        Source("rhea", "multi_session_qa_qwen_topiocqa_haystack20k/rhea"),
        Source("bm25", "multi_session_qa_qwen_topiocqa_haystack20k/bm25"),
    )),
    Run(f"{MODEL}/multi-session-qa/haystack20k-fp32-ep1-recall-max10", "multi-session-qa", "float32", (
        Source("vanilla", "multi_session_qa_qwen_topiocqa_haystack20k/vanilla"),
        Source("rhea", "multi_session_qa_qwen_topiocqa_haystack20k/rhea_recall_max10", {"replan_recall_max": 10}),
    )),
    Run(f"{MODEL}/mt-eval-recollection/fp32-ep14", "mt-eval-recollection", "float32", (
        Source("vanilla", "mt_eval_recollection_qwen_fp32/vanilla"),
        Source("rhea", "mt_eval_recollection_qwen_fp32/rhea"),
        Source("bm25", "mt_eval_recollection_qwen_fp32/bm25"),
        Source("recent-k", "mt_eval_recollection_qwen_fp32/recent-k"),
    )),
    Run(f"{MODEL}/efficiency/fp32-ep1", "efficiency", "float32", (
        Source("vanilla", "bench_qwen_step1181/efficiency"),
        Source("rhea", "bench_qwen_step1181/efficiency-replan8", {"replan_every": 8}),
    )),
    Run(f"{MODEL}/efficiency/fp32-ep1-per-turn-plans", "efficiency", "float32", (
        Source("vanilla", "bench_qwen_step1181/efficiency"),
        Source("rhea", "bench_qwen_step1181/efficiency", defaults={"replan_every": 1}),
    )),
)


#: The model settings a `rhea bench` command line can set, recorded at the top level of a run's config.
MODEL_SETTINGS = ("anchor_bias",)


class BuildError(ResultsIndexError):
    """A committed run cannot be indexed as declared (the message says which and why)."""


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"git {' '.join(args)} failed: {done.stderr.strip()} (run this in a git clone of rhea)")
    return done.stdout


def first_folder(folder: Path) -> str:
    """The folder (relative to the repository) in which `folder`'s per-turn dump was first committed: its own path,
    or the one it had before the renames git follows (a results folder renamed to say what varies)."""
    rel = folder.resolve().relative_to(ROOT).as_posix()
    dump = Path(results_file(folder)).resolve().relative_to(ROOT).as_posix()
    names = [line for line in _git("log", "--follow", "--name-only", "--format=", "--", dump).splitlines() if line.strip()]
    return names[-1].rsplit("/", 1)[0] if names else rel


def added_in(folder: Path) -> tuple[str, str]:
    """(commit, ISO date) of the commit that added `folder`'s per-turn dump (as results.json or .gz), under its
    present name or the one it was first committed under."""
    rel = folder.resolve().relative_to(ROOT).as_posix()
    paths = {f"{where}/{name}" for where in (rel, first_folder(folder)) for name in ("results.json", "results.json.gz")}
    out = _git("log", "--diff-filter=A", "--format=%H %aI", "--", *sorted(paths))
    lines = out.split("\n")
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise BuildError(f"{rel}: no commit added a results.json there; commit the run first")
    commit, date = lines[-1].split()  # the oldest: when the run was committed
    return commit, date


def adapters_at(commit: str, model: str) -> tuple[str, str]:
    """(name, SHA-256) of the adapters shipped for `model` in `commit`, hashed as
    `rhea.eval.results_index.adapters_sha256` hashes a directory (relative path and content of every file)."""
    base = f"{ADAPTERS}/{model}"
    listing = [line.split("\t", 1) for line in _git("ls-tree", "-r", commit, "--", base).splitlines()]
    if not listing:
        raise BuildError(f"{commit[:12]} ships no adapters for {model} ({base})")
    digest = hashlib.sha256()
    config = {}
    for meta, path in sorted(listing, key=lambda item: item[1]):
        blob = meta.split()[2]
        data = subprocess.run(["git", "-C", str(ROOT), "cat-file", "blob", blob], capture_output=True,
                              check=True).stdout
        relative = path[len(base) + 1:]
        digest.update(relative.encode() + b"\0")
        digest.update(hashlib.sha256(data).digest())
        if relative == "rhea_config.json":
            config = json.loads(data)
    steps = ((config.get("extra") or {}).get("training") or {}).get("optimizer_steps")
    return (f"{model}@step-{steps}" if isinstance(steps, int) else model), digest.hexdigest()


def _shipped_default(commit: str, model: str, option: str):
    text = _git("show", f"{commit}:{ADAPTERS}/{model}/rhea_config.json")
    return json.loads(text).get(option)


def build(results_dir: Path, runs=RUNS) -> list[Row]:
    """Every row of `runs`, from the dumps under `results_dir`."""
    from pair_runs import dtypes_of, merge
    from rhea.eval.checkpoint import environment_dtypes
    from rhea.eval.report import read_results
    from rhea.eval.stats_report import statistics

    rows: list[Row] = []
    for run in runs:
        specs = [(s.policy, results_dir / s.folder, s.policy) for s in run.sources]
        try:
            merged = merge(specs)
        except SystemExit as e:  # pair_runs speaks to a command line; here the run is declared wrong
            raise BuildError(f"{run.run_id}: {e}") from None
        if merged["config"]["suite"] != run.suite:
            raise BuildError(f"{run.run_id}: the dumps hold {merged['config']['suite']}, not {run.suite}")
        meta: dict[str, dict] = {}
        for source in run.sources:
            folder = results_dir / source.folder
            results = read_results(folder)
            entry = results["policies"][source.policy]
            dtypes = set(environment_dtypes(entry)) or {results["config"].get("dtype")}
            if dtypes != {run.dtype}:
                raise BuildError(f"{run.run_id}: {source.folder}:{source.policy} ran in {dtypes_of(entry) or dtypes}, "
                                 f"not {run.dtype} alone; leave it out or index it under a run of its dtype")
            recorded = (results["config"].get("policy_kwargs") or {}).get(source.policy, {})
            if recorded != source.options:
                raise BuildError(f"{run.run_id}: {source.folder}:{source.policy} ran with options {recorded}, "
                                 f"declared {source.options}")
            for name in MODEL_SETTINGS:
                ran = results["config"].get(name)
                if ran != source.settings.get(name):
                    raise BuildError(f"{run.run_id}: {source.folder} ran with {name}={ran!r}, declared "
                                     f"{source.settings.get(name)!r}")
            commit, date = added_in(folder)
            for option, value in source.defaults.items():
                shipped = _shipped_default(commit, MODEL, option)
                if shipped != value:
                    raise BuildError(f"{run.run_id}: {source.folder} took {option} from the shipped defaults, "
                                     f"{shipped!r} in {commit[:12]}, not the declared {value!r}")
            adapters, sha = adapters_at(commit, MODEL) if results["config"].get("adapters_trained") else (None, None)
            devices = [e.get("device") for e in entry.get("environments") or [] if e.get("device")]
            meta[source.policy] = dict(
                options={**source.defaults, **source.options, **source.settings}, adapters=adapters, adapters_sha256=sha,
                device=devices[-1] if devices else (results.get("environment") or {}).get("device"),
                source=f"benchmarks/results/{source.folder}", commit=commit, date=date)
        stats = statistics(merged, baseline=run.baseline)
        for row in rows_from_statistics(stats, run_id=run.run_id, suite=run.suite, model=MODEL, dtype=run.dtype,
                                        turns=merged["config"]["n_turns"], date="1970-01-01"):
            m = meta[row.policy]
            rows.append(dataclasses.replace(row, **{k: v for k, v in m.items()}))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results",
                   help="the folder holding the committed runs")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "index.jsonl")
    p.add_argument("--check", action="store_true", help="rebuild in memory and fail if --out differs")
    args = p.parse_args(argv)
    rows = build(args.results)
    if args.check:
        committed = read_index(args.out)
        if committed != rows:
            print(f"{args.out} differs from the rows rebuilt from the dumps; run python benchmarks/build_index.py",
                  file=sys.stderr)
            return 1
        print(f"{args.out}: {len(rows)} rows, as rebuilt")
        return 0
    from rhea.eval.results_index import write_index

    write_index(args.out, rows)  # rebuilt whole: rows of runs no longer declared go
    print(f"{args.out}: {len(rows)} rows over {len(RUNS)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
