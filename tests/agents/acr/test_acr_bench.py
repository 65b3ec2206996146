"""benchmarks/acr.py: the operator sweep runs the model-driven refactorer on every operator and counts it."""
from __future__ import annotations

from pathlib import Path

import pytest

from rhea.agents.acr import ACTIVE_OPERATORS, ACRPolicy
from rhea.agents.acr.tasks import drift_tasks
from rhea.backends.llm import ScriptedGenerator
from rhea.testing import tiny_tokenizer
from rhea.training.acr import exact_match, value_match

from .helpers import FirstFactSolver
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "acr.py"


@pytest.fixture(scope="module")
def bench():
    mod = load_script(_PATH)
    return mod


def test_every_operator_reaches_the_refactorer_and_is_counted(bench):
    tok = tiny_tokenizer()
    tasks = drift_tasks(2, kinds=("correction",), seed=4)
    rewards = {"em": exact_match, "value": value_match}
    results = {"settings": {}, "operator_sweep": {"prompt-only": {}, "trained": {}}}
    for label in ("prompt-only", "trained"):
        for op in ACTIVE_OPERATORS:
            refactorer = ScriptedGenerator(["<summary>x</summary>", "no tags"])
            policy = lambda task, r=refactorer, o=op: ACRPolicy(router=bench.FixedRouter(o), refactorer=r, tokenizer=tok)
            summary, rows = bench.evaluate(f"sweep/{label}/{op}", tasks, policy, FirstFactSolver(), tok, rewards,
                                           [refactorer], 4, [])
            assert [r["refactor_source"] for r in rows] == ["refactorer", "fallback-raw"]
            assert summary["operators"] == {op: 2} and summary["refactor_sources"] == {op: {"refactorer": 1, "fallback-raw": 1}}
            assert summary["n"] == 2 and summary["em_ci95"][0] <= summary["em"] <= summary["em_ci95"][1]
            results["operator_sweep"][label][op] = summary
    none = bench.summarize([{**r, "operator": "none", "refactor_source": "none"} for r in rows])
    for name in ("prompt-only", "w/o-router", "w/o-refactorer", "trained"):
        results["settings"][name] = none
    counts = bench._runs_per_operator(results, ACTIVE_OPERATORS)
    for label in ("prompt-only", "trained"):
        assert counts[label] == {op: {"runs": 2, "refactorer": 1, "fallback-raw": 1} for op in ACTIVE_OPERATORS}
