"""The results index: one JSONL file, one row per (run, policy, options, metric), with a fixed schema.

Every table of results (the README's, `benchmarks/paper_tables.py`, `benchmarks/results_table.py`)
reads this file rather than the raw per-turn dumps. A row says what ran (``run_id``, ``suite``,
``model``, the adapters by name and SHA-256, ``dtype``, ``device``, ``episodes`` of ``turns`` turns,
``policy`` and its
``options``), what was measured (``metric``: its mean over episodes and 95% bootstrap interval
``ci_low`` / ``ci_high``; the paired difference against ``baseline`` on the same episodes,
``paired_diff`` with ``paired_low`` / ``paired_high`` and the sign-flip permutation ``p``) and where
it came from (``source``: the folder of the per-turn dump, ``commit``, ``date``).

A run id names what varies, never when: ``qwen2.5-coder-1.5b/instruction-retention/bf16-ep8``.
`rhea bench --out DIR` writes its rows to ``DIR/index.jsonl`` (and to ``--index PATH`` when given);
rows whose key (run id, policy, options, metric) is already in the file replace it, the rest are
appended, and the file is replaced atomically.

>>> row = Row(run_id="tiny/efficiency/fp32-ep2", suite="efficiency", model="tiny", adapters=None,
...           adapters_sha256=None, dtype="float32", device="cpu", episodes=2, turns=4, policy="rhea", options={},
...           metric="context_tokens", mean=120.0, ci_low=110.0, ci_high=130.0, unit="episode",
...           baseline="vanilla", paired_diff=-40.0, paired_low=-50.0, paired_high=-30.0, p=0.5,
...           source=None, commit=None, date="2026-01-01")
>>> Row.from_dict(row.to_dict()) == row
True
>>> row.label
'rhea'
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rhea.errors import RheaError

#: The ``schema`` value of every row this module writes; a reader refuses others.
SCHEMA = "rhea-results-index/1"
#: Units a row's interval is taken over: episodes, or batches of episodes that shared each turn's time.
UNITS = ("episode", "batch")
_HEX = re.compile(r"^[0-9a-f]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")


class ResultsIndexError(RheaError, ValueError):
    """A results-index row or file does not follow the schema (the message names the row and the field)."""


@dataclass(frozen=True)
class Row:
    """One (run, policy, options, metric) of the results index. Fields are documented in the module."""

    run_id: str
    suite: str
    model: str
    adapters: str | None
    adapters_sha256: str | None
    dtype: str | None
    device: str | None
    episodes: int
    turns: int | None
    policy: str
    options: dict
    metric: str
    mean: float
    ci_low: float | None
    ci_high: float | None
    unit: str
    baseline: str | None
    paired_diff: float | None
    paired_low: float | None
    paired_high: float | None
    p: float | None
    source: str | None
    commit: str | None
    date: str
    schema: str = field(default=SCHEMA)

    def __post_init__(self) -> None:
        validate(asdict(self))

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identifies a row: a second row with the same key replaces the first."""
        return self.run_id, self.policy, _canonical(self.options), self.metric

    @property
    def label(self) -> str:
        """The policy with its options, as tables show it: ``rhea (replan_every=1)``."""
        if not self.options:
            return self.policy
        return f"{self.policy} (" + ", ".join(f"{k}={v}" for k, v in sorted(self.options.items())) + ")"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "row") -> "Row":
        """The row `data` describes, checked against the schema (`ResultsIndexError` naming `where`)."""
        if not isinstance(data, Mapping):
            raise ResultsIndexError(f"{where}: a row is a JSON object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        missing = sorted(n for n in names - set(data) if n != "schema")
        if unknown or missing:
            raise ResultsIndexError(f"{where}: " + "; ".join(
                ([f"unknown fields {unknown}"] if unknown else []) + ([f"missing fields {missing}"] if missing else []))
                + f" (schema {SCHEMA}: {sorted(names)})")
        try:
            return cls(**dict(data))
        except ResultsIndexError as e:
            raise ResultsIndexError(f"{where}: {e}") from None


def _canonical(options: Mapping[str, Any]) -> str:
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


def _number(name: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ResultsIndexError(f"{name}={value!r} must be a finite number" + (" or null" if optional else ""))


def _text(name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ResultsIndexError(f"{name}={value!r} must be a non-empty string without surrounding spaces"
                                + (" (or null)" if optional else ""))


def validate(row: Mapping[str, Any]) -> None:
    """Raise `ResultsIndexError` naming the first field of `row` (a dict of `Row`'s fields) that breaks the schema."""
    if row.get("schema") != SCHEMA:
        raise ResultsIndexError(f"schema={row.get('schema')!r}: this reader knows {SCHEMA!r} only")
    for name in ("run_id", "suite", "model", "policy", "metric"):
        _text(name, row.get(name))
    if any(not part for part in row["run_id"].split("/")) or re.search(r"\s", row["run_id"]):
        raise ResultsIndexError(f"run_id={row['run_id']!r}: write parts separated by single '/', no spaces "
                                "(e.g. 'qwen2.5-coder-1.5b/instruction-retention/bf16-ep8')")
    for name in ("adapters", "dtype", "device", "baseline", "source"):
        _text(name, row.get(name), optional=True)
    sha = row.get("adapters_sha256")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64 or not _HEX.match(sha)):
        raise ResultsIndexError(f"adapters_sha256={sha!r} must be 64 lowercase hex digits (`adapters_sha256()`) "
                                "or null")
    if row.get("adapters_sha256") is not None and row.get("adapters") is None:
        raise ResultsIndexError("adapters_sha256 is set but adapters (their name) is null: name the adapters")
    episodes = row.get("episodes")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ResultsIndexError(f"episodes={episodes!r} must be an integer >= 1")
    turns = row.get("turns")
    if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int) or turns < 1):
        raise ResultsIndexError(f"turns={turns!r} must be an integer >= 1 (turns per episode) or null")
    if not isinstance(row.get("options"), dict):
        raise ResultsIndexError(f"options={row.get('options')!r} must be an object of the policy's options ({{}} "
                                "for none)")
    try:
        _canonical(row["options"])
    except (TypeError, ValueError):
        raise ResultsIndexError(f"options={row['options']!r} must hold JSON values only") from None
    _number("mean", row.get("mean"), optional=False)
    for pair in (("ci_low", "ci_high"), ("paired_low", "paired_high")):
        low, high = (row.get(name) for name in pair)
        for name, value in zip(pair, (low, high)):
            _number(name, value, optional=True)
        if (low is None) != (high is None):
            raise ResultsIndexError(f"{pair[0]} and {pair[1]} are both numbers or both null, got {low!r}, {high!r}")
        if low is not None and low > high:
            raise ResultsIndexError(f"{pair[0]}={low!r} is above {pair[1]}={high!r}")
    for name in ("paired_diff", "p"):
        _number(name, row.get(name), optional=True)
    if row.get("p") is not None and not 0.0 <= row["p"] <= 1.0:
        raise ResultsIndexError(f"p={row['p']!r} must lie in [0, 1]")
    paired = [row.get(n) for n in ("paired_diff", "p")]
    if row.get("baseline") is None and any(v is not None for v in paired + [row.get("paired_low")]):
        raise ResultsIndexError("a paired difference needs the baseline it was paired with (baseline is null)")
    if row.get("baseline") is not None and row.get("paired_diff") is None:
        raise ResultsIndexError(f"baseline={row['baseline']!r} but paired_diff is null: drop the baseline or give "
                                "the difference")
    if row.get("unit") not in UNITS:
        raise ResultsIndexError(f"unit={row.get('unit')!r} must be one of {UNITS}")
    commit = row.get("commit")
    if commit is not None and (not isinstance(commit, str) or not 7 <= len(commit) <= 40 or not _HEX.match(commit)):
        raise ResultsIndexError(f"commit={commit!r} must be 7-40 lowercase hex digits (a git commit) or null")
    date = row.get("date")
    if not isinstance(date, str) or not _DATE.match(date):
        raise ResultsIndexError(f"date={date!r} must be an ISO 8601 date or date-time, e.g. '2026-11-30' or "
                                "'2026-11-30T14:04:13+00:00'")


