"""The reward of the Sculptor paper's RL stage (appendix E, Eq. 4), to score a loop's run.

    r(x, τ) =  1   if the answer is correct
              -1   if format error, or n_tools > 20, or |τ| > 128k tokens
               0   otherwise

The penalty takes precedence (a correct answer reached with a malformed call, more than 20
tool calls or an over-long trajectory scores -1): the paper lists the cases without an order,
and this order is the one in which the penalty can act at all. What counts, read off a
`LoopResult` by `run_reward`:

- format error: a reply whose tool call could not be read (`MALFORMED` trace entries), a
  call of a tool that does not exist (`UnknownToolError`), or arguments that break the tool's
  schema (`ToolArgumentError`). A well-formed call the store refuses (unknown fragment id,
  marker not found, already folded) is a wrong move, not a format error: it costs its turn.
- n_tools: every call the model wrote, counted once: the ones run, the ones refused because
  the budget was spent, and any the model still wrote in its forced final answer. The loop
  stops running calls at `max_tool_calls` (20 by default), so n_tools > 20 means the model
  kept calling past the cap.
- |τ|: tokens of the final context the answer was given in plus the answer
  (`LoopResult.messages`): exact with a tokenizer, else rhea's word-piece approximation.

Whether the answer is correct is the benchmark's call (e.g. PI-LLM: every key's latest value).

>>> sculptor_reward(True), sculptor_reward(False), sculptor_reward(True, n_tools=21)
(1.0, 0.0, -1.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rhea.agents.sculptor.loop import MALFORMED, MALFORMED_ERROR, LoopResult
from rhea.agents.toolcalls import parse_tool_calls
from rhea.errors import RheaConfigError
from rhea.policies.assemble import count_tokens

#: Eq. 4's limits: at most 20 tool calls, at most 128k tokens of trajectory.
MAX_TOOLS = 20
MAX_TRAJECTORY_TOKENS = 128_000
#: Error classes that mean the call itself was malformed (see the module docstring).
FORMAT_ERRORS = frozenset({MALFORMED_ERROR, "UnknownToolError", "ToolArgumentError"})


@dataclass(frozen=True)
class RewardBreakdown:
    """Eq. 4's reward and the quantities it was computed from."""

    reward: float
    correct: bool
    format_error: bool
    n_tools: int
    trajectory_tokens: int
    reason: str  # "correct" | "format_error" | "too_many_tools" | "too_long" | "incorrect"


def sculptor_reward(correct: bool, *, format_error: bool = False, n_tools: int = 0, trajectory_tokens: int = 0,
                    max_tools: int = MAX_TOOLS, max_tokens: int = MAX_TRAJECTORY_TOKENS) -> float:
    """Eq. 4: 1 if correct, -1 on a format error / more than `max_tools` calls / more than
    `max_tokens` tokens, else 0 (the penalty wins over correctness).

    >>> sculptor_reward(True, trajectory_tokens=128_001), sculptor_reward(False, format_error=True)
    (-1.0, -1.0)
    """
    return _breakdown(correct, format_error, n_tools, trajectory_tokens, max_tools, max_tokens).reward


def run_reward(result: LoopResult, correct: bool, *, tokenizer: Any = None, max_tools: int = MAX_TOOLS,
               max_tokens: int = MAX_TRAJECTORY_TOKENS) -> RewardBreakdown:
    """Eq. 4 for one `SculptorLoop` run, given whether its answer was correct.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> from rhea.agents.sculptor import AcmStore, SculptorLoop, SculptorToolbox
    >>> history = [{"role": "user", "content": "k=1. k=2."}]
    >>> loop = SculptorLoop(ScriptedGenerator(['<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "2"]),
    ...                     SculptorToolbox(AcmStore(history), ScriptedGenerator([])))
    >>> run_reward(loop.run(history, "k?"), correct=True).reason
    'format_error'
    """
    if not isinstance(result, LoopResult):
        raise TypeError(f"result must be a LoopResult, got {type(result).__name__}")
    format_error = any(t.name == MALFORMED or t.error_type in FORMAT_ERRORS for t in result.trace)
    n_tools = len(result.trace)
    if result.steps and result.steps[-1].kind == "budget_final":
        written = parse_tool_calls(result.steps[-1].completion)
        n_tools += len(written.calls) + bool(written.errors)
        format_error |= bool(written.errors)
    tokens = sum(count_tokens(m.get("content") or "", tokenizer) for m in result.messages)
    return _breakdown(bool(correct), format_error, n_tools, tokens, max_tools, max_tokens)


def _breakdown(correct: bool, format_error: bool, n_tools: int, tokens: int, max_tools: int,
               max_tokens: int) -> RewardBreakdown:
    for name, value in (("n_tools", n_tools), ("trajectory_tokens", tokens), ("max_tools", max_tools),
                        ("max_tokens", max_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RheaConfigError(f"{name}={value!r} must be an int >= 0")
    if format_error:
        reason = "format_error"
    elif n_tools > max_tools:
        reason = "too_many_tools"
    elif tokens > max_tokens:
        reason = "too_long"
    else:
        reason = "correct" if correct else "incorrect"
    reward = {"correct": 1.0, "incorrect": 0.0}.get(reason, -1.0)
    return RewardBreakdown(reward, bool(correct), bool(format_error), n_tools, tokens, reason)
