"""One policy through a suite's episodes, turn by turn: one episode at a time, or K together.

`run_episode` sends an episode's turns through one `ChatSession`; `run_episodes_batched` advances
K episodes together, turn t of every episode answered in one batch
(`rhea.session.batch.send_batch`), each with its own session (its own policy state, latents and
plan). Both finish a turn the same way (`_finish_turn`): the row (the suite's scores, what the
turn cost, what the policy decided), the saved session and the line in ``rows.jsonl``, so an
episode interrupted mid-way resumes one by one whichever path started it. Batched rows also
carry ``batch_rows``. `rhea.eval.runner.run_suite` chooses the path (``batch_episodes``).

>>> from rhea.testing import tiny_rhea
>>> from rhea.eval.runner import run_suite
>>> result = run_suite(tiny_rhea(), "efficiency", ["vanilla"], n_turns=2, n_episodes=3, max_new_tokens=2,
...                    progress=False, batch_episodes=3)
>>> sorted({r["batch_rows"] for r in result["policies"]["vanilla"]["turns"]})
[3.0]
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Sequence

from rhea.errors import RheaError
from rhea.eval.checkpoint import read_rows, record_environment
from rhea.eval.report import json_default


def cost_row(record) -> dict:
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


def decision_trace(plan) -> dict:
    """The plan's decisions and token ledger, as a row records them."""
    if plan is None:
        return {}
    view = plan.to_dict()
    return {"decisions": view["decisions"], "ledger": view["ledger"]}


def _start_state(state: Path | None, environment: dict | None) -> None:
    """An empty checkpoint folder for an episode that starts over."""
    if state is not None:
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True)
        if environment is not None:
            record_environment(state, environment)


def _finish_turn(policy: str, episode, turn, reply: str, error: str | None, trace, history: list, session,
                 state: Path | None, bar, **extra: Any) -> dict:
    """The row of one answered turn (scored; its cost and decisions from `trace`; `error` scored as a miss),
    checkpointed in `state`; `history` grows by the turn unless it failed."""
    row: dict[str, Any] = {"policy": policy, "user": turn.user}
    if error is not None:
        row["error"], reply = error, ""
    else:
        row.update(cost_row(trace.record))
        row.update(decision_trace(trace.plan))
        row.update(extra)
    row["reply"] = reply
    scores = episode.score_turn(turn, reply, history=history)
    row = {**scores, **row, "policy": policy}
    if error is None:
        history.append((turn.user, reply))
    if state is not None:
        if error is None:
            session.save(state / "session")
        with open(state / "rows.jsonl", "a") as f:
            f.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
    bar.update(1)
    return row


def run_episode(model, tokenizer, policy: str, episode, state: Path | None, bar, session_cls, *,
                max_new_tokens: int, kwargs: dict, environment: dict | None = None) -> list[dict]:
    """Rows of `episode` run one turn at a time, resumed from `state` where it stopped."""
    rows = read_rows(state / "rows.jsonl") if state is not None else []
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
        _start_state(state, environment)
    elif state is not None and environment is not None:
        record_environment(state, environment)
    bar.update(len(rows))
    history = [(r["user"], r["reply"]) for r in rows if "error" not in r]
    traces = []  # the session reports every finished turn here: its record (timings) and plan
    session.add_observer(traces.append)
    for turn in episode.turns[len(rows):]:
        try:
            reply, error = session.send(turn.user), None
        except RheaError as e:  # a policy's recorded failure (e.g. a context over the window): score it as a miss
            reply, error = "", f"{type(e).__name__}: {e}"
        rows.append(_finish_turn(policy, episode, turn, reply, error, traces[-1] if error is None else None, history,
                                 session, state, bar))
    if state is not None:
        (state / "done").write_text("")
    return rows


def is_fresh(state: Path | None) -> bool:
    """True when an episode's checkpoint holds nothing yet (so it can start in a batch)."""
    return state is None or not ((state / "done").is_file() or (state / "rows.jsonl").is_file())


def run_episodes_batched(model, tokenizer, policy: str, episodes: Sequence, states: Sequence[Path | None], bar,
                         session_cls, *, max_new_tokens: int, kwargs: dict,
                         environment: dict | None = None) -> list[list[dict]]:
    """Rows of every episode in `episodes`, all advanced together one turn index at a time."""
    from rhea.session.batch import send_batch

    if len({len(e.turns) for e in episodes}) > 1:
        raise ValueError("episodes run in one batch must have the same number of turns")
    sessions, traces = [], []
    for state in states:
        session = session_cls(model, tokenizer, policy, max_new_tokens=max_new_tokens, policy_kwargs=kwargs)
        seen: list = []
        session.add_observer(seen.append)
        sessions.append(session)
        traces.append(seen)
        _start_state(state, environment)
    rows: list[list[dict]] = [[] for _ in episodes]
    histories: list[list[tuple[str, str]]] = [[] for _ in episodes]
    for index in range(len(episodes[0].turns)):
        turns = [e.turns[index] for e in episodes]
        replies = send_batch(sessions, [t.user for t in turns])
        for k, (episode, turn, reply) in enumerate(zip(episodes, turns, replies)):
            if isinstance(reply, RheaError):  # a policy's recorded failure: scored as a miss, as one by one
                rows[k].append(_finish_turn(policy, episode, turn, "", f"{type(reply).__name__}: {reply}", None,
                                            histories[k], sessions[k], states[k], bar))
            else:
                trace = traces[k][-1]
                rows[k].append(_finish_turn(policy, episode, turn, reply, None, trace, histories[k], sessions[k],
                                            states[k], bar, batch_rows=trace.record.timings.get("batch_rows", 1.0)))
    for state in states:
        if state is not None:
            (state / "done").write_text("")
    return rows


def run_fresh_batched(model, tokenizer, policy, episodes, out, bar, session_cls, k: int, **kwargs) -> dict[int, list]:
    """``{episode number: rows}`` for the episodes not started yet, run `k` at a time (none if k is 1)."""
    if k <= 1:
        return {}
    states = {n: (out / "state" / policy / str(n) if out is not None else None) for n in range(len(episodes))}
    fresh = [n for n in range(len(episodes)) if is_fresh(states[n])]
    done: dict[int, list] = {}
    for start in range(0, len(fresh), k):
        group = fresh[start:start + k]
        rows = run_episodes_batched(model, tokenizer, policy, [episodes[n] for n in group], [states[n] for n in group],
                                    bar, session_cls, **kwargs)
        done.update(zip(group, rows))
    return done
