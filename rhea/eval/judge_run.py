"""`rhea judge`: rate a finished run's replies afterwards, with any judge (long-horizon, long-mt-bench-plus,
multi-session-qa).

`rhea bench --suite long-horizon` can rate each question reply as it goes (``--judge-local`` /
``--judge-url``), but the judge then costs as much time as the answering model, on the same
machine, in the same sitting. ``--judge-local none`` writes the replies unrated; `judge_run`
rates them later: every question reply of every policy in ``out/results.json`` gets the
FastChat prompt the suite would have built (``single-v1`` or ``single-v1-multi-turn``, with
the reference for math / reasoning / coding; `LongHorizonSuite.judge_request`), the second
turn of a question judged with the first answer the same policy gave. A multi-session-qa run's
answers get LoCoMo's correctness judge instead (`MultiSessionQASuite.judge_request`: question, gold
answer and reply, CORRECT or WRONG), its share judged correct the run's ``judge_correct``. Up to the
judge's ``batch_size`` prompts decode as one batch.

Resumable: each rating is appended to ``out/judge/ratings.jsonl`` (with the judge's text) as
it is made, under the judge recorded in ``out/judge/config.json``; a second call with the same
judge continues, another judge is refused (``rejudge=True`` starts over). Once every reply is
rated, ``results.json``, ``summary.md``, the plots and the run's own checkpoint rows are rewritten as a
judged run would have written them, and the judge's settings go into ``config.json``'s ``suite_kwargs`` exactly as
``rhea bench`` records an inline judge, so the folder then resumes or grows under ``rhea bench``
with that judge like any judged run.

>>> import json, tempfile
>>> from pathlib import Path
>>> from rhea.backends.llm import ScriptedGenerator
>>> from rhea.eval.judge import Judge
>>> from rhea.eval.runner import run_suite
>>> from rhea.testing import tiny_rhea
>>> out = Path(tempfile.mkdtemp()) / "lh"
>>> _ = run_suite(tiny_rhea(), "long-horizon", ["vanilla"], n_turns=5, n_episodes=1, max_new_tokens=2,
...               suite_kwargs={"n_facts": 1}, out=out, progress=False)
>>> judged = judge_run(out, Judge(ScriptedGenerator(["Fine. [[7]]"] * 3)), progress=False)
>>> judged["policies"]["vanilla"]["aggregate"]["judge_mean"]
7.0
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from rhea.eval.checkpoint import BenchError, read_rows
from rhea.eval.environment import environment
from rhea.eval.judge import same_judge
from rhea.eval.report import RESULTS_FORMAT, describe_setting, progress_bar, read_results, results_file, scores_only, write_outputs

JUDGE_DIR = "judge"
RATINGS_FILE = "ratings.jsonl"
SUITE = "long-horizon"
#: The suites whose runs can be judged afterwards (each says which turn kinds it rates: ``judged_kinds``).
SUITES = ("long-horizon", "long-mt-bench-plus", "multi-session-qa")


def read_run(out: str | Path) -> dict:
    """``out/results.json`` (or ``results.json.gz``) of a finished `rhea bench` run of a judged suite (`SUITES`),
    checked (a `BenchError` says what is wrong and how to go on); nothing is loaded or written."""

    if Path(out).is_file():
        raise BenchError(f"{out} is a file; pass the --out folder of a finished `rhea bench` run of "
                         f"{', '.join(SUITES)} (the folder holding results.json), not a file in it")
    path = results_file(out)
    if not path.is_file():
        raise BenchError(f"{path} does not exist: pass the --out folder of a finished `rhea bench` run of "
                         f"{', '.join(SUITES)} (the folder holding results.json or results.json.gz)")
    try:
        results = read_results(path)
    except (ValueError, EOFError, OSError, RecursionError) as e:  # ValueError: not UTF-8, not JSON, a huge integer
        reason = "it nests too deeply" if isinstance(e, RecursionError) else e
        raise BenchError(f"{path} is not valid JSON ({reason}); restore it from git or rerun the benchmark") from None
    if not isinstance(results, dict) or results.get("format") != RESULTS_FORMAT:
        raise BenchError(f"{path} is not a `rhea bench` results file (format {RESULTS_FORMAT!r} expected)")
    suite = results.get("config", {}).get("suite")
    if suite not in SUITES:
        raise BenchError(f"{path} holds a {suite!r} run; only {', '.join(map(repr, SUITES))} replies are judged (the other "
                         "suites score by rule: benchmarks/rescore.py re-scores them)")
    if not results.get("policies"):
        raise BenchError(f"{path} holds no policy's turns yet; finish the `rhea bench` run first")
    expected = sum(len(e["turns"]) for e in results.get("episodes", []))
    for policy, data in results["policies"].items():
        if len(data.get("turns", [])) != expected:
            raise BenchError(f"{path}: policy {policy!r} has {len(data.get('turns', []))} of {expected} turns; "
                             "finish the `rhea bench` run (run the same command again) before judging it")
    return results


def _key(policy: str, row: dict) -> tuple[str, str, int]:
    return policy, row["episode_id"], row["turn_index"]


def pending(results: dict) -> list[tuple[tuple[str, str, int], "Any"]]:
    """``[(key, JudgeRequest)]`` for every question reply of `results`, key = (policy, episode id,
    turn index), ordered by policy, then turn index, then episode (a turn index's replies batch
    together: prompts of alike length)."""
    from rhea.eval.suites import get_suite
    from rhea.eval.suites.base import Episode

    suite = _suite_of(results)
    kinds = getattr(suite, "judged_kinds", ("query",))
    episodes = {e["episode_id"]: Episode.from_dict(e, suite) for e in results["episodes"]}
    asked = []
    for policy, data in results["policies"].items():
        history: dict[str, list[tuple[str, str]]] = {}
        for row in sorted(data["turns"], key=lambda r: (r["episode_id"], r["turn_index"])):
            turn = episodes[row["episode_id"]].turns[row["turn_index"]]
            seen = history.setdefault(row["episode_id"], [])
            reply = row.get("reply", "")
            if turn.kind in kinds:
                asked.append((_key(policy, row), suite.judge_request(turn, reply, list(seen))))
            if "error" not in row and turn.kind != "question":  # as the runner builds history: a failed turn
                # and a question asked on its own are not in it
                seen.append((turn.user, reply))
    order = {e["episode_id"]: n for n, e in enumerate(results["episodes"])}
    policies = list(results["policies"])
    return sorted(asked, key=lambda kr: (policies.index(kr[0][0]), kr[0][2], order[kr[0][1]]))


def rate_into(path: Path, todo: list, judge, done: dict, on_batch=None) -> dict:
    """Rate each ``(key, request)`` of `todo` with `judge`, `judge.batch_size` at a time, appending one
    JSON line per rating to `path` (flushed after each batch, so a stopped run resumes from the file)
    and putting it into `done` under its key; `on_batch(n, seconds_each)` after each batch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for start in range(0, len(todo), judge.batch_size):
            chunk = todo[start:start + judge.batch_size]
            began = time.perf_counter()
            verdicts = judge.judge_many([req for _, req in chunk])
            seconds = (time.perf_counter() - began) / len(chunk)
            for (key, _), verdict in zip(chunk, verdicts):
                record = {"policy": key[0], "episode_id": key[1], "turn_index": key[2],
                          "rating": verdict.rating, "prompt": verdict.prompt_name, "source": verdict.source,
                          "error": verdict.error, "judgment": verdict.raw, "seconds": round(seconds, 3)}
                if verdict.distribution is not None:  # a completed or direct verdict: its expected rating too
                    record["expected"] = verdict.expected
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                done[key] = record
            f.flush()
            if on_batch is not None:
                on_batch(len(chunk), seconds)
    return done


