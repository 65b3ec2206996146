"""One policy through a suite's episodes, turn by turn: one episode at a time, or K together.

`run_episode` sends an episode's turns through one `ChatSession`; `run_episodes_batched` advances
K episodes together, turn t of every episode answered in one batch
(`rhea.session.batch.send_batch`), each with its own session (its own policy state, latents and
plan). Both finish a turn the same way (`_finish_turn`): the row (the suite's scores, what the
turn cost, what the policy decided), the saved session and the line in ``rows.jsonl``, and both
resume an interrupted episode from that checkpoint (`_resume`), so either path continues what the
other started; a batched resume keeps batching. Batched rows also carry ``batch_rows``. `rhea.eval.runner.run_suite` chooses the path (``batch_episodes``).

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
import warnings
from pathlib import Path
from typing import Any, Sequence

from rhea.errors import RheaError
from rhea.storage import readable_directory
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
        # bytes the conversation held after the turn: history keys/values + stored latents
        "bytes_held": getattr(record, "bytes_held", None),
        "compress_s": float(t.get("compress_s", 0.0)),
        "score_s": max(plan_s - float(t.get("plan_compress_s", 0.0)), 0.0) if compresses else 0.0,
        "plan_s": plan_s, "render_s": float(t.get("render_s", 0.0)),
        "prefill_s": float(t.get("prefill_s", 0.0)), "decode_s": float(t.get("decode_s", 0.0)),
        "observe_s": float(t.get("observe_s", 0.0)), "tiers": dict(record.tiers),
        # of context_tokens, how many took their keys/values from the session's history cache
        "prefix_reused_tokens": float(t.get("prefix_reused_tokens", 0.0)),
    }
    row["latency_s"] = plan_s + row["render_s"] + row["prefill_s"] + row["decode_s"] + row["observe_s"]
    return row


def decision_trace(plan) -> dict:
    """The plan's decisions and token ledger, as a row records them."""
    if plan is None:
        return {}
    view = plan.to_dict()
    return {"decisions": view["decisions"], "ledger": view["ledger"]}


def evidence_row(turn, plan, placed: dict[int, int] | None = None) -> dict:
    """For a turn whose meta names the turns that hold its answer, ``evidence`` (indices into the episode's
    fed history) or ``evidence_turns`` (indices of earlier scripted turns of the episode, placed in the
    conversation by `placed`; one that failed is not there): the share of them in the plan's context
    (``evidence_in_context``: shown raw, as latents, or recalled) and shown as text (``evidence_raw``);
    nothing for other turns."""
    history, scripted = list(turn.meta.get("evidence") or ()), list(turn.meta.get("evidence_turns") or ())
    if not (history or scripted) or plan is None:
        return {}
    where = history + [(placed or {}).get(i) for i in scripted]
    by_turn = {d.turn: d for d in plan.decisions.turns}
    shown = [by_turn[i] for i in where if i is not None and i in by_turn]
    return {"evidence_in_context": sum(d.tier != "drop" or bool(d.recalled) for d in shown) / len(where),
            "evidence_raw": sum(d.tier == "raw" or bool(d.recalled) for d in shown) / len(where)}


def feed_history(session, episode) -> float:
    """Give a fresh `session` the episode's `history` (turns with their replies, nothing generated): its
    policy catches up on them turn by turn, as on a conversation sent as a message list. Returns the seconds."""
    import time

    from rhea.context import Conversation

    turns = episode.history_turns()
    if not turns:
        return 0.0
    if len(session.conversation):
        raise RheaError(f"episode {episode.episode_id}: its history can only be fed to a new session, "
                        f"this one holds {len(session.conversation)} turns")
    started = time.perf_counter()
    conversation = Conversation(turns)
    session.policy.catch_up(conversation)
    session.conversation = conversation
    return time.perf_counter() - started


def _placed(episode, rows) -> dict[int, int]:
    """``{scripted turn index: its index in the conversation}`` for the turns of `rows` that were added to it
    (after the episode's fed history)."""
    placed, at = {}, len(episode.history)
    for row in rows:
        if "error" not in row and row.get("kind") != "question":
            placed[row.get("turn_index")] = at
            at += 1
    return placed


def _kept(rows) -> int:
    """How many of `rows` added a turn to the conversation (answered, and not an independent question)."""
    return sum(1 for r in rows if "error" not in r and r.get("kind") != "question")


