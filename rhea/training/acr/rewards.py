"""TGSE's rewards: how the solver's answer is scored against a drift task's gold answer."""
from __future__ import annotations

from typing import Callable

from rhea.agents.acr.errors import ACRConfigError
from rhea.agents.acr.tasks import DriftTask
from rhea.eval.suites.base import normalize_answer, value_matches

REWARDS = ("exact_match", "value_match")


def exact_match(answer: str, task: DriftTask) -> float:
    """1.0 when the normalised answer equals the normalised gold answer.

    >>> from rhea.agents.acr.tasks import drift_tasks
    >>> t = drift_tasks(1)[0]; exact_match(t.answer.upper() + ".", t), exact_match("It is " + t.answer, t)
    (1.0, 0.0)
    """
    return float(normalize_answer(answer) == normalize_answer(task.answer))


def value_match(answer: str, task: DriftTask) -> float:
    """1.0 when the answer names the gold value and no confusable candidate (lenient)."""
    return float(value_matches(answer, task.answer, task.candidates))


def get_reward(name: str) -> Callable[[str, DriftTask], float]:
    if name not in REWARDS:
        raise ACRConfigError(f"reward={name!r} must be one of {REWARDS}")
    return exact_match if name == "exact_match" else value_match
