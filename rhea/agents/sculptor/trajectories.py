"""Training data from Sculptor runs: the paper's Algorithm 1 (appendix E).

A Sculptor trajectory is not one growing sequence: a tool call that changes the visible
history (fold, summarize, restore) rewrites messages that earlier completions were
generated after, so no single token sequence reproduces what the model saw. Conditional
trajectory collection cuts the run at each completion C_i whose tool call is a
context-modifying tool (T_ctx = fragment, fold, summarize, restore: `CONTEXT_TOOLS`), and at
the final completion C_n. Each snapshot is the prompt C_i was generated from (the history
as it was then, the query, and every earlier completion and tool result of the run), then
C_i, then its tool result(s) T_i (Algorithm 1, lines 7-10; the final snapshot has none).
Incremental loss assignment puts loss only on the completions not trained in an earlier
snapshot, so every completion is trained exactly once, in the context it was generated in.

``cut_on="view_change"`` (not the paper's rule) cuts only where a call really changed the
visible text: `fragment_context` only assigns ids here and a failed fold changes nothing,
so their prefix stays valid; it gives fewer, longer snapshots with the same loss per
completion.

`write_jsonl` writes one instance per line, the format the trainer reads
(`rhea.training.formats.load_trajectories`; training config ``data.kind: trajectories``)::

    {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": str, ...}, ...],
     "loss_mask": [bool, ...],   # one per message; True only on assistant messages to train
     "reward": float}            # optional: the run's reward (Eq. 4, `reward.sculptor_reward`),
                                 # propagated to every snapshot of the run, as the paper does

Runs come from `SculptorLoop.run` or, turn by turn in a session, from
`SculptorPolicy.last_result`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO, Iterable

from rhea.agents.sculptor.loop import LoopResult
from rhea.errors import RheaConfigError

#: Algorithm 1's T_ctx: the context-modifying tools (fragment, fold, summarize, restore).
CONTEXT_TOOLS = frozenset({"fragment_context", "fold_fragment", "summarize_fragment", "restore_fragment"})
CUT_RULES = ("context_tool", "view_change")


@dataclass(frozen=True)
class TrainingInstance:
    """Chat messages plus a per-message loss mask (True: train on this assistant message)."""

    messages: list[dict]
    loss_mask: list[bool]
    reward: float | None = None

    def to_json(self) -> str:
        line = {"messages": self.messages, "loss_mask": self.loss_mask}
        if self.reward is not None:
            line["reward"] = self.reward
        return json.dumps(line, ensure_ascii=False)


def trajectory_instances(result: LoopResult, reward: float | None = None, *,
                         cut_on: str = "context_tool") -> list[TrainingInstance]:
    """Split one run into Algorithm 1 training instances (optionally tagged with its reward).

    >>> from rhea.agents.sculptor.loop import Step, TraceEntry
    >>> tool = {"role": "tool", "name": "fold_fragment", "content": "{}"}
    >>> steps = [Step([{"role": "user", "content": "q"}], "A1", [None], "tool_call", True, (tool,)),
    ...          Step([{"role": "user", "content": "q'"}, {"role": "assistant", "content": "A1"}, tool], "A2",
    ...               [None, 0, None], "final")]
    >>> trace = [TraceEntry(0, "fold_fragment", {}, "{}", None, True)]
    >>> [i.loss_mask for i in trajectory_instances(LoopResult("A2", [], trace, 1, steps=steps))]
    [[False, True, False], [False, False, False, True]]
    """
    if not isinstance(result, LoopResult):
        raise TypeError(f"result must be a LoopResult, got {type(result).__name__}")
    if cut_on not in CUT_RULES:
        raise RheaConfigError(f"cut_on={cut_on!r} must be one of {', '.join(CUT_RULES)}")
    called: dict[int, set[str]] = {}
    for entry in result.trace:
        called.setdefault(entry.step, set()).add(entry.name)
    instances, pending = [], []
    last = len(result.steps) - 1
    for index, step in enumerate(result.steps):
        pending.append(index)
        cut = step.changed_view if cut_on == "view_change" else bool(called.get(index, set()) & CONTEXT_TOOLS)
        if not (cut or index == last):
            continue
        sources = [*step.sources, index]
        present = {s for s in sources if s is not None}
        if not set(pending) <= present:
            # The loop's trail only grows, so this means the result was edited or built by hand.
            raise RheaConfigError(f"steps {sorted(set(pending) - present)} are missing from step {index}'s prompt; "
                             "pass a LoopResult as returned by SculptorLoop.run")
        # The snapshot ends with the tool result T_i unless C_i is the final completion.
        results = [dict(m) for m in step.results] if index < last else []
        messages = [dict(m) for m in step.prompt] + [{"role": "assistant", "content": step.completion}] + results
        mask = [s in pending for s in sources] + [False] * len(results)
        instances.append(TrainingInstance(messages, mask, reward))
        pending = []
    return instances


def write_jsonl(results: Iterable[LoopResult], fp: IO[str], rewards: Iterable[float] | None = None, *,
                cut_on: str = "context_tool") -> int:
    """Write every instance of every run as one JSONL line; return the number of lines.

    >>> import io
    >>> write_jsonl([], io.StringIO())
    0
    """
    results = list(results)
    rewards = [None] * len(results) if rewards is None else list(rewards)
    if len(rewards) != len(results):
        raise RheaConfigError(f"got {len(rewards)} rewards for {len(results)} results; give one per result")
    count = 0
    for result, reward in zip(results, rewards):
        for instance in trajectory_instances(result, reward, cut_on=cut_on):
            fp.write(instance.to_json() + "\n")
            count += 1
    return count