def _start_state(state: Path | None, environment: dict | None) -> None:
    """An empty checkpoint folder for an episode that starts over."""
    if state is not None:
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(parents=True)
        if environment is not None:
            record_environment(state, environment)


def _finish_turn(policy: str, episode, turn, reply: str, error: str | None, trace, history: list, session,
                 state: Path | None, bar, scores: dict | None = None, placed: dict[int, int] | None = None,
                 **extra: Any) -> dict:
    """The row of one answered turn (scored, unless `scores` holds its scores already; its cost and
    decisions from `trace`; `error` scored as a miss), checkpointed in `state`; `history` grows by the
    turn unless it failed."""
    row: dict[str, Any] = {"policy": policy, "user": turn.user}
    if error is not None:
        row["error"], reply = error, ""
    else:
        row.update(cost_row(trace.record))
        row.update(decision_trace(trace.plan))
        row.update(evidence_row(turn, trace.plan, placed))
        row.update(extra)
    row["reply"] = reply
    if scores is None:
        scores = episode.score_turn(turn, reply, history=history)
    row = {**scores, **row, "policy": policy}
    if error is None and turn.kind != "question":  # an independent question is not part of the history
        history.append((turn.user, reply))
    if state is not None:
        if error is None:
            session.save(state / "session")
        with open(state / "rows.jsonl", "a") as f:
            f.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
    bar.update(1)
    return row


def _resume(model, tokenizer, policy: str, episode, state: Path | None, session_cls, *, max_new_tokens: int,
            kwargs: dict, environment: dict | None):
    """``(session, rows, finished)`` for `episode`: its checkpointed rows and saved session where `state`
    holds a consistent pair, else a new session and an emptied checkpoint folder."""
    rows = read_rows(state / "rows.jsonl", repair=True) if state is not None else []
    if (state is not None and (state / "done").is_file()) or len(rows) >= len(episode.turns):
        return None, rows[: len(episode.turns)], True
    session = None
    if rows and state is not None and readable_directory(state / "session", "session.json").is_dir():
        try:
            session = session_cls.load(state / "session", model, policy_kwargs=kwargs)
        except RheaError as e:  # a checkpoint damaged outside rhea's atomic saves: redo rather than stop
            warnings.warn(f"{state}: the checkpointed session cannot be restored ({e}); this episode starts over",
                          RuntimeWarning, stacklevel=2)
        if session is not None and len(session.conversation) != len(episode.history) + _kept(rows):
            session = None  # the session and the rows disagree (cut between the two writes): redo the episode
    if session is None:
        rows = []
        session = session_cls(model, tokenizer, policy, max_new_tokens=max_new_tokens, policy_kwargs=kwargs)
        _start_state(state, environment)
    elif state is not None and environment is not None:
        record_environment(state, environment)
    return session, rows, False


def run_episode(model, tokenizer, policy: str, episode, state: Path | None, bar, session_cls, *,
                max_new_tokens: int, kwargs: dict, environment: dict | None = None) -> list[dict]:
    """Rows of `episode` run one turn at a time, resumed from `state` where it stopped."""
    session, rows, finished = _resume(model, tokenizer, policy, episode, state, session_cls,
                                      max_new_tokens=max_new_tokens, kwargs=kwargs, environment=environment)
    if finished:
        bar.update(len(episode.turns))
        return rows
    bar.update(len(rows))
    fed_s = feed_history(session, episode) if not rows else None  # a resumed session holds its history already
    history = [(r["user"], r["reply"]) for r in rows if "error" not in r and r.get("kind") != "question"]
    placed = _placed(episode, rows)
    traces = []  # the session reports every finished turn here: its record (timings) and plan
    session.add_observer(traces.append)
    for turn in episode.turns[len(rows):]:
        try:
            reply = session.ask(turn.user) if turn.kind == "question" else session.send(turn.user)
            error = None
        except RheaError as e:  # a policy's recorded failure (e.g. a context over the window): score it as a miss
            reply, error = "", f"{type(e).__name__}: {e}"
        # the seconds the policy took to catch up on the episode's history, on the first turn after it
        fed, fed_s = ({"history_s": fed_s} if fed_s is not None and episode.history else {}), None
        rows.append(_finish_turn(policy, episode, turn, reply, error, traces[-1] if error is None else None, history,
                                 session, state, bar, placed=placed, **fed))
        if error is None and turn.kind != "question":
            placed[turn.meta.get("index")] = len(session.conversation) - 1
    if state is not None:
        (state / "done").write_text("")
    return rows


