"""The docstring examples of the Sculptor policy, generators and store persistence run and hold."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["rhea.agents.sculptor.policy", "rhea.agents.sculptor.generators", "rhea.agents.sculptor.store",
           "rhea.agents.sculptor.ids"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    failures, attempted = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no docstring example"
    assert failures == 0
