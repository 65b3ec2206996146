"""What a benchmark run writes for people: ``results.json``, ``summary.md`` (a policy × metric
table, then each metric over episodes with a 95% bootstrap interval and the paired difference
vs vanilla, from `rhea.eval.stats_report`) and PNGs of IAR / tokens / latency against the turn
index, plus the suite metric by turn (and distance) with a 95% band over episodes.

The per-turn dump may also be stored gzipped as ``results.json.gz`` (the committed runs are):
`results_file`, `read_results` and `write_results` accept both, and a folder that holds the
gzipped form is rewritten in it. Any other committed result file may be stored gzipped too:
`stored_path`, `read_stored_text` and `read_stored_json` read ``X`` or ``X.gz``.
"""
from __future__ import annotations

import gzip
import json
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

#: The per-turn dump of a run, and its gzipped form.
RESULTS_FILE = "results.json"
RESULTS_FILE_GZ = "results.json.gz"


def results_file(folder: str | Path) -> Path:
    """The per-turn dump of the run in `folder`: ``results.json`` if there, else ``results.json.gz`` if there, else
    the ``results.json`` path a run would write (which does not exist yet)."""
    folder = Path(folder)
    plain = folder / RESULTS_FILE
    if not plain.is_file() and (folder / RESULTS_FILE_GZ).is_file():
        return folder / RESULTS_FILE_GZ
    return plain


def read_results(path: str | Path) -> dict:
    """The results dict in `path`: a run folder (`results_file`), a ``results.json`` or a ``results.json.gz``.

    Raises `json.JSONDecodeError` for a file that is not JSON, `OSError` for one that cannot be read."""
    path = Path(path)
    if path.is_dir():
        path = results_file(path)
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads(path.read_text(encoding="utf-8"))


def stored_path(path: str | Path) -> Path:
    """`path`, or ``path + ".gz"`` when only the gzipped form is there (the committed benchmark results are stored
    gzipped: ``retrieval_recall.json.gz``, ``fact_recall_*.rows.jsonl.gz``)."""
    path = Path(path)
    gz = path.with_name(path.name + ".gz")
    return gz if not path.exists() and not path.name.endswith(".gz") and gz.is_file() else path


def read_stored_text(path: str | Path) -> str:
    """The text of the file at `path` (`stored_path`: plain or gzipped), UTF-8."""
    path = stored_path(path)
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text(encoding="utf-8")


def read_stored_json(path: str | Path) -> Any:
    """The JSON value in the file at `path` (`stored_path`: ``X.json`` or ``X.json.gz``)."""
    return json.loads(read_stored_text(path))


def unpack_stored(path: str | Path) -> Path:
    """Make `path` a plain file again when only its gzipped form is there (before a benchmark appends rows to it),
    removing the gzipped copy so the rows are not read twice. Returns `path`."""
    path = Path(path)
    stored = stored_path(path)
    if stored != path:
        from rhea.storage import atomic_write_text

        atomic_write_text(path, read_stored_text(stored))
        stored.unlink()
    return path


def write_results(path: str | Path, results: dict) -> Path:
    """Write `results` to `path` (gzipped when it ends in ``.gz``, with no timestamp, so equal results give equal
    bytes), through a temporary file renamed over it: a reader sees the old file or the whole new one."""
    path = Path(path)
    text = json.dumps(results, indent=1, ensure_ascii=False, default=json_default)
    data = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0) if path.name.endswith(".gz") \
        else text.encode("utf-8")
    from rhea.storage import atomic_write_bytes

    atomic_write_bytes(path, data)
    return path


#: The ``format`` field of every ``results.json`` that `rhea bench` writes (readers check it).
RESULTS_FORMAT = "rhea-bench/1"


def describe_setting(value: Any) -> Any:
    """`value` if JSON can hold it, else what describes it (a judge's settings), else its type's name.

    >>> describe_setting({"n_facts": 2}), describe_setting(object())
    ({'n_facts': 2}, 'object')
    """
    if callable(getattr(value, "describe", None)):
        return value.describe()
    try:
        json.dumps(value)
        return value
    except TypeError:
        return type(value).__name__


def scores_only(row: dict) -> dict:
    """What a suite's `aggregate` reads from a results row: the suite's scores plus the numeric cost
    fields (no texts, decisions or tiers).

    >>> scores_only({"iar": 9.0, "reply": "Hi", "tiers": {"raw": 2}, "latency_s": 1.5})
    {'iar': 9.0, 'latency_s': 1.5}
    """
    return {k: v for k, v in row.items() if k not in ("decisions", "ledger", "user", "reply", "tiers", "error")}


