"""The benchmark runner behind `rhea bench`: every policy through every episode of a suite.

`run_suite` drives a `ChatSession` per (policy, episode), scores each reply with the suite,
and records per turn what the policy decided (the plan's decisions and ledger) and what the
turn cost (context tokens, latent slots, latency split into compress / score / prefill /
decode). With `out=` it writes, as it goes:

``out/config.json``                 the run's settings (a resumed run must match them)
``out/state/<policy>/<n>/``         per episode: ``rows.jsonl`` (one line per finished turn),
                                    ``session/`` (the ChatSession after the last finished
                                    turn) and ``done`` once the episode is complete
``out/results.json``                every turn's row and each policy's aggregate metrics (a folder
                                    holding ``results.json.gz`` instead is read and rewritten in it)
``out/summary.md``                  a policy × metric table, then each metric over episodes with a
                                    95% bootstrap interval and the paired difference vs vanilla
``out/*.png``                       IAR / tokens / latency against the turn index

The suite loop is here; the turn loop of an episode (one by one, or K episodes in a batch) is in
`rhea.eval.episodes`, what makes a run resumable (settings, rows, machines) in
`rhea.eval.checkpoint`, what it writes for people (markdown, plots) in `rhea.eval.report`.
Timings come from the session's turn observer (`ChatSession.add_observer`).

An interrupted run started again with the same settings continues from the last finished
turn of each episode (the policy list may differ: policies already run are reused, new ones run) (the saved session restores the policy's memory exactly), so long runs
on slow machines can be stopped and resumed at any time. A policy with no ``state/`` folder
whose every turn is in ``out/results.json`` (a committed run: the checkpoints are not
committed) is taken from there, so adding a policy to a finished run's folder runs only the
new policy.

>>> from rhea.testing import tiny_rhea
>>> result = run_suite(tiny_rhea(), "efficiency", ["vanilla"], n_turns=2, max_new_tokens=2,
...                    progress=False)
>>> len(result["policies"]["vanilla"]["turns"])
2
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from rhea.constants import BENCH_POLICIES
from rhea.errors import RheaConfigError
from rhea.eval import environment as machine
from rhea.eval.checkpoint import BenchError, check_config, environments_of
from rhea.eval.episodes import run_batched, run_episode
from rhea.eval.report import (RESULTS_FORMAT, describe_setting, json_default, progress_bar, read_results,  # noqa: F401
                              results_file, scores_only,
                              write_outputs)  # RESULTS_FORMAT, write_outputs: part of this module's API
from rhea.eval.suites import Suite, get_suite
from rhea.eval.suites.base import mean
from rhea.modeling.config import check_thresholds

RESULTS_FORMAT = "rhea-bench/1"
#: Policies that run offline on any RheaForCausalLM with no extra data or endpoint.
DEFAULT_POLICIES = BENCH_POLICIES
#: The per-turn cost fields every row carries (seconds, except the token counts).
COST_FIELDS = ("context_tokens", "text_tokens", "latent_slots", "new_tokens", "full_history_tokens",
               "compress_s", "score_s", "plan_s", "prefill_s", "decode_s", "latency_s")
#: The headline metric of each suite (first column of its summary table).
HEADLINE = {"instruction-retention": "iar", "state-tracking": "accuracy",
            "long-horizon": "recall_accuracy", "efficiency": None, "multi-session-qa": "f1",
            "mt-eval-recollection": "iar", "long-mt-bench-plus": "retrospective_judge_mean"}


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
    batch_episodes: int = 1,
) -> dict:
    """Run `suite` for every policy in `policies` on `model`; return (and with `out`, write) the results.

    suite: a registered suite name (with `data`, a path to its public data file, and
    `suite_kwargs`, its constructor options) or a built `Suite`.
    policy_kwargs: per-policy constructor options, e.g. ``{"rhea": {"tau_low": 0.3}}``.
    Greedy decoding, so a run is reproducible from its settings.
    batch_episodes: advance up to this many unfinished episodes of a policy together (each resumed
    where its checkpoint stopped), their turns answered in one left-padded batch
    (`rhea.eval.episodes`); 1 runs them one by one.
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
    if isinstance(batch_episodes, bool) or not isinstance(batch_episodes, int) or batch_episodes < 1:
        raise BenchError(f"batch_episodes={batch_episodes!r} must be an integer >= 1")
    policies = list(policies)
    if not policies:
        raise BenchError("policies is empty; name at least one (see rhea.policies.available_policies())")
    unknown = [p for p in policies if p not in available_policies()]
    if unknown:
        raise BenchError(f"unknown policies {unknown}; choose from {available_policies()}")
    if len(set(policies)) != len(policies):
        raise BenchError(f"policies {policies} name one policy twice")
    policy_kwargs = {k: dict(v) for k, v in (policy_kwargs or {}).items()}
    _check_thresholds(model, policies, policy_kwargs)  # before anything is written to `out`
    episodes = suite.generate(n_turns=n_turns, seed=seed)
    if batch_episodes > 1 and any(e.history or any(t.kind == "question" for t in e.turns) for e in episodes):
        raise BenchError(f"suite {suite.name!r} feeds each episode a history and asks its questions on their own, "
                         "one episode at a time; run it with batch_episodes=1 (drop --batch-episodes)")
    config = {"format": RESULTS_FORMAT, "suite": suite.name, "policies": policies,
              "n_turns": len(episodes[0].turns), "n_episodes": len(episodes), "seed": seed, "data": data,
              "suite_kwargs": {k: describe_setting(v) for k, v in (suite_kwargs or {}).items()}, "max_new_tokens": max_new_tokens,
              "policy_kwargs": policy_kwargs,
              "model": model_name or getattr(model.config, "base_model", None) or type(model).__name__,
              "adapters_trained": bool(getattr(model, "adapters_trained", False)),
              # the prefix-anchored attention's bias, when on (a resume under another is refused)
              **({"anchor_bias": float(model.config.anchor_bias)}
                 if float(getattr(getattr(model, "config", None), "anchor_bias", 0.0) or 0.0) > 0 else {}),
              # what the replies were decoded in: a resume in another dtype is refused (`check_config`)
              **({"dtype": machine.dtype_name(model.dtype)}
                 if str(getattr(model, "dtype", "")).startswith("torch.") else {}),
              # what the checkpointed replies answered: a resume after the suite changed is refused
              "episodes_sha256": hashlib.sha256(
                  json.dumps([e.to_dict() for e in episodes], sort_keys=True, default=json_default).encode()
              ).hexdigest()}
    out = Path(out) if out is not None else None
    if out is not None:
        config = check_config(out, config, resume)  # recorded per-policy options include earlier policies'

    total = len(policies) * sum(len(e.turns) for e in episodes)
    bar = progress_bar(total, progress)
    started = time.perf_counter()
    environment = machine.environment(getattr(model, "device", None), getattr(model, "dtype", None))
    results: dict[str, Any] = {"format": RESULTS_FORMAT, "config": config, "environment": environment,
                               "episodes": [e.to_dict() for e in episodes], "policies": {}}
    finished = _finished_in_results(out, config, episodes) if out is not None and resume else {}
    try:
        for policy in policies:
            if policy in finished and not (out / "state" / policy).exists():
                rows = finished[policy]["turns"]
                results["policies"][policy] = {"aggregate": suite.aggregate([scores_only(r) for r in rows]),
                                               "cost": _cost_summary(rows), "turns": rows,
                                               "environments": finished[policy].get("environments", [])}
                bar.update(len(rows))
                continue
            rows: list[dict] = []
            batched = run_batched(model, tokenizer, policy, episodes, out, bar, ChatSession, batch_episodes,
                                         max_new_tokens=max_new_tokens, kwargs=policy_kwargs.get(policy, {}),
                                         environment=environment)
            for number, episode in enumerate(episodes):
                state = out / "state" / policy / str(number) if out is not None else None
                if number in batched:
                    rows.extend(batched[number])
                    continue
                rows.extend(run_episode(model, tokenizer, policy, episode, state, bar, ChatSession,
                                         max_new_tokens=max_new_tokens, kwargs=policy_kwargs.get(policy, {}),
                                         environment=environment))
            results["policies"][policy] = {"aggregate": suite.aggregate([scores_only(r) for r in rows]),
                                           "cost": _cost_summary(rows), "turns": rows}
            if out is not None:  # where this policy's turns ran (a resumed run may span machines)
                results["policies"][policy]["environments"] = environments_of(
                    [out / "state" / policy / str(n) for n in range(len(episodes))])
                if policy != policies[-1]:  # a long run stopped later keeps every policy it finished
                    write_outputs(_timed(results, started), out)
    finally:
        bar.close()
    _timed(results, started)
    if out is not None:
        write_outputs(results, out)
    return results


