"""The statistics part of a bench report: intervals over episodes, paired comparisons against
vanilla, per-rule pass rates, non-answers, and plots with error bands.

`statistics(results)` computes everything from a ``results.json`` dict (so committed runs
can be re-reported offline); `statistics_markdown` renders it for ``summary.md``;
`plot_bands` draws the per-turn / per-distance curves with a 95% band over episodes.

>>> from rhea.eval.stats_report import HEADLINE_METRICS
>>> HEADLINE_METRICS["instruction-retention"][:2]
('iar', 'iar_loose')
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from rhea.eval.stats import (StatsError, bootstrap_ci, episode_metrics, metric_by_episode,
                             paired_comparison, shared_time_units)

#: Per suite, the metrics reported with intervals (in this order); then the cost metrics.
HEADLINE_METRICS = {
    "instruction-retention": ("iar", "iar_loose", "non_answer_rate", "revoked_still_followed"),
    "state-tracking": ("accuracy", "jga", "probe_jga", "stale_rate"),
    "long-horizon": ("recall_accuracy", "rule_accuracy", "judge_mean"),
    "multi-session-qa": ("f1", "contains", "judge_correct", "evidence_in_context"),
    "mt-eval-recollection": ("iar", "iar_loose"),
    "long-mt-bench-plus": ("retrospective_judge_mean", "judge_mean", "evidence_in_context"),
    "efficiency": (),
}
COST_METRICS = ("context_tokens", "latency_s", "held_mb")
#: Metrics measured by a clock, which a batch of episodes shares (`rhea.eval.stats.shared_time_units`).
TIMED_METRICS = ("latency_s",)
LABELS = {"iar": "IAR strict (0-10)", "iar_loose": "IAR loose (0-10)",
          "non_answer_rate": "non-answer rate", "revoked_still_followed": "revoked still followed",
          "accuracy": "accuracy", "jga": "JGA (final, exact)", "probe_jga": "probe JGA",
          "stale_rate": "stale rate", "recall_accuracy": "recall accuracy",
          "rule_accuracy": "rule accuracy", "judge_mean": "judge (1-10)",
          "context_tokens": "context tokens/turn", "latency_s": "latency s/turn", "held_mb": "MB held/turn",
          "f1": "token F1", "contains": "contains answer", "evidence_in_context": "evidence in context",
          "judge_correct": "judged correct",
          "retrospective_judge_mean": "retrospective judge (1-10)"}
BASELINE = "vanilla"


def _suite(name: str):
    from rhea.eval.suites import get_suite

    return get_suite(name, n_episodes=1)


def statistics(results: Mapping[str, Any], *, baseline: str = BASELINE, seed: int = 0) -> dict:
    """Intervals and comparisons for every policy of `results` (a ``results.json`` dict).

    Returns ``{"unit": "episode", "n_episodes", "baseline", "metrics": [...],
    "policies": {policy: {"intervals": {metric: Interval dict},
    "vs_baseline": {metric: Comparison dict}, "not_compared": {metric: why}, only when some
    metric could not be paired with the baseline}}, "rules": {rule: {policy: {...}}}}``.
    """
    suite_name = results["config"]["suite"]
    suite = _suite(suite_name)
    metrics = HEADLINE_METRICS.get(suite_name, ()) + COST_METRICS
    per_policy = {p: episode_metrics(suite, d["turns"]) for p, d in results["policies"].items()}
    units = {p: shared_time_units(d["turns"]) for p, d in results["policies"].items()}
    out: dict[str, Any] = {"unit": "episode", "baseline": baseline if baseline in per_policy else None,
                           "n_episodes": max((len(v) for v in per_policy.values()), default=0),
                           "metrics": list(metrics), "policies": {}, "rules": {}}
    for policy, per_episode in per_policy.items():
        intervals, versus, not_compared = {}, {}, {}
        for metric in metrics:
            values = metric_by_episode(per_episode, metric)
            if not values:
                continue
            if metric in TIMED_METRICS and _batched(units[policy], values):
                intervals[metric], not_compared[metric] = _per_batch(
                    values, units[policy], seed, paired=bool(out["baseline"]) and policy != baseline)
                continue
            intervals[metric] = bootstrap_ci(values.values(), seed=seed).to_dict()
            if metric in TIMED_METRICS and out["baseline"] and policy != baseline and _batched(
                    units[baseline], metric_by_episode(per_policy[baseline], metric)):
                not_compared[metric] = (f"{baseline}'s episodes ran in batches that share each turn's time: "
                                        "its latency is one measurement per batch, not per episode")
                continue
            if out["baseline"] and policy != baseline:
                try:
                    versus[metric] = paired_comparison(
                        values, metric_by_episode(per_policy[baseline], metric), seed=seed).to_dict()
                except StatsError as e:  # e.g. no episode shared with the baseline: say so, do not drop it
                    not_compared[metric] = str(e)
        not_compared = {m: why for m, why in not_compared.items() if why}
        out["policies"][policy] = {"intervals": intervals, "vs_baseline": versus}
        if not_compared:
            out["policies"][policy]["not_compared"] = not_compared
    if suite_name == "instruction-retention":
        out["rules"] = _rule_statistics(per_policy, seed)
        out["non_answers"] = {p: {"count": d["aggregate"].get("non_answers"),
                                  "by_reason": d["aggregate"].get("non_answers_by_reason", {})}
                              for p, d in results["policies"].items()}
    repeats = {p: repeated_replies(d["turns"]) for p, d in results["policies"].items()}
    if any(r["replies"] for r in repeats.values()):
        out["repeated_replies"] = repeats
    return out


def _batched(units: Mapping[str, str], values: Mapping[str, float]) -> bool:
    """Whether some of the episodes in `values` share their turns' time (`shared_time_units`)."""
    return len({units.get(e, e) for e in values}) < len(values)


