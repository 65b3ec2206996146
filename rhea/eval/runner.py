"""The benchmark runner behind `rhea bench`: every policy through every episode of a suite.

`run_suite` drives a `ChatSession` per (policy, episode), scores each reply with the suite,
and records per turn what the policy decided (the plan's decisions and ledger) and what the
turn cost (context tokens, latent slots, latency split into compress / score / prefill /
decode). With `out=` it writes, as it goes:

``out/config.json``                 the run's settings (a resumed run must match them)
``out/state/<policy>/<n>/``         per episode: ``rows.jsonl`` (one line per finished turn),
                                    ``session/`` (the ChatSession after the last finished
                                    turn) and ``done`` once the episode is complete
``out/results.json``                every turn's row and each policy's aggregate metrics
``out/summary.md``                  a policy × metric table
``out/*.png``                       IAR / tokens / latency against the turn index

An interrupted run started again with the same settings continues from the last finished
turn of each episode (the policy list may differ: policies already run are reused, new ones run) (the saved session restores the policy's memory exactly), so long runs
on slow machines can be stopped and resumed at any time.

>>> from rhea.testing import tiny_rhea
>>> result = run_suite(tiny_rhea(), "efficiency", ["vanilla"], n_turns=2, max_new_tokens=2,
...                    progress=False)
>>> len(result["policies"]["vanilla"]["turns"])
2
"""
from __future__ import annotations

import hashlib
import json
import platform
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from rhea.constants import BENCH_POLICIES
from rhea.errors import RheaError
from rhea.eval.suites import Suite, get_suite
from rhea.eval.suites.base import mean

RESULTS_FORMAT = "rhea-bench/1"
#: Policies that run offline on any RheaForCausalLM with no extra data or endpoint.
DEFAULT_POLICIES = BENCH_POLICIES
#: The per-turn cost fields every row carries (seconds, except the token counts).
COST_FIELDS = ("context_tokens", "text_tokens", "latent_slots", "new_tokens", "full_history_tokens",
               "compress_s", "score_s", "plan_s", "prefill_s", "decode_s", "latency_s")
#: The headline metric of each suite (first column of its summary table).
HEADLINE = {"instruction-retention": "iar", "state-tracking": "accuracy",
            "long-horizon": "recall_accuracy", "efficiency": None}


class BenchError(RheaError, ValueError):
    """A benchmark run that cannot start or resume as asked."""


def _cost_row(record) -> dict:
    """Tokens and the latency split of one finished turn, from its `TurnRecord`."""
    t = record.timings
    plan_s = float(t.get("plan_s", 0.0))
    compresses = "compress_s" in t  # a policy that compresses reports it in its counters
    row = {
        "context_tokens": record.prompt_tokens, "latent_slots": record.latent_slots,
        "text_tokens": record.prompt_tokens - record.latent_slots, "new_tokens": record.new_tokens,
        "full_history_tokens": record.full_history_tokens, "content_tokens": record.content_tokens,
        "compress_s": float(t.get("compress_s", 0.0)),
        "score_s": max(plan_s - float(t.get("plan_compress_s", 0.0)), 0.0) if compresses else 0.0,
        "plan_s": plan_s, "render_s": float(t.get("render_s", 0.0)),
        "prefill_s": float(t.get("prefill_s", 0.0)), "decode_s": float(t.get("decode_s", 0.0)),
        "observe_s": float(t.get("observe_s", 0.0)), "tiers": dict(record.tiers),
    }
    row["latency_s"] = plan_s + row["render_s"] + row["prefill_s"] + row["decode_s"] + row["observe_s"]
    return row


def _decision_trace(plan) -> dict:
    if plan is None:
        return {}
    view = plan.to_dict()
    return {"decisions": view["decisions"], "ledger": view["ledger"]}


def _environment(device: "torch.device | None" = None) -> dict:
    import torch
    import transformers

    import rhea

    device = torch.device(device if device is not None else "cpu")
    where = f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else str(device)

    return {"rhea": getattr(rhea, "__version__", "unknown"), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "device": where}


