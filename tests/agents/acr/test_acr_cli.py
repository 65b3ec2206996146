"""`rhea train-acr` is a rhea command (the module docstrings' examples run through --doctest-modules)."""
from __future__ import annotations


def test_train_acr_is_a_rhea_command():
    from rhea.cli import build_parser

    args = build_parser().parse_args(["train-acr", "--tasks", "4", "--set", "iterations=1", "--max-iterations", "1"])
    assert args.command == "train-acr" and args.tasks == 4 and args.set == ["iterations=1"]
