"""What lets a benchmark run stop and resume: its settings on disk, the rows written so far and
the machines (environments) that ran them.

``out/config.json`` holds the run's settings and the digest of the episodes it answers; a resumed
run must match them (only the policy list may change). ``rows.jsonl`` holds one line per finished
turn (a line cut by an interruption is dropped, and that turn is redone); ``environments.jsonl``
lists every machine that ran turns of that state, once per change (`rhea.eval.environment`:
versions, device, threads, the model's dtype).
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Sequence

from rhea.errors import RheaError
from rhea.storage import atomic_write_text


class BenchError(RheaError, ValueError):
    """A benchmark run that cannot start or resume as asked."""


def check_config(out: Path, config: dict, resume: bool) -> dict:
    """Check that `out` can take a run of `config` (resuming it when `resume`); write and return the
    config to record.

    Only the policy list may change between invocations. Per-policy options (``policy_kwargs``)
    may differ for a policy that has no turns in `out` yet (a new policy, e.g. an ablation with its
    own options); the recorded ``policy_kwargs`` keep every policy's options, earlier ones included.
    """
    path = out / "config.json"
    saved = _read_config(path) if path.is_file() and resume else None
    if saved is not None:
        on_disk = dict(saved)
        if "episodes_sha256" not in saved:  # a run begun before the digest was recorded
            saved["episodes_sha256"] = config["episodes_sha256"]
        if saved["episodes_sha256"] != config["episodes_sha256"]:
            raise BenchError(
                f"{out} holds a run of other conversations: the suite now generates different turns from the "
                "same settings (its code or data changed since), so the checkpointed replies answer other "
                "questions; pass another --out, or --no-resume to start this run over")
        _check_dtype(out, saved, config)
        judge_now = (config.get("suite_kwargs") or {}).get("judge")
        judge_then = (saved.get("suite_kwargs") or {}).get("judge")
        if isinstance(judge_now, dict) and judge_then != judge_now:
            from rhea.eval.judge import same_judge

            if same_judge(judge_then, judge_now):  # a description without the local judge's dtype
                saved["suite_kwargs"] = {**saved["suite_kwargs"], "judge": judge_now}
        # the policy list may change: each policy's episodes are checkpointed on their own
        per_policy = ("policies", "policy_kwargs")
        diff = sorted(k for k in set(saved) | set(config) if k not in per_policy and saved.get(k) != config.get(k))
        if diff:
            raise BenchError(
                f"{out} holds a run with other settings ({', '.join(diff)} differ); pass the same settings "
                "to resume it, another --out for a new run, or --no-resume to start this one over")
        before, now = saved.get("policy_kwargs") or {}, config.get("policy_kwargs") or {}
        for policy in config["policies"]:
            if before.get(policy, {}) != now.get(policy, {}) and has_turns(out, policy):
                raise BenchError(
                    f"{out} holds turns of {policy!r} run with options {before.get(policy, {})}, not "
                    f"{now.get(policy, {})}; pass the same options, another --out, or --no-resume")
        merged = {p: kw for p, kw in before.items() if p not in config["policies"]}
        merged.update({p: kw for p, kw in now.items() if kw})
        config = {**config, "policy_kwargs": dict(sorted(merged.items()))}
        if on_disk != config:
            atomic_write_text(path, json.dumps(config, indent=1))
        return config
    if path.is_file():  # not resuming (or nothing readable to resume): start over
        shutil.rmtree(out / "state", ignore_errors=True)
    atomic_write_text(path, json.dumps(config, indent=1))
    return config


def _read_config(path: Path) -> dict | None:
    """The recorded settings of a run, or None (with a warning) when ``config.json`` cannot be read: a
    kill while an earlier version wrote it in place left it empty or cut, and the turns checkpointed
    beside it cannot be matched to settings any more, so the run starts over rather than stopping."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(saved, dict):
            return saved
        problem = f"it holds a JSON {type(saved).__name__}, not the settings object"
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        problem = f"{type(e).__name__}: {e}" if path.stat().st_size else "it is empty"
    warnings.warn(f"{path} cannot be read ({problem}; cut by a kill while it was written?): its checkpointed "
                  "turns cannot be matched to settings, so this run starts over", RuntimeWarning, stacklevel=3)
    return None


def environment_dtypes(entry: dict) -> list[str]:
    """The dtypes a policy's entry of ``results.json`` recorded, one per recorded machine, in order (empty when
    none was recorded).

    >>> environment_dtypes({"environments": [{"dtype": "float32"}, {"threads": 2}, {"dtype": "bfloat16"}]})
    ['float32', 'bfloat16']
    """
    return [e["dtype"] for e in (entry.get("environments") or []) if isinstance(e, dict) and e.get("dtype")]