def _check_config(out: Path, config: dict, resume: bool) -> None:
    path = out / "config.json"
    if path.is_file() and resume:
        saved = json.loads(path.read_text())
        on_disk = dict(saved)
        if "episodes_sha256" not in saved:  # a run begun before the digest was recorded
            saved["episodes_sha256"] = config["episodes_sha256"]
        if saved["episodes_sha256"] != config["episodes_sha256"]:
            raise BenchError(
                f"{out} holds a run of other conversations: the suite now generates different turns from the "
                "same settings (its code or data changed since), so the checkpointed replies answer other "
                "questions; pass another --out, or --no-resume to start this run over")
        # the policy list may change: each policy's episodes are checkpointed on their own
        diff = sorted(k for k in set(saved) | set(config) if k != "policies" and saved.get(k) != config.get(k))
        if diff:
            raise BenchError(
                f"{out} holds a run with other settings ({', '.join(diff)} differ); pass the same settings "
                "to resume it, another --out for a new run, or --no-resume to start this one over")
        if on_disk != config:
            path.write_text(json.dumps(config, indent=1))
        return
    if path.is_file():  # not resuming: start over
        shutil.rmtree(out / "state", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1))


def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by an interruption: redo that turn
                break
    return rows


def run_suite(
    model,
    suite: str | Suite,
    policies: Sequence[str] = DEFAULT_POLICIES,
    *,
    tokenizer=None,
    n_turns: int | None = None,
    seed: int = 0,
    n_episodes: int | None = None,
    data: str | None = None,
    suite_kwargs: Mapping[str, Any] | None = None,
    max_new_tokens: int = 64,
    policy_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    out: str | Path | None = None,
    resume: bool = True,
    progress: bool = True,
    model_name: str | None = None,
) -> dict:
    """Run `suite` for every policy in `policies` on `model`; return (and with `out`, write) the results.

    suite: a registered suite name (with `data`, a path to its public data file, and
    `suite_kwargs`, its constructor options) or a built `Suite`.
    policy_kwargs: per-policy constructor options, e.g. ``{"rhea": {"tau_low": 0.3}}``.
    Greedy decoding, so a run is reproducible from its settings.
    """
    from rhea.policies import available_policies
    from rhea.session import ChatSession

    if isinstance(suite, str):
        kwargs = dict(suite_kwargs or {})
        if n_episodes is not None:
            kwargs["n_episodes"] = n_episodes
        suite = get_suite(suite, path=data, **kwargs)
    elif suite_kwargs or data or n_episodes is not None:
        raise BenchError("pass data / suite_kwargs / n_episodes only with a suite name, not a built Suite")
    policies = list(policies)
    if not policies:
        raise BenchError("policies is empty; name at least one (see rhea.policies.available_policies())")
    unknown = [p for p in policies if p not in available_policies()]
    if unknown:
        raise BenchError(f"unknown policies {unknown}; choose from {available_policies()}")
    if len(set(policies)) != len(policies):
        raise BenchError(f"policies {policies} name one policy twice")
    policy_kwargs = {k: dict(v) for k, v in (policy_kwargs or {}).items()}
    episodes = suite.generate(n_turns=n_turns, seed=seed)
    config = {"format": RESULTS_FORMAT, "suite": suite.name, "policies": policies,
              "n_turns": len(episodes[0].turns), "n_episodes": len(episodes), "seed": seed, "data": data,
              "suite_kwargs": {k: _label(v) for k, v in (suite_kwargs or {}).items()}, "max_new_tokens": max_new_tokens,
              "policy_kwargs": policy_kwargs,
              "model": model_name or getattr(model.config, "base_model", None) or type(model).__name__,
              "adapters_trained": bool(getattr(model, "adapters_trained", False)),
              # what the checkpointed replies answered: a resume after the suite changed is refused
              "episodes_sha256": hashlib.sha256(
                  json.dumps([e.to_dict() for e in episodes], sort_keys=True, default=_json_default).encode()
              ).hexdigest()}
    out = Path(out) if out is not None else None
    if out is not None:
        _check_config(out, config, resume)

    total = len(policies) * sum(len(e.turns) for e in episodes)
    bar = _progress(total, progress)
    started = time.perf_counter()
    environment = _environment(getattr(model, "device", None))
    results: dict[str, Any] = {"format": RESULTS_FORMAT, "config": config, "environment": environment,
                               "episodes": [e.to_dict() for e in episodes], "policies": {}}
    try:
        for policy in policies:
            rows: list[dict] = []
            for number, episode in enumerate(episodes):
                state = out / "state" / policy / str(number) if out is not None else None
                rows.extend(_run_episode(model, tokenizer, policy, episode, state, bar, ChatSession,
                                         max_new_tokens=max_new_tokens, kwargs=policy_kwargs.get(policy, {}),
                                         environment=environment))
            results["policies"][policy] = {"aggregate": suite.aggregate([_scores_only(r) for r in rows]),
                                           "cost": _cost_summary(rows), "turns": rows}
            if out is not None:  # where this policy's turns ran (a resumed run may span machines)
                results["policies"][policy]["environments"] = _environments_of(
                    [out / "state" / policy / str(n) for n in range(len(episodes))])
    finally:
        bar.close()
    results["wall_s"] = time.perf_counter() - started  # this invocation only (a resumed run did less)
    results["turn_seconds"] = sum(r.get("latency_s") or 0.0 for d in results["policies"].values() for r in d["turns"])
    if out is not None:
        write_outputs(results, out)
    return results


