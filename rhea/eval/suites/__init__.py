"""Evaluation suites: seeded scripted conversations plus their scoring.

>>> list_suites()
['efficiency', 'instruction-retention', 'long-horizon', 'long-mt-bench-plus', 'mt-eval-recollection', 'multi-session-qa', 'state-tracking']
>>> suite = get_suite("state-tracking", n_episodes=1)
>>> episodes = suite.generate(n_turns=8, seed=0)
>>> episodes[0].turns[-1].kind
'probe'
"""
from __future__ import annotations

from typing import Any

from rhea.eval.suites.base import (TURN_KINDS, Episode, Suite, SuiteConfigError, SuiteTurn,
                                   normalize_answer, summarize_numeric, value_matches)
from rhea.eval.suites.efficiency import EfficiencySuite
from rhea.eval.suites.instruction_retention import InstructionRetentionSuite, RetentionData
from rhea.eval.suites.long_horizon import LongHorizonSuite
from rhea.eval.suites.long_mt_bench_plus import LongMTBenchPlusSuite
from rhea.eval.suites.mt_eval_recollection import MTEvalRecollectionSuite
from rhea.eval.suites.multi_session_qa import MultiSessionQASuite
from rhea.eval.suites.state_tracking import StateTrackingSuite

_SUITES: dict[str, type[Suite]] = {cls.name: cls for cls in (
    InstructionRetentionSuite, StateTrackingSuite, LongHorizonSuite, EfficiencySuite, MultiSessionQASuite, MTEvalRecollectionSuite,
    LongMTBenchPlusSuite)}


class UnknownSuiteError(SuiteConfigError):
    """A suite name that is not registered."""


def list_suites() -> list[str]:
    """Names of every registered suite, sorted."""
    return sorted(_SUITES)


def get_suite(name: str, *, path: str | None = None, **kwargs: Any) -> Suite:
    """Build the suite `name`; with `path`, over that public data file (`from_path`)."""
    if name not in _SUITES:
        raise UnknownSuiteError(f"unknown suite {name!r}; choose one of {list_suites()}")
    cls = _SUITES[name]
    return cls.from_path(path, **kwargs) if path is not None else cls(**kwargs)


__all__ = ["TURN_KINDS", "Episode", "Suite", "SuiteConfigError", "SuiteTurn",
           "UnknownSuiteError", "EfficiencySuite", "InstructionRetentionSuite",
           "LongHorizonSuite", "LongMTBenchPlusSuite", "MTEvalRecollectionSuite", "MultiSessionQASuite", "RetentionData", "StateTrackingSuite", "get_suite",
           "list_suites", "normalize_answer", "summarize_numeric", "value_matches"]
