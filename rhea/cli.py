"""`rhea` console script.

Each command lives with its code: a module listed in `COMMAND_MODULES` exposes
``register(subparsers)`` that adds its sub-command(s) and sets ``func`` on them.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from rhea import __version__
from rhea.errors import RheaError

COMMAND_MODULES = [
    "rhea.modeling.cli",     # export, shrink
    "rhea.session.cli",      # chat (interactive REPL, --demo)
    "rhea.training.cli",     # train
    "rhea.training.acr.cli",  # train-acr
    "rhea.eval.cli",         # bench
    "rhea.calibration.cli",  # calibrate
    "rhea.modeling.zoo_cli",  # models (the model zoo)
    "rhea.serve.cli",        # serve (OpenAI-compatible HTTP server)
    "rhea_kernels.cli",      # kernels
]


#: Printed as one line: every user mistake is a named RheaError. Anything else, a bare ValueError or
#: OSError included, is a bug and keeps its traceback. The kernels' CLI stands apart from rhea and
#: prints its own errors (rhea_kernels/cli.py).
USER_ERRORS = (RheaError,)


#: Commands that decode one sequence at a time. With one torch thread a chat turn took a median
#: 6.0 s against 38.6 s with the default (one per core) on the shared 2-core machine, with
#: identical replies (benchmarks/threads.py; docs/guides/sessions-and-policies.md, "Threads"), so they default to one
#: unless --threads or OMP_NUM_THREADS says otherwise.
SINGLE_SEQUENCE_COMMANDS = ("chat", "bench")


#: What ``rhea --version`` prints.
VERSION_LINE = f"rhea {__version__}"


def apply_threads(args) -> int | None:
    """Set torch's intra-op threads for `args.command`: --threads, else 1 for the single-sequence
    commands unless OMP_NUM_THREADS is set. Returns the count set, or None when left alone."""
    import os

    n = getattr(args, "threads", None)
    if n is None and (args.command not in SINGLE_SEQUENCE_COMMANDS or os.environ.get("OMP_NUM_THREADS")):
        return None
    import torch

    torch.set_num_threads(n or 1)
    return n or 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rhea", description="Long multi-turn conversations for Hugging Face LLMs.")
    parser.add_argument("--version", action="version", version=VERSION_LINE)
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
    if (sys.argv[1:] if argv is None else list(argv)) == ["--version"]:  # answered before the commands load
        print(VERSION_LINE)
        return 0
    args = build_parser().parse_args(argv)
    apply_threads(args)
    try:
        return int(args.func(args) or 0)
    except Exception as e:  # one clear line for the user's mistakes; full traceback for ours
        if isinstance(e, USER_ERRORS):
            print(f"rhea {args.command}: error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
