"""Every public error of rhea derives from `RheaError` (one root: ``except RheaError`` catches all)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import pytest

import rhea
from rhea.errors import RheaError


def _modules():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for info in pkgutil.walk_packages(rhea.__path__, "rhea."):
            if info.name.rsplit(".", 1)[-1].startswith("_"):
                continue
            yield importlib.import_module(info.name)


def test_every_public_error_derives_from_rhea_error():
    found, outside = set(), []
    for module in _modules():
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == module.__name__
                    and not name.startswith("_")):
                qualname = f"{module.__name__}.{name}"
                found.add(qualname)
                if not issubclass(obj, RheaError):
                    outside.append(qualname)
    assert len(found) > 40, sorted(found)
    assert outside == [], f"derive these from rhea.errors.RheaError: {outside}"


def test_context_errors_are_rhea_errors_and_value_errors():
    from rhea.context import ContextOverflowError, EmptyMessageError, InvalidTurnError

    for cls in (ContextOverflowError, EmptyMessageError, InvalidTurnError):
        assert issubclass(cls, RheaError) and issubclass(cls, ValueError)


def test_eval_errors_are_rhea_errors_and_value_errors():
    from rhea.eval.checkers import (InstructionArgumentError, InstructionError, UnknownInstructionError,
                                    UnsupportedInstructionError, get_instruction)
    from rhea.eval.suites import SuiteConfigError, UnknownSuiteError, get_suite

    for cls in (SuiteConfigError, UnknownSuiteError, InstructionError, UnknownInstructionError,
                UnsupportedInstructionError, InstructionArgumentError):
        assert issubclass(cls, RheaError) and issubclass(cls, ValueError), cls
    with pytest.raises(RheaError, match="unknown suite 'nope'"):
        get_suite("nope")
    with pytest.raises(RheaError, match="unknown instruction id 'nope'"):
        get_instruction("nope")


def _cli_raising(monkeypatch, error: Exception):
    """`rhea.cli.main` with one command, ``boom``, whose code raises `error`."""
    import argparse

    import rhea.cli

    def boom(args):
        raise error

    parser = argparse.ArgumentParser(prog="rhea")
    parser.add_subparsers(dest="command").add_parser("boom").set_defaults(func=boom)
    monkeypatch.setattr(rhea.cli, "build_parser", lambda: parser)
    monkeypatch.setattr(rhea.cli, "apply_threads", lambda args: None)
    return rhea.cli.main


def test_the_cli_prints_a_rhea_error_as_one_line(monkeypatch, capsys):
    from rhea.eval.suites import UnknownSuiteError

    main = _cli_raising(monkeypatch, UnknownSuiteError("unknown suite 'x'; choose one of [...]"))
    assert main(["boom"]) == 1
    assert capsys.readouterr().err == "rhea boom: error: unknown suite 'x'; choose one of [...]\n"


def test_the_cli_keeps_the_traceback_of_a_bare_value_error(monkeypatch):
    """A ValueError that is not a RheaError is a bug (bad input is named where it is checked)."""
    main = _cli_raising(monkeypatch, ValueError("internal"))
    with pytest.raises(ValueError, match="internal"):
        main(["boom"])
