"""The docstring examples of the ACR modules and the TGSE loop run and hold."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "rhea.agents.acr.operators", "rhea.agents.acr.history", "rhea.agents.acr.router", "rhea.agents.acr.refactorer",
    "rhea.agents.acr.deterministic", "rhea.agents.acr.controller", "rhea.agents.acr.policy", "rhea.agents.acr.tasks",
    "rhea.agents.acr.teacher", "rhea.training.acr.tgse", "rhea.training.acr.rewards",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    failures, attempted = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no docstring example"
    assert failures == 0


def test_train_acr_is_a_rhea_command():
    from rhea.cli import build_parser

    args = build_parser().parse_args(["train-acr", "--tasks", "4", "--set", "iterations=1", "--max-iterations", "1"])
    assert args.command == "train-acr" and args.tasks == 4 and args.set == ["iterations=1"]