def progress_bar(total: int, enabled: bool, *, desc: str = "rhea bench", unit: str = "turn", initial: int = 0):
    """A tqdm bar over `total` items (`initial` done already), drawn only when `enabled`."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled)


def json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def write_outputs(results: dict, out: str | Path) -> list[Path]:
    """Write ``results.json``, ``summary.md`` and the PNGs for `results` into `out`."""
    from rhea.eval import stats_report
    from rhea.storage import atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results["statistics"] = stats_report.statistics(results)  # intervals over episodes, vs vanilla
    written = [write_results(results_file(out), results), out / "summary.md"]
    atomic_write_text(written[1], summary_markdown(results))
    if _can_plot():
        written.extend(plot_results(results, out))
        written.extend(stats_report.plot_bands(results, out))
    return written


def _can_plot() -> bool:
    """Plots are optional: without matplotlib (not a dependency of the library) none are drawn and a
    warning says how to get them; the results and the summary are written as ever."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        warnings.warn("matplotlib is not installed: no plots drawn (the results and summary are written); "
                      "`pip install matplotlib` draws them next time", RuntimeWarning, stacklevel=3)
        return False
    return True


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def summary_rows(results: dict) -> list[dict]:
    """One dict per policy: the suite's headline metrics and the cost columns."""
    suite = results["config"]["suite"]
    table = []
    # a multi-session-qa run judged for correctness (`rhea judge`, or a judge named to `rhea bench`)
    correctness = any(d["aggregate"].get("judge_correct") is not None for d in results["policies"].values())
    for policy, data in results["policies"].items():
        agg, cost = data["aggregate"], data["cost"]
        row = {"policy": policy}
        if suite == "instruction-retention":
            row.update({"IAR (0-10)": agg.get("iar"), "IAR loose": agg.get("iar_loose"),
                        "non-answers": agg.get("non_answers"),
                        "revoked still followed": agg.get("revoked_still_followed")})
        elif suite == "state-tracking":
            row.update({"accuracy": agg.get("accuracy"), "JGA (final, exact)": agg.get("jga"),
                        "probe JGA": agg.get("probe_jga"), "stale rate": agg.get("stale_rate")})
        elif suite == "long-horizon":
            row.update({"recall accuracy": agg.get("recall_accuracy"), "rule accuracy": agg.get("rule_accuracy"),
                        "judge (1-10)": agg.get("judge_mean")})
        elif suite == "multi-session-qa":
            row.update({"F1": agg.get("f1"), "contains answer": agg.get("contains"),
                        "evidence in context": agg.get("evidence_in_context"), "evidence raw": agg.get("evidence_raw")})
            if correctness:
                row["judged correct"] = agg.get("judge_correct")
        elif suite == "mt-eval-recollection":
            row.update({"IAR (0-10)": agg.get("iar"), "IAR loose": agg.get("iar_loose"),
                        "non-answers": agg.get("non_answers")})
        elif suite == "long-mt-bench-plus":
            row.update({"retrospective judge (1-10)": agg.get("retrospective_judge_mean"),
                        "judge (1-10)": agg.get("judge_mean"), "evidence in context": agg.get("evidence_in_context"),
                        "non-answers": agg.get("non_answers")})
        row.update({
            "context tokens/turn": cost.get("mean_context_tokens"),
            "latent slots/turn": cost.get("mean_latent_slots"),
            "last-turn context": cost.get("last_turn_context_tokens"),
            "vs full history": cost.get("context_vs_full_history"),
            "latency s/turn": cost.get("mean_latency_s"),
            "compress s": cost.get("mean_compress_s"), "score s": cost.get("mean_score_s"),
            "prefill s": cost.get("mean_prefill_s"), "decode s": cost.get("mean_decode_s"),
            "errors": cost.get("errors"),
        })
        table.append(row)
    return table


def _machine(env: dict) -> str:
    """Where turns ran, as summary.md names it: device, dtype (when recorded), torch, threads.

    >>> _machine({"device": "cpu", "dtype": "bfloat16", "torch": "2.13.0", "threads": 2})
    'cpu, bfloat16, torch 2.13.0, 2 threads'
    """
    dtype = f"{env['dtype']}, " if env.get("dtype") else ""
    return f"{env.get('device', '?')}, {dtype}torch {env.get('torch', '?')}, {env.get('threads', '?')} threads"