def judge_run(out: str | Path, judge, *, rejudge: bool = False, progress: bool = True,
              log=None) -> dict:
    """Rate every unrated question reply of the run in `out` with `judge` (a
    `rhea.eval.judge.Judge`) and rewrite the run's results as judged; returns the results.

    A run already rated by this judge is left as it is; one rated by another judge (inline or by
    an earlier call) raises `BenchError` unless `rejudge`, which replaces every rating.
    """
    from rhea.eval.suites import get_suite

    out = Path(out)
    results = read_run(out)
    described = describe_setting(judge)
    before = (results["config"].get("suite_kwargs") or {}).get("judge")
    if before is not None and not rejudge:
        if same_judge(before, described):
            if log:
                log(f"{out} is already rated by this judge ({described['judge']}); nothing to do")
            return results
        raise BenchError(f"{out} is rated by another judge ({before}); pass the same judge settings, or "
                         f"--rejudge to replace its ratings with {described}'s")
    folder = out / JUDGE_DIR
    settings = folder / "config.json"
    if rejudge:
        shutil.rmtree(folder, ignore_errors=True)
    if settings.is_file():
        saved = json.loads(settings.read_text())
        if not same_judge(saved.get("judge"), described):
            raise BenchError(f"{folder} holds ratings by another judge ({saved.get('judge')}); pass the same "
                             f"judge settings to resume them, or --rejudge to start over with {described}")
    folder.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"judge": described, "batch_size": judge.batch_size}, indent=1))
    ratings_path = folder / RATINGS_FILE
    done = {(r["policy"], r["episode_id"], r["turn_index"]): r for r in read_rows(ratings_path)}
    todo = [(k, req) for k, req in pending(results) if k not in done]
    started = time.perf_counter()
    bar = progress_bar(len(done) + len(todo), progress, desc="rhea judge", unit="rating", initial=len(done))
    try:
        rate_into(ratings_path, todo, judge, done, on_batch=lambda n, _: bar.update(n))
    finally:
        bar.close()
    suite = _suite_of(results)
    for policy, data in results["policies"].items():
        for row in data["turns"]:
            record = done.get(_key(policy, row))
            if record is None:
                continue
            row.update({"judge": "ok" if record["rating"] is not None else "error",
                        "judge_rating": record["rating"], "judge_prompt": record["prompt"],
                        "judge_error": record["error"], "judge_source": record["source"]})
        data["aggregate"] = suite.aggregate([scores_only(r) for r in data["turns"]])
        _rate_checkpoints(out / "state" / policy, results["episodes"], data["turns"])
    results["config"]["suite_kwargs"] = {**(results["config"].get("suite_kwargs") or {}), "judge": described}
    results["judged"] = {"judge": described, "batch_size": judge.batch_size, "ratings": len(done),
                         "seconds": round(time.perf_counter() - started, 1),
                         "environment": environment(getattr(getattr(judge.generator, "model", None), "device", None))}
    (out / "config.json").write_text(json.dumps(results["config"], indent=1))
    write_outputs(results, out)
    return results


def _rate_checkpoints(state: Path, episodes: list[dict], rows: list[dict]) -> None:
    """Put the ratings into the run's own checkpoints too (``state/<policy>/<n>/rows.jsonl``, when the
    run's machine still has them): `rhea bench` resuming the folder reads those rows, not results.json."""
    for number, episode in enumerate(episodes):
        path = state / str(number) / "rows.jsonl"
        saved = read_rows(path)
        mine = [r for r in rows if r["episode_id"] == episode["episode_id"]]
        if not saved or [(r.get("episode_id"), r.get("turn_index")) for r in saved] != \
                [(r["episode_id"], r["turn_index"]) for r in mine]:
            continue
        temporary = path.with_suffix(".jsonl.tmp")
        temporary.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mine), encoding="utf-8")
        temporary.replace(path)


def _suite_of(results: dict):
    """The suite of a run's results, built only to score and aggregate its turns (its own data is not needed)."""
    from rhea.eval.suites import get_suite

    name = results.get("config", {}).get("suite", SUITE)
    return get_suite(name, n_episodes=1, **({"conversations_per_episode": 1} if name == "long-mt-bench-plus" else {}))
