"""The examples in rhea.eval's docstrings run and stay true."""
import doctest
import importlib

import pytest

MODULES = ["rhea.eval", "rhea.eval.checkers", "rhea.eval.loaders", "rhea.eval.judge",
           "rhea.eval.suites", "rhea.eval.suites.base", "rhea.eval.suites.instruction_retention",
           "rhea.eval.suites.state_tracking", "rhea.eval.suites.long_horizon",
           "rhea.eval.suites.efficiency"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    failures, attempted = doctest.testmod(importlib.import_module(name))
    assert attempted > 0, f"{name} has no docstring example"
    assert failures == 0