def _per_batch(values: Mapping[str, float], units: Mapping[str, str], seed: int, *,
               paired: bool) -> tuple[dict, str | None]:
    """A timed metric of batched episodes: the interval over batches (the unit that was measured), and,
    where it would have been `paired` with the baseline, why it is not."""
    by_unit: dict[str, list[float]] = {}
    for episode, value in values.items():
        by_unit.setdefault(units.get(episode, episode), []).append(value)
    interval = {**bootstrap_ci([sum(v) / len(v) for v in by_unit.values()], seed=seed).to_dict(),
                "unit": "batch", "episodes": len(values)}
    why = None if not paired else (
        f"its {len(values)} episodes ran in {len(by_unit)} batch(es) that share each turn's time: latency is "
        f"one measurement per batch, not per episode, so it is not paired episode by episode")
    return interval, why


def repeated_replies(turns: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many non-empty replies repeat, verbatim (whitespace aside), an earlier reply of the same episode.

    A diagnostic, not a failure: a repeated "My answer is yes." can be right every time; a model that
    answers every question with its first reply is not. Counted over `turns` (a policy's rows in
    ``results.json``), in turn order within each episode.

    >>> rows = [{"episode_id": "e", "turn_index": i, "reply": r} for i, r in enumerate(["a  b", "c", "a b", ""])]
    >>> repeated_replies(rows)
    {'replies': 3, 'repeats': 1, 'episodes_with_repeats': 1}
    """
    seen: dict[str, set[str]] = {}
    replies = repeats = 0
    episodes: set[str] = set()
    for row in sorted(turns, key=lambda r: (str(r.get("episode_id")), int(r.get("turn_index") or 0))):
        text = " ".join(str(row.get("reply") or "").split())
        if not text:
            continue
        episode = str(row.get("episode_id"))
        replies += 1
        if text in seen.setdefault(episode, set()):
            repeats += 1
            episodes.add(episode)
        seen[episode].add(text)
    return {"replies": replies, "repeats": repeats, "episodes_with_repeats": len(episodes)}


def _rule_statistics(per_policy: Mapping[str, Mapping[str, Mapping[str, float]]], seed: int) -> dict:
    rules = sorted({m.split(".", 1)[1] for per_episode in per_policy.values()
                    for metrics in per_episode.values() for m in metrics
                    if m.startswith("iar_by_instruction.")})
    table: dict[str, dict] = {}
    for rule in rules:
        for policy, per_episode in per_policy.items():
            strict = metric_by_episode(per_episode, f"iar_by_instruction.{rule}")
            if not strict:
                continue
            loose = metric_by_episode(per_episode, f"iar_loose_by_instruction.{rule}")
            checks = metric_by_episode(per_episode, f"checks_by_instruction.{rule}")
            table.setdefault(rule, {})[policy] = {
                "strict": bootstrap_ci(strict.values(), seed=seed).to_dict(),
                "loose": bootstrap_ci(loose.values(), seed=seed).to_dict() if loose else None,
                "checks": int(sum(checks.values())), "episodes": len(strict)}
    return table


def _cell(interval: Mapping[str, Any] | None, digits: int = 2) -> str:
    if not interval:
        return "–"
    if interval.get("low") is None:
        return f"{interval['mean']:.{digits}f}"
    return f"{interval['mean']:.{digits}f} [{interval['low']:.{digits}f}, {interval['high']:.{digits}f}]"


def _versus(cmp: Mapping[str, Any] | None, digits: int = 2) -> str:
    if not cmp:
        return "–"
    if cmp.get("low") is None:
        return f"{cmp['diff']:+.{digits}f} (p={cmp['p_value']:.2g})"
    return (f"{cmp['diff']:+.{digits}f} [{cmp['low']:+.{digits}f}, {cmp['high']:+.{digits}f}] "
            f"p={cmp['p_value']:.2g}")


def versus_row(label: str, comparisons: Mapping[str, Any], metrics: Sequence[str]) -> str:
    """One markdown row of paired differences (``comparisons``: metric -> Comparison dict) over `metrics`."""
    return f"| {label} | " + " | ".join(
        _versus(comparisons.get(m), 0 if m == "context_tokens" else 2) for m in metrics) + " |"


def statistics_markdown(stats: Mapping[str, Any]) -> str:
    """The ``summary.md`` section for `stats` (from `statistics`)."""
    n = stats["n_episodes"]
    if stats.get("unit") == "turn":
        lines = ["## Over scored turns: means, 95% intervals, paired differences", "",
                 f"Unit: the scored turn (n = {n}); mean over turns with a 95% percentile bootstrap interval; vs "
                 f"{stats.get('baseline')}: the paired mean difference on the same turns, its bootstrap interval and "
                 "a two-sided sign-flip permutation p-value. The turns of one conversation are not independent: "
                 "these intervals are narrower than the episodes' would be.", ""]
    elif n < 2:
        lines = ["## Over episodes: means, 95% intervals, paired differences", "",
                 f"**{n} episode: no interval and no test is possible** (the unit is the episode; the "
                 "turns of one conversation are not independent). Run --episodes 8 or more before "
                 "claiming a difference.", ""]
    else:
        lines = ["## Over episodes: means, 95% intervals, paired differences", "",
                 f"Unit: the episode (n = {n}); mean over episodes with a 95% percentile bootstrap "
                 f"interval; vs {stats.get('baseline') or BASELINE}: the paired mean difference on the same "
                 "episodes, its bootstrap interval and a two-sided sign-flip permutation p-value.", ""]
    metrics = [m for m in stats["metrics"]
               if any(m in d["intervals"] for d in stats["policies"].values())]
    if metrics:
        lines.append("| policy | " + " | ".join(LABELS.get(m, m) for m in metrics) + " |")
        lines.append("|---|" + "---|" * len(metrics))
        for policy, data in stats["policies"].items():
            lines.append(f"| {policy} | " + " | ".join(
                _cell(data["intervals"].get(m), 0 if m == "context_tokens" else 2) for m in metrics) + " |")
        if stats.get("baseline"):
            lines += ["", f"Paired difference vs {stats['baseline']} (policy − {stats['baseline']}):", ""]
            lines.append("| policy | " + " | ".join(LABELS.get(m, m) for m in metrics) + " |")
            lines.append("|---|" + "---|" * len(metrics))
            lines += [versus_row(policy, data["vs_baseline"], metrics)
                      for policy, data in stats["policies"].items() if policy != stats["baseline"]]
    batched = {p: d["intervals"][m] for m in TIMED_METRICS for p, d in stats["policies"].items()
               if (d["intervals"].get(m) or {}).get("unit") == "batch"}
    if batched:
        lines += ["", "Latency of " + ", ".join(f"{p} ({i['n']} batch{'es' if i['n'] != 1 else ''} of "
                                                 f"{i['episodes']} episodes)" for p, i in batched.items())
                  + ": the episodes of a batch share each turn's time, so the unit of a latency is the batch, "
                  "not the episode: its interval is over batches (none with one batch) and it is not paired "
                  "episode by episode. Time policies against each other with the benchmarks "
                  "(docs/guides/sessions-and-policies.md)."]
    if stats.get("rules"):
        policies = list(stats["policies"])
        lines += ["", "Pass rate of each rule (0-10; strict / loose; the interval is over the episodes "
                      "that gave the rule; checks = replies scored against it):", ""]
        lines.append("| rule | " + " | ".join(policies) + " |")
        lines.append("|---|" + "---|" * len(policies))
        for rule, by_policy in stats["rules"].items():
            cells = []
            for policy in policies:
                r = by_policy.get(policy)
                cells.append("–" if r is None else
                             f"{_cell(r['strict'])} / {_cell(r['loose'])} ({r['checks']} checks, "
                             f"{r['episodes']} ep.)")
            lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    if stats.get("non_answers"):
        lines += ["", "Non-answers (empty, echo of the question, only a question, degenerate repetition) fail every rule: "
                  + "; ".join(f"{p} {v['count']}" + (f" ({', '.join(f'{k} {c}' for k, c in v['by_reason'].items())})"
                                                    if v["by_reason"] else "")
                              for p, v in stats["non_answers"].items() if v["count"] is not None)]
    if stats.get("repeated_replies"):
        lines += ["", "Replies that repeat an earlier reply of the same episode verbatim (a diagnostic, not a "
                  "failure: a repeated \"My answer is yes.\" can be right; one reply for every question is "
                  "not): " + "; ".join(f"{p} {v['repeats']}/{v['replies']}"
                                      for p, v in stats["repeated_replies"].items() if v["replies"])]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- plots

def _series(rows: Sequence[Mapping[str, Any]], field: str, x_of) -> dict[Any, dict[str, list[float]]]:
    """``{x: {episode: [values]}}`` for `field` (a number, or a dict of numbers) of `rows`."""
    out: dict[Any, dict[str, list[float]]] = {}
    for row in rows:
        for x, value in x_of(row, field):
            out.setdefault(x, {}).setdefault(str(row.get("episode_id")), []).append(value)
    return out


def _by_turn(row, field):
    value = row.get(field)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and row.get("turn_index") is not None:
        yield row["turn_index"], float(value)


def _by_distance(row, field):
    for key, ok in (row.get(field) or {}).items():
        distance = (row.get("distance") or {}).get(key)
        if distance is not None:
            yield distance, 10.0 * float(ok)


def plot_bands(results: Mapping[str, Any], out: str | Path) -> list[Path]:
    """PNGs with a 95% bootstrap band over episodes around each policy's mean curve:
    IAR by turn and by distance (instruction-retention), probe accuracy by turn
    (state-tracking). With one episode the band is absent (nothing to resample)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suite = results["config"]["suite"]
    plots = {"instruction-retention": [
        ("iar_by_turn_bands.png", "iar", _by_turn, "turn", "IAR strict (0-10)"),
        ("iar_by_distance_bands.png", "adherence", _by_distance,
         "distance (turns since the instruction was given)", "pass rate (0-10)")],
        "state-tracking": [("accuracy_by_turn_bands.png", "accuracy", _by_turn, "turn", "probe accuracy")],
        "long-horizon": [("judge_by_turn_bands.png", "judge_rating", _by_turn, "turn", "judge (1-10)")]}
    written = []
    n_episodes = results["config"].get("n_episodes")
    for filename, field, x_of, xlabel, ylabel in plots.get(suite, []):
        fig, ax = plt.subplots(figsize=(7, 4))
        drawn = False
        for policy, data in results["policies"].items():
            series = _series(data["turns"], field, x_of)
            if not series:
                continue
            xs, means, lows, highs = [], [], [], []
            for x in sorted(series):
                per_episode = [sum(v) / len(v) for v in series[x].values()]
                ci = bootstrap_ci(per_episode, n_boot=1000)
                xs.append(x)
                means.append(ci.mean)
                lows.append(ci.low if ci.low is not None else ci.mean)
                highs.append(ci.high if ci.high is not None else ci.mean)
            line, = ax.plot(xs, means, marker="o", markersize=3, label=policy)
            ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15, linewidth=0)
            drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{suite} · {results['config']['model']} · mean over {n_episodes} episode(s), "
                     "95% bootstrap band", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = Path(out) / filename
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