def _label(value: Any) -> Any:
    """`value` if JSON can hold it, else its type's name (a judge, a generator) for config.json."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return type(value).__name__


def _scores_only(row: dict) -> dict:
    """What the suite's `aggregate` reads: the suite's scores plus the numeric cost fields."""
    return {k: v for k, v in row.items() if k not in ("decisions", "ledger", "user", "reply", "tiers", "error")}


ENVIRONMENTS_FILE = "environments.jsonl"


def _record_environment(state: Path, environment: dict) -> None:
    """Append `environment` to the state's list of machines that ran its turns (once per change)."""
    path = state / ENVIRONMENTS_FILE
    seen = _read_rows(path)
    if not seen or seen[-1] != environment:
        with path.open("a") as f:
            f.write(json.dumps(environment, sort_keys=True) + "\n")


def _environments_of(states: Sequence[Path]) -> list[dict]:
    """The distinct environments recorded in `states`, in the order they first ran (states
    written before this was recorded contribute none)."""
    found: list[dict] = []
    for state in states:
        for env in _read_rows(state / ENVIRONMENTS_FILE):
            if env not in found:
                found.append(env)
    return found


def _run_episode(model, tokenizer, policy: str, episode, state: Path | None, bar, session_cls, *,
                 max_new_tokens: int, kwargs: dict, environment: dict | None = None) -> list[dict]:
    rows = _read_rows(state / "rows.jsonl") if state is not None else []
    done = state is not None and (state / "done").is_file()
    if done or len(rows) == len(episode.turns):
        bar.update(len(episode.turns))
        return rows[: len(episode.turns)]
    session = None
    if rows and state is not None and (state / "session").is_dir():
        session = session_cls.load(state / "session", model, policy_kwargs=kwargs)
        if len(session.conversation) != sum(1 for r in rows if "error" not in r):
            session = None  # the session and the rows disagree (cut mid-write): redo the episode
    if session is None:
        rows = []
        session = session_cls(model, tokenizer, policy, max_new_tokens=max_new_tokens, policy_kwargs=kwargs)
        if state is not None:
            shutil.rmtree(state, ignore_errors=True)
            state.mkdir(parents=True)
    bar.update(len(rows))
    if state is not None and environment is not None:
        _record_environment(state, environment)
    history = [(r["user"], r["reply"]) for r in rows if "error" not in r]
    traces = []  # the session reports every finished turn here: its record (timings) and plan
    session.add_observer(traces.append)
    for turn in episode.turns[len(rows):]:
        row: dict[str, Any] = {"policy": policy, "user": turn.user}
        try:
            reply = session.send(turn.user)
        except RheaError as e:  # a policy's recorded failure (e.g. a context over the window): score it as a miss
            reply, row["error"] = "", f"{type(e).__name__}: {e}"
        else:
            row.update(_cost_row(traces[-1].record))
            row.update(_decision_trace(traces[-1].plan))
        row["reply"] = reply
        scores = episode.score_turn(turn, reply, history=history)
        row = {**scores, **row, "policy": policy}
        rows.append(row)
        if "error" not in row:
            history.append((turn.user, reply))
        if state is not None:
            if "error" not in row:
                session.save(state / "session")
            with open(state / "rows.jsonl", "a") as f:
                f.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
        bar.update(1)
    if state is not None:
        (state / "done").write_text("")
    return rows


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def _cost_summary(rows: Sequence[dict]) -> dict:
    """Means (and the last turn's context) of the per-turn cost fields; tier shares."""
    ok = [r for r in rows if "error" not in r]
    summary = {f"mean_{k}": mean(r.get(k) for r in ok) for k in COST_FIELDS}
    if ok:
        last_turn = max(r.get("turn_index") or 0 for r in ok)
        summary["last_turn_context_tokens"] = mean(r["context_tokens"] for r in ok if r.get("turn_index") == last_turn)
        # Content tokens over content tokens: the rendered prompt (context_tokens) also counts the chat
        # template, which the full-history count does not. Rows written before content_tokens existed: None.
        full = sum(r["full_history_tokens"] for r in ok)
        content = [r.get("content_tokens") for r in ok]
        summary["context_vs_full_history"] = (sum(content) / full) if full and None not in content else None
    tiers: dict[str, int] = {}
    for r in ok:
        for tier, n in r.get("tiers", {}).items():
            tiers[tier] = tiers.get(tier, 0) + n
    n_tiers = sum(tiers.values())
    summary["tier_share"] = {t: n / n_tiers for t, n in sorted(tiers.items())} if n_tiers else {}
    summary["errors"] = len(rows) - len(ok)
    return summary


