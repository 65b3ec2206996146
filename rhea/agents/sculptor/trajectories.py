"""Training data from Sculptor runs: the paper's Algorithm 1.

A Sculptor trajectory is not one growing sequence: a tool call that changes the visible
history (fold, summarize, restore) rewrites messages that earlier completions were
generated after, so no single token sequence reproduces what the model saw. Conditional
trajectory collection cuts the run at each such call. Each instance is the prompt of the
call's generation plus its completion, and one more instance ends at the final answer.
Incremental loss assignment puts loss only on the assistant completions not trained in
an earlier instance, so every completion is trained exactly once, in the context it was
actually generated in.

A call counts as a cut only if it really changed the visible text; `fragment_context`
only assigns ids (the text stays the same), so its prefix stays valid and it is no cut.

`write_jsonl` writes one instance per line, the format the trainer reads
(`rhea.training.formats.load_trajectories`; training config ``data.kind: trajectories``)::

    {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": str, ...}, ...],
     "loss_mask": [bool, ...],   # one per message; True only on assistant messages to train
     "reward": float}            # optional: the run's outcome, for filtering or RL

Runs come from `SculptorLoop.run` or, turn by turn in a session, from
`SculptorPolicy.last_result`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO, Iterable

from rhea.agents.sculptor.loop import LoopResult
from rhea.errors import RheaConfigError


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


def trajectory_instances(result: LoopResult, reward: float | None = None) -> list[TrainingInstance]:
    """Split one run into Algorithm 1 training instances (optionally tagged with its reward).

    >>> from rhea.agents.sculptor.loop import Step
    >>> steps = [Step([{"role": "user", "content": "q"}], "A1", [None], "tool_call", changed_view=True),
    ...          Step([{"role": "user", "content": "q'"}, {"role": "assistant", "content": "A1"}], "A2",
    ...               [None, 0], "final")]
    >>> [i.loss_mask for i in trajectory_instances(LoopResult("A2", [], [], 1, steps=steps))]
    [[False, True], [False, False, True]]
    """
    if not isinstance(result, LoopResult):
        raise TypeError(f"result must be a LoopResult, got {type(result).__name__}")
    instances, pending = [], []
    for index, step in enumerate(result.steps):
        pending.append(index)
        if not (step.changed_view or index == len(result.steps) - 1):
            continue
        sources = [*step.sources, index]
        present = {s for s in sources if s is not None}
        if not set(pending) <= present:
            # The loop's trail only grows, so this means the result was edited or built by hand.
            raise RheaConfigError(f"steps {sorted(set(pending) - present)} are missing from step {index}'s prompt; "
                             "pass a LoopResult as returned by SculptorLoop.run")
        messages = [dict(m) for m in step.prompt] + [{"role": "assistant", "content": step.completion}]
        instances.append(TrainingInstance(messages, [s in pending for s in sources], reward))
        pending = []
    return instances


def write_jsonl(results: Iterable[LoopResult], fp: IO[str], rewards: Iterable[float] | None = None) -> int:
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
        for instance in trajectory_instances(result, reward):
            fp.write(instance.to_json() + "\n")
            count += 1
    return count