def summary_markdown(results: dict) -> str:
    """``summary.md``: the run's settings, then a policy × metric table."""
    config, env = results["config"], results.get("environment", {})
    rows = summary_rows(results)
    lines = [f"# rhea bench: {config['suite']}", "",
             f"model `{config['model']}` (adapters {'trained' if config.get('adapters_trained') else 'UNTRAINED'}), "
             f"{config['n_episodes']} episode(s) × {config['n_turns']} turns, seed {config['seed']}, "
             f"max_new_tokens {config['max_new_tokens']}, greedy; data: {config['data'] or 'built-in'}; "
             f"{_machine(env)}"
             + (f"; turn time {results['turn_seconds'] / 60:.1f} min over all policies" if "turn_seconds" in results else "")
             + (f" (wall of the last invocation {results['wall_s'] / 60:.1f} min)" if "wall_s" in results else ""), ""]
    where = {p: d.get("environments") or [] for p, d in results["policies"].items()}
    if any(e != env for envs in where.values() for e in envs):
        lines += ["Turns ran on more than this invocation's machine (as recorded per policy):", ""]
        lines += [f"- {p}: " + "; ".join(map(_machine, envs)) for p, envs in where.items() if envs]
        lines.append("")
    if rows:
        headers = list(rows[0])
        lines.append("| " + " | ".join(headers) + " |")
        lines.append("|" + "---|" * len(headers))
        for row in rows:
            lines.append("| " + " | ".join(_fmt(row[h], 3 if h.endswith(" s") else 2) for h in headers) + " |")
    if config["suite"] == "long-horizon" and any(
            d["aggregate"].get("judge") == "skipped" for d in results["policies"].values()):
        lines += ["", "No judge was configured (--judge-url): quality ratings were skipped; the recall and "
                      "reference checks above still ran."]
    checks = {p: d["aggregate"]["judge_check"] for p, d in results["policies"].items() if d["aggregate"].get("judge_check")}
    if checks:
        lines += ["", "Judge check (multi-session-qa: how far the correctness judge agrees with the rule scores where "
                      "they leave no doubt):"]
        def count(share, n):
            return round(share * n) if share is not None else 0

        lines += [f"- {p}: {count(c['exact_judged_correct'], c['exact'])} of {c['exact']} replies holding exactly the "
                  f"gold's words judged correct; {count(c['disjoint_judged_wrong'], c['disjoint'])} of {c['disjoint']} "
                  "sharing no word with it judged wrong" for p, c in checks.items()]
    warned = {p: [w for r in d["turns"] for w in _score_warnings(r)] for p, d in results["policies"].items()}
    if any(warned.values()):
        lines += ["", "Score warnings recorded by the policies (turns warned, last warning):"]
        lines += [f"- {p}: {len(w)}/{len(results['policies'][p]['turns'])} turns; {w[-1]}"
                  for p, w in warned.items() if w]
    if results.get("statistics"):
        from rhea.eval.stats_report import statistics_markdown

        lines += ["", statistics_markdown(results["statistics"]).rstrip("\n")]
    lines += ["", "Columns: context tokens = text tokens + latent slots fed to the model for the turn (the rendered "
                  "prompt, chat template included); vs full history = the turn's content tokens (text + latent "
                  "slots, no template) / the content tokens of the whole history and query, summed over turns "
                  "(1.0 = everything, '–' for rows recorded before this was measured); "
                  "latency = plan (incl. compress + score) + render + prefill + decode + observe (compressing the "
                  "new reply)."]
    return "\n".join(lines) + "\n"


def _score_warnings(row: dict) -> list[str]:
    """The tier-collapse warnings a policy recorded in this turn's decisions."""
    records = row.get("decisions", {}).get("records", [])
    return [r["scores"]["warning"] for r in records
            if isinstance(r, dict) and isinstance(r.get("scores"), dict) and r["scores"].get("warning")]


def _by_turn(rows: Sequence[dict], field: str) -> tuple[list[int], list[float]]:
    values: dict[int, list[float]] = {}
    for r in rows:
        v = r.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and r.get("turn_index") is not None:
            values.setdefault(r["turn_index"], []).append(float(v))
    xs = sorted(values)
    return xs, [sum(values[x]) / len(values[x]) for x in xs]


def plot_results(results: dict, out: str | Path) -> list[Path]:
    """PNGs: tokens vs turn, latency vs turn, and IAR vs turn for instruction-retention."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    written = []
    for filename, field, label in _plots(results["config"]):
        fig = _draw(results, field, label)
        fig.savefig(out / filename, dpi=110)
        plt.close(fig)
        written.append(out / filename)
    return written


def _plots(config: dict) -> list[tuple[str, str, str]]:
    """(file name, row field, y-axis label) per plot; long labels are wrapped to fit a 4-inch axis."""
    plots = [("tokens_vs_turn.png", "context_tokens", "context tokens\n(text + latent slots, with template)"),
             ("latency_vs_turn.png", "latency_s", "latency per turn (s)")]
    if config["suite"] == "instruction-retention":
        plots.insert(0, ("iar_vs_turn.png", "iar", "IAR (0-10)"))
    return plots


def _draw(results: dict, field: str, label: str):
    """One plot's figure (laid out, not saved)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    config = results["config"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, data in results["policies"].items():
        xs, ys = _by_turn(data["turns"], field)
        if xs:
            ax.plot(xs, ys, marker="o", markersize=3, label=policy)
    if field == "context_tokens":
        first = next(iter(results["policies"].values()), {"turns": []})
        xs, ys = _by_turn(first["turns"], "full_history_tokens")
        if xs:
            ax.plot(xs, ys, "k--", linewidth=1, label="full history (content only, no template)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("turn")
    ax.set_ylabel(label)
    ax.set_title(f"{config['suite']} · {config['model']}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