def _finished_in_results(out: Path, config: dict, episodes: Sequence) -> dict[str, dict]:
    """``{policy: its entry}`` of ``out/results.json`` for the policies whose every turn of these
    episodes it holds, when it was written by a run of `config`'s settings (else nothing)."""
    path = results_file(out)
    if not path.is_file():
        return {}
    try:
        saved = read_results(path)
    except (json.JSONDecodeError, EOFError, OSError) as e:
        raise BenchError(f"{path} is not valid JSON ({e}); restore it from git or delete it to rerun "
                         "its policies") from None
    per_policy = ("policies", "policy_kwargs")
    settings = {k: v for k, v in saved.get("config", {}).items() if k not in per_policy}
    if settings != {k: v for k, v in config.items() if k not in per_policy}:
        return {}
    options_then = saved["config"].get("policy_kwargs") or {}
    options_now = config.get("policy_kwargs") or {}
    expected = [(e.episode_id, t.meta.get("index")) for e in episodes for t in e.turns]
    return {policy: entry for policy, entry in saved.get("policies", {}).items()
            if options_then.get(policy, {}) == options_now.get(policy, {})
            and [(r.get("episode_id"), r.get("turn_index")) for r in entry.get("turns", [])] == expected}


def _timed(results: dict, started: float) -> dict:
    """Set the run's wall time (this invocation only: a resumed run did less) and summed turn time (`turn_share`)."""
    results["wall_s"] = time.perf_counter() - started
    results["turn_seconds"] = sum(turn_share(r) for d in results["policies"].values() for r in d["turns"])
    return results


