"""Docstring examples on the public API must stay runnable."""
import doctest
import importlib

import pytest

MODULES = [
    "rhea.context.conversation", "rhea.context.latent", "rhea.context.plan", "rhea.context.errors",
    "rhea.context.rendering", "rhea.context.policies.vanilla", "rhea.context.policies.recent_k",
    "rhea.context.policies.bm25", "rhea.context.policies.summary", "rhea.context.policies.assemble",
    "rhea.context.policies.validation", "rhea.memory.recognizer", "rhea.memory.instructional", "rhea.retrieval",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