# ------------------------------------------------------------------------------------ outputs
def write_outputs(results: dict, out: str | Path) -> list[Path]:
    """Write ``results.json``, ``summary.md`` and the PNGs for `results` into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "summary.md"]
    written[0].write_text(json.dumps(results, indent=1, ensure_ascii=False, default=_json_default))
    written[1].write_text(summary_markdown(results))
    written.extend(plot_results(results, out))
    return written


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
    for policy, data in results["policies"].items():
        agg, cost = data["aggregate"], data["cost"]
        row = {"policy": policy}
        if suite == "instruction-retention":
            row.update({"IAR (0-10)": agg.get("iar"), "revoked still followed": agg.get("revoked_still_followed")})
        elif suite == "state-tracking":
            row.update({"accuracy": agg.get("accuracy"), "JGA": agg.get("jga"), "stale rate": agg.get("stale_rate")})
        elif suite == "long-horizon":
            row.update({"recall accuracy": agg.get("recall_accuracy"), "rule accuracy": agg.get("rule_accuracy"),
                        "judge (1-10)": agg.get("judge_mean")})
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


def summary_markdown(results: dict) -> str:
    """``summary.md``: the run's settings, then a policy × metric table."""
    config, env = results["config"], results.get("environment", {})
    rows = summary_rows(results)
    lines = [f"# rhea bench: {config['suite']}", "",
             f"model `{config['model']}` (adapters {'trained' if config.get('adapters_trained') else 'UNTRAINED'}), "
             f"{config['n_episodes']} episode(s) × {config['n_turns']} turns, seed {config['seed']}, "
             f"max_new_tokens {config['max_new_tokens']}, greedy; data: {config['data'] or 'built-in'}; "
             f"{env.get('device', '?')}, torch {env.get('torch', '?')}, {env.get('threads', '?')} threads"
             + (f"; turn time {results['turn_seconds'] / 60:.1f} min over all policies" if "turn_seconds" in results else "")
             + (f" (wall of the last invocation {results['wall_s'] / 60:.1f} min)" if "wall_s" in results else ""), ""]
    where = {p: d.get("environments") or [] for p, d in results["policies"].items()}
    if any(e != env for envs in where.values() for e in envs):
        lines += ["Turns ran on more than this invocation's machine (as recorded per policy):", ""]
        lines += [f"- {p}: " + "; ".join(f"{e.get('device', '?')}, torch {e.get('torch', '?')}, "
                                          f"{e.get('threads', '?')} threads" for e in envs)
                  for p, envs in where.items() if envs]
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
    warned = {p: [w for r in d["turns"] for w in _score_warnings(r)] for p, d in results["policies"].items()}
    if any(warned.values()):
        lines += ["", "Score warnings recorded by the policies (turns warned, last warning):"]
        lines += [f"- {p}: {len(w)}/{len(results['policies'][p]['turns'])} turns; {w[-1]}"
                  for p, w in warned.items() if w]
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
    from matplotlib.ticker import MaxNLocator

    out = Path(out)
    config = results["config"]
    title = f"{config['suite']} · {config['model']}"
    plots = [("tokens_vs_turn.png", "context_tokens", "context tokens (text + latent slots, chat template included)"),
             ("latency_vs_turn.png", "latency_s", "latency per turn (s)")]
    if config["suite"] == "instruction-retention":
        plots.insert(0, ("iar_vs_turn.png", "iar", "IAR (0-10)"))
    written = []
    for filename, field, label in plots:
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
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / filename, dpi=110)
        plt.close(fig)
        written.append(out / filename)
    return written


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="rhea bench", unit="turn", disable=not enabled)
