"""Docstring examples on the public API must stay runnable."""
import doctest
import importlib

import pytest

MODULES = [
    "rhea.context.conversation", "rhea.context.latent", "rhea.context.plan", "rhea.errors",
    "rhea.context.rendering", "rhea.policies.vanilla", "rhea.policies.recent_k",
    "rhea.policies.bm25", "rhea.policies.summary", "rhea.policies.assemble",
    "rhea.policies.validation", "rhea.memory.recognizer", "rhea.memory.instructional", "rhea.backends.retrieval",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
