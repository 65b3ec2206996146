"""The docstring examples of the agents modules run and hold."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "rhea.agents", "rhea.agents.toolcalls", "rhea.agents.sculptor.ids", "rhea.agents.sculptor.text",
    "rhea.agents.sculptor.store", "rhea.agents.sculptor.schemas", "rhea.agents.sculptor.validation",
    "rhea.agents.sculptor.summarizer", "rhea.agents.sculptor.tools", "rhea.agents.sculptor.prompts",
    "rhea.agents.sculptor.loop", "rhea.agents.sculptor.trajectories",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    failures, attempted = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no docstring example"
    assert failures == 0