def is_finished(state: Path | None) -> bool:
    """True when an episode's checkpoint marks it complete."""
    return state is not None and (state / "done").is_file()


def run_episodes_batched(model, tokenizer, policy: str, episodes: Sequence, states: Sequence[Path | None], bar,
                         session_cls, *, max_new_tokens: int, kwargs: dict,
                         environment: dict | None = None) -> list[list[dict]]:
    """Rows of every episode in `episodes`, advanced together one turn index at a time, each resumed
    from its checkpoint where it stopped: at turn index t the episodes that still need turn t are
    answered in one batch (episodes resumed at different turns join the batch as they catch up)."""
    from rhea.session.batch import send_batch

    if len({len(e.turns) for e in episodes}) > 1:
        raise ValueError("episodes run in one batch must have the same number of turns")
    if any(e.history or any(t.kind == "question" for t in e.turns) for e in episodes):
        raise RheaError(f"suite {episodes[0].suite.name!r} feeds a history and asks questions on their own, one "
                        "episode at a time; run it with batch_episodes=1 (drop --batch-episodes)")
    sessions, traces, rows, histories, live = [], [], [], [], []
    for k, (episode, state) in enumerate(zip(episodes, states)):
        session, done_rows, finished = _resume(model, tokenizer, policy, episode, state, session_cls,
                                               max_new_tokens=max_new_tokens, kwargs=kwargs, environment=environment)
        bar.update(len(episode.turns) if finished else len(done_rows))
        seen: list = []
        if session is not None:
            session.add_observer(seen.append)
            live.append(k)
        sessions.append(session)
        traces.append(seen)
        rows.append(done_rows)
        histories.append([(r["user"], r["reply"]) for r in done_rows if "error" not in r])
    for index in range(min((len(rows[k]) for k in live), default=len(episodes[0].turns)), len(episodes[0].turns)):
        group = [k for k in live if len(rows[k]) == index]
        if not group:
            continue
        turns = {k: episodes[k].turns[index] for k in group}
        replies = send_batch([sessions[k] for k in group], [turns[k].user for k in group])
        # the group's turns scored together (a judging suite rates them as one batch); a failure scores as ""
        scored = episodes[group[0]].suite.score_turns(
            [(turns[k], "" if isinstance(reply, RheaError) else reply, histories[k]) for k, reply in zip(group, replies)])
        for k, reply, scores in zip(group, replies, scored):
            scores = episodes[k].labelled(turns[k], scores)
            if isinstance(reply, RheaError):  # a policy's recorded failure: scored as a miss, as one by one
                rows[k].append(_finish_turn(policy, episodes[k], turns[k], "", f"{type(reply).__name__}: {reply}",
                                            None, histories[k], sessions[k], states[k], bar, scores=scores))
            else:
                trace = traces[k][-1]
                rows[k].append(_finish_turn(policy, episodes[k], turns[k], reply, None, trace, histories[k],
                                            sessions[k], states[k], bar, scores=scores,
                                            batch_rows=trace.record.timings.get("batch_rows", 1.0)))
    for k in live:
        if states[k] is not None:
            (states[k] / "done").write_text("")
    return rows


def run_batched(model, tokenizer, policy, episodes, out, bar, session_cls, k: int, **kwargs) -> dict[int, list]:
    """``{episode number: rows}`` for the episodes not finished yet, `k` at a time, each resumed where its
    checkpoint stopped (none if k is 1: the runner then goes one by one)."""
    if k <= 1:
        return {}
    states = {n: (out / "state" / policy / str(n) if out is not None else None) for n in range(len(episodes))}
    todo = [n for n in range(len(episodes)) if not is_finished(states[n])]
    done: dict[int, list] = {}
    for start in range(0, len(todo), k):
        group = todo[start:start + k]
        rows = run_episodes_batched(model, tokenizer, policy, [episodes[n] for n in group], [states[n] for n in group],
                                    bar, session_cls, **kwargs)
        done.update(zip(group, rows))
    return done
