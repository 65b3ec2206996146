"""`rhea` console script.

Each command lives with its code: a module listed in `COMMAND_MODULES` exposes
``register(subparsers)`` that adds its sub-command(s) and sets ``func`` on them.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from rhea.errors import RheaError

COMMAND_MODULES = [
    "rhea.modeling.cli",     # chat --demo, export
    "rhea.session.cli",      # chat (interactive)
    "rhea.training.cli",     # train
    "rhea.training.acr.cli",  # train-acr
    "rhea.eval.cli",         # bench
    "rhea.calibration.cli",  # calibrate
    "rhea.modeling.zoo_cli",  # models (the model zoo)
    "rhea_kernels.cli",      # kernels
]


#: Printed as one line. ValueError only for the errors not yet under RheaError (PENDING in
#: tests/test_errors.py) and the kernels' CLI, which stands apart from rhea.
USER_ERRORS = (RheaError, FileExistsError, ValueError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rhea", description="Long multi-turn conversations for Hugging Face LLMs.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (name == e.name or name.startswith(e.name + ".")):  # command not in this install
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as e:  # one clear line for the user's mistakes; full traceback for ours
        if isinstance(e, USER_ERRORS):
            print(f"rhea {args.command}: error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