def turn_share(row: Mapping[str, Any]) -> float:
    """A row's share of the time its turn took: its latency, with the parts a batch of K rows shares (prefill,
    decode and observe, each timed once for the batch) counted 1/K, so that summing rows gives the time spent.

    >>> turn_share({"latency_s": 10.0, "prefill_s": 2.0, "decode_s": 5.0, "observe_s": 1.0, "batch_rows": 4.0})
    4.0
    >>> turn_share({"latency_s": 10.0, "prefill_s": 2.0, "decode_s": 5.0})
    10.0
    """
    latency = float(row.get("latency_s") or 0.0)
    k = float(row.get("batch_rows") or 1.0)
    if k <= 1.0:
        return latency
    shared = sum(float(row.get(f) or 0.0) for f in ("prefill_s", "decode_s", "observe_s"))
    return latency - shared + shared / k


def _check_thresholds(model, policies: Sequence[str], policy_kwargs: Mapping[str, Mapping[str, Any]]) -> None:
    """tau_low <= tau_high for every Rhea-family policy (a missing one is the model's), so a bad
    pair fails before `out` gets a config.json that would block the corrected run."""
    from rhea.policies import policy_class

    cfg = getattr(model, "config", None)
    for policy in policies:
        kw = policy_kwargs.get(policy, {})
        if not {"tau_low", "tau_high"} <= set(policy_class(policy).thresholds) or not {"tau_low", "tau_high"} & set(kw):
            continue
        low, high = kw.get("tau_low", getattr(cfg, "tau_low", None)), kw.get("tau_high", getattr(cfg, "tau_high", None))
        if low is not None and high is not None:
            try:
                check_thresholds(float(low), float(high))
            except RheaConfigError as e:
                raise BenchError(f"policy {policy!r}: {e}") from None


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
