"""Run K episodes of one policy together: turn t of every episode is answered in one batch.

`run_suite(..., batch_episodes=K)` hands the episodes that have not started yet to
`run_episodes_batched` in groups of K; each gets its own `ChatSession` (its own policy state,
latents and plan), and at each turn index the K sessions' turns go through
`rhea.session.batch.send_batch`. Rows, checkpoints and scores are written exactly as the
one-by-one path writes them (``rows.jsonl``, ``session/``, ``done`` per episode), plus
``batch_rows`` in each row; an episode interrupted mid-way resumes one by one.

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


def is_fresh(state: Path | None) -> bool:
    """True when an episode's checkpoint holds nothing yet (so it can start in a batch)."""
    return state is None or not ((state / "done").is_file() or (state / "rows.jsonl").is_file())


def run_episodes_batched(model, tokenizer, policy: str, episodes: Sequence, states: Sequence[Path | None], bar,
                         session_cls, *, max_new_tokens: int, kwargs: dict,
                         environment: dict | None = None) -> list[list[dict]]:
    """Rows of every episode in `episodes`, all advanced together one turn index at a time."""
    from rhea.eval.checkpoint import record_environment
    from rhea.eval.report import json_default
    from rhea.eval.runner import _cost_row, _decision_trace
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
        if state is not None:
            shutil.rmtree(state, ignore_errors=True)
            state.mkdir(parents=True)
            if environment is not None:
                record_environment(state, environment)
    rows: list[list[dict]] = [[] for _ in episodes]
    histories: list[list[tuple[str, str]]] = [[] for _ in episodes]
    for index in range(len(episodes[0].turns)):
        turns = [e.turns[index] for e in episodes]
        replies = send_batch(sessions, [t.user for t in turns])
        for k, (episode, turn, reply) in enumerate(zip(episodes, turns, replies)):
            row: dict[str, Any] = {"policy": policy, "user": turn.user}
            if isinstance(reply, RheaError):  # a policy's recorded failure: scored as a miss, as one by one
                row["error"], reply = f"{type(reply).__name__}: {reply}", ""
            else:
                trace = traces[k][-1]
                row.update(_cost_row(trace.record))
                row.update(_decision_trace(trace.plan))
                row["batch_rows"] = trace.record.timings.get("batch_rows", 1.0)
            row["reply"] = reply
            scores = episode.score_turn(turn, reply, history=histories[k])
            row = {**scores, **row, "policy": policy}
            rows[k].append(row)
            if "error" not in row:
                histories[k].append((turn.user, reply))
            state = states[k]
            if state is not None:
                if "error" not in row:
                    sessions[k].save(state / "session")
                with open(state / "rows.jsonl", "a") as f:
                    f.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
            bar.update(1)
    for state in states:
        if state is not None:
            (state / "done").write_text("")
    return rows