def recorded_dtypes(out: Path) -> dict[str, str]:
    """``{policy/episode: dtype}``: what each checkpointed episode of `out` (and each policy finished in
    its ``results.json``) last ran in, as its recorded environments say; runs recorded without a dtype
    contribute nothing."""
    found: dict[str, str] = {}
    from rhea.eval.report import read_results, results_file

    results = results_file(out)
    if results.is_file():
        try:
            policies = read_results(results).get("policies", {})
        except (json.JSONDecodeError, OSError, EOFError):
            policies = {}
        for policy, data in policies.items():
            dtypes = environment_dtypes(data)
            if dtypes:
                found[policy] = dtypes[-1]
    for path in sorted((out / "state").glob(f"*/*/{ENVIRONMENTS_FILE}")):
        dtypes = [e["dtype"] for e in read_rows(path) if "dtype" in e]
        if dtypes:
            found.pop(path.parent.parent.name, None)  # the checkpoints are newer than results.json's rows
            found[f"{path.parent.parent.name}/{path.parent.name}"] = dtypes[-1]
    return found


def _check_dtype(out: Path, saved: dict, config: dict) -> None:
    """Refuse to resume or grow `out` in another dtype than its turns ran in: a reply decoded in
    bfloat16 differs from one in float32, so a run that changes dtype part-way, or policies run in
    different dtypes, would compare numerics as well as policies. A config recorded before the dtype
    was (no ``dtype``) takes it from the recorded environments, and then records it."""
    dtype = config.get("dtype")
    if dtype is None:
        return
    if "dtype" in saved:
        other = {"the run": saved["dtype"]} if saved["dtype"] != dtype else {}
    else:
        other = {k: v for k, v in recorded_dtypes(out).items() if v != dtype}
    if other:
        where = ", ".join(f"{k}: {v}" for k, v in sorted(other.items()))
        then = sorted(set(other.values()))[0]
        raise BenchError(f"{out} holds turns that ran in {where}, and this invocation loads the model in {dtype}; "
                         f"pass --dtype {then} to resume it as it began (dtype={then!r} from Python), or another "
                         "--out for a run in this dtype")
    saved["dtype"] = dtype


def has_turns(out: Path, policy: str) -> bool:
    """Whether `out` holds turns of `policy`: checkpoints under ``state/``, or rows in ``results.json`` (or ``.gz``)."""
    if (out / "state" / policy).is_dir():
        return True
    from rhea.eval.report import read_results, results_file

    results = results_file(out)
    if not results.is_file():
        return False
    try:
        return bool(read_results(results).get("policies", {}).get(policy, {}).get("turns"))
    except (json.JSONDecodeError, OSError, EOFError):
        return True  # unreadable: assume it does (the safe answer; reading it later names the problem)


def load_resumable(path: Path, current: dict, keys: Sequence[str], *, settings: str,
                   records: str) -> dict | None:
    """The JSON results at `path` of an earlier run to resume, or None when there is none.

    For benchmarks that write one results file holding their settings under `settings` and
    their finished records (a list) under `records`: the saved settings must equal `current`
    (the parsed arguments) on every name in `keys`, else a `BenchError` names what differs and
    how to go on.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(saved[settings], dict) or not isinstance(saved[records], list):
            raise TypeError(f"'{settings}' must be an object and '{records}' a list")
    except (ValueError, KeyError, TypeError) as e:
        raise BenchError(f"{path} exists but is not a results file of this benchmark ({e}); "
                         "pass another --out, or --no-resume to overwrite it") from e
    changed = [k for k in keys if saved[settings].get(k) != current.get(k)]
    if changed:
        raise BenchError(f"{path} was written with other settings ("
                         + ", ".join(f"--{k.replace('_', '-')} {saved[settings].get(k)!r}" for k in changed)
                         + "); rerun with those, pass another --out, or --no-resume to start over")
    return saved


def read_rows(path: Path, *, repair: bool = False) -> list[dict]:
    """The JSON lines of `path` up to the first one an interruption cut (that turn is redone); with
    `repair`, a file holding such a line is rewritten (atomically) with the whole lines before it, so
    lines appended later are read again."""
    if not path.is_file():
        return []
    rows = []
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    cut = False
    for line in lines:
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut by an interruption: redo that turn
                cut = True
                break
            if not isinstance(row, dict):
                cut = True
                break
            rows.append(row)
    if cut and repair:
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return rows


ENVIRONMENTS_FILE = "environments.jsonl"


def record_environment(state: Path, environment: dict) -> None:
    """Append `environment` to the state's list of machines that ran its turns (once per change)."""
    path = state / ENVIRONMENTS_FILE
    seen = read_rows(path, repair=True)
    if not seen or seen[-1] != environment:
        with path.open("a") as f:
            f.write(json.dumps(environment, sort_keys=True) + "\n")


def environments_of(states: Sequence[Path]) -> list[dict]:
    """The distinct environments recorded in `states`, in the order they first ran (states
    written before this was recorded contribute none)."""
    found: list[dict] = []
    for state in states:
        for env in read_rows(state / ENVIRONMENTS_FILE):
            if env not in found:
                found.append(env)
    return found
