"""The examples in rhea_kernels' docstrings run (pyproject's --doctest-modules covers rhea/ only)."""
import doctest
import importlib

import pytest

MODULES = ["rhea_kernels.turn_scores", "rhea_kernels.turn_scores.reference", "rhea_kernels.score_tiers",
           "rhea_kernels.score_tiers.reference", "rhea_kernels.anchored_attention",
           "rhea_kernels.anchored_attention.reference", "rhea_kernels.hf"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    pytest.importorskip("transformers") if name == "rhea_kernels.hf" else None
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} failed in {name}"