def read_index(path: str | Path) -> list[Row]:
    """Every row of the index at `path`, checked (`ResultsIndexError` naming the line), in file order.

    A key found twice is an error: `append_rows` never writes one, so the file was edited by hand."""
    path = Path(path)
    if not path.is_file():
        raise ResultsIndexError(f"{path}: no results index there; `rhea bench --out DIR` writes DIR/index.jsonl, "
                                "`benchmarks/build_index.py` the repository's")
    rows: list[Row] = []
    seen: dict[tuple, int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise ResultsIndexError(f"{where}: not a JSON object ({e})") from None
        row = Row.from_dict(data, where=where)
        if row.key in seen:
            raise ResultsIndexError(f"{where}: the same run, policy, options and metric as line {seen[row.key]} "
                                    f"({row.key}); keep one")
        seen[row.key] = number
        rows.append(row)
    return rows


def write_index(path: str | Path, rows: Iterable[Row]) -> list[Row]:
    """Write `rows` as the whole index at `path` (created with its folder if missing), through a temporary file
    beside it renamed over it, so a reader sees the old index or the whole new one. Two rows with one key are
    refused before anything is written."""
    path = Path(path)
    rows = list(rows)
    for i, row in enumerate(rows):
        if not isinstance(row, Row):
            raise ResultsIndexError(f"rows[{i}] is a {type(row).__name__}, not a rhea.eval.results_index.Row")
    keys = [r.key for r in rows]
    doubled = sorted({k for k in keys if keys.count(k) > 1})
    if doubled:
        raise ResultsIndexError(f"the rows name the same run, policy, options and metric twice: {doubled}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in rows)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return rows


def append_rows(path: str | Path, rows: Iterable[Row]) -> list[Row]:
    """Add `rows` to the index at `path` (created if missing): a row whose key is already there replaces it in
    place, the others go at the end; written as `write_index` writes (atomically). Returns the index as written."""
    path = Path(path)
    new = list(rows)
    for i, row in enumerate(new):
        if not isinstance(row, Row):
            raise ResultsIndexError(f"rows[{i}] is a {type(row).__name__}, not a rhea.eval.results_index.Row")
    keys = [r.key for r in new]
    doubled = sorted({k for k in keys if keys.count(k) > 1})
    if doubled:
        raise ResultsIndexError(f"the rows to add name the same run, policy, options and metric twice: {doubled}")
    existing = read_index(path) if path.exists() else []
    by_key = {r.key: r for r in new}
    merged = [by_key.pop(r.key, r) for r in existing] + [r for r in new if r.key in by_key]
    return write_index(path, merged)


def adapters_sha256(directory: str | Path) -> str:
    """SHA-256 over an adapter directory: every file's path (relative, '/'-separated) and bytes, in path order.

    Two directories with the same files give the same digest wherever they lie."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ResultsIndexError(f"{directory}: no adapter directory there to hash")
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def rows_from_statistics(stats: Mapping[str, Any], *, run_id: str, suite: str, model: str, date: str,
                         turns: int | None = None, options: Mapping[str, Mapping[str, Any]] | None = None,
                         policies: Mapping[str, str] | None = None, adapters: str | None = None,
                         adapters_sha256: str | None = None, dtype: str | None = None, device: str | None = None,
                         source: str | Mapping[str, str] | None = None, commit: str | None = None) -> list[Row]:
    """The index rows of one run's statistics (`rhea.eval.stats_report.statistics`): one per policy and metric
    with an interval, paired with the statistics' baseline where it was.

    options: per label, the policy options that ran (default: none). policies: per label, the registered policy
    it ran (default: the label itself), for statistics over merged runs whose labels are not policy names.
    source: the folder of the per-turn dump, one for all or one per label.
    """
    rows = []
    baseline = stats.get("baseline")
    for label, data in stats["policies"].items():
        for metric in stats["metrics"]:
            interval = data["intervals"].get(metric)
            if interval is None:
                continue
            versus = data.get("vs_baseline", {}).get(metric)
            rows.append(Row(
                run_id=run_id, suite=suite, model=model, adapters=adapters, adapters_sha256=adapters_sha256,
                dtype=dtype, device=device, episodes=int(stats["n_episodes"]), turns=turns,
                policy=(policies or {}).get(label, label), options=dict((options or {}).get(label, {})),
                metric=metric, mean=float(interval["mean"]), ci_low=interval.get("low"), ci_high=interval.get("high"),
                unit=interval.get("unit", "episode"),
                baseline=(policies or {}).get(baseline, baseline) if versus else None,
                paired_diff=versus["diff"] if versus else None, paired_low=versus.get("low") if versus else None,
                paired_high=versus.get("high") if versus else None, p=versus.get("p_value") if versus else None,
                source=source.get(label) if isinstance(source, Mapping) else source, commit=commit, date=date))
    return rows


def select(rows: Sequence[Row], **where: Any) -> list[Row]:
    """The rows whose fields equal every ``name=value`` of `where` (e.g. ``suite="state-tracking"``)."""
    names = {f.name for f in fields(Row)}
    unknown = sorted(set(where) - names)
    if unknown:
        raise ResultsIndexError(f"no field {unknown} in a results-index row; fields: {sorted(names)}")
    return [r for r in rows if all(getattr(r, k) == v for k, v in where.items())]


#: Short dtype names for run ids.
_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def default_run_id(config: Mapping[str, Any]) -> str:
    """What a run id says by default: model, suite, dtype and episodes, from a ``results.json`` config.

    >>> default_run_id({"model": "runs/ship-qwen", "suite": "state-tracking", "dtype": "bfloat16", "n_episodes": 8})
    'ship-qwen/state-tracking/bf16-ep8'
    """
    model = Path(str(config["model"]).rstrip("/")).name or str(config["model"])
    dtype = _DTYPE_SHORT.get(config.get("dtype") or "", config.get("dtype") or "dtype-unrecorded")
    return f"{model}/{config['suite']}/{dtype}-ep{config['n_episodes']}"


def adapters_name(directory: str | Path) -> str:
    """How the index names the adapters in `directory`: its name, with the optimizer steps its ``rhea_config.json``
    records (``qwen2.5-coder-1.5b@step-1181``)."""
    directory = Path(directory)
    try:
        config = json.loads((directory / "rhea_config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        config = {}
    steps = ((config.get("extra") or {}).get("training") or {}).get("optimizer_steps")
    return f"{directory.resolve().name}@step-{steps}" if isinstance(steps, int) else directory.resolve().name


def rows_from_results(results: Mapping[str, Any], *, run_id: str | None = None, date: str,
                      adapters: str | Path | None = None, source: str | None = None,
                      commit: str | None = None) -> list[Row]:
    """The index rows of a finished `rhea bench` run (a ``results.json`` dict; its ``statistics`` are computed
    when it carries none).

    adapters: the directory of the adapters the model carried (named by `adapters_name`, hashed by
    `adapters_sha256`); None for a model without trained adapters. run_id: default `default_run_id`."""
    config, environment = results["config"], results.get("environment") or {}
    stats = results.get("statistics")
    if not stats:  # results run without `out=`: the same statistics `rhea bench` writes into results.json
        from rhea.eval.stats_report import statistics

        stats = statistics(results)
    directory = Path(adapters) if adapters is not None else None
    options = config.get("policy_kwargs") or {}
    model_options = {"anchor_bias": config["anchor_bias"]} if config.get("anchor_bias") else {}
    return rows_from_statistics(
        stats, run_id=run_id or default_run_id(config), suite=config["suite"], model=str(config["model"]),
        date=date, turns=config.get("n_turns"),
        options={p: {**options.get(p, {}), **model_options} for p in results["policies"]},
        adapters=adapters_name(directory) if directory is not None else None,
        adapters_sha256=adapters_sha256(directory) if directory is not None else None,
        dtype=config.get("dtype") or environment.get("dtype"), device=environment.get("device"),
        source=source, commit=commit)
