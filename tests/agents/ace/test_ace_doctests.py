"""The docstring examples of the ACE modules run and hold."""
import doctest
import importlib

import pytest

MODULES = ["rhea.agents.ace", "rhea.agents.ace.votes", "rhea.agents.ace.memory", "rhea.agents.ace.retrievers",
           "rhea.agents.ace.tokens", "rhea.agents.ace.prompts", "rhea.agents.ace.orchestrator",
           "rhea.agents.ace.policy", "rhea.agents.ace.qa", "rhea.agents.ace.constrained"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    failures, attempted = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no docstring example"
    assert failures == 0
