"""The package's front: its version, its type marker, the names importable from `rhea`, and an
``__all__`` in every package that names everything the package re-exports, each of them resolving."""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

import rhea

REPO = Path(rhea.__file__).parent.parent
PACKAGES = sorted(
    ".".join(p.parent.relative_to(REPO).parts)
    for root in ("rhea", "rhea_kernels") for p in (REPO / root).rglob("__init__.py"))


def test_the_version_is_the_one_pyproject_declares():
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert rhea.__version__ == declared


def test_rhea_version_prints_the_version_without_loading_the_commands():
    code = ("import sys; from rhea.cli import main; code = main(['--version']); "
            "print('torch' in sys.modules); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"rhea {rhea.__version__}", "False"]


def test_the_version_is_also_an_argparse_option():
    from rhea.cli import build_parser

    assert any("--version" in action.option_strings for action in build_parser()._actions)


def test_the_package_is_marked_typed():
    assert (REPO / "rhea" / "py.typed").is_file()


def test_import_rhea_stays_light():
    done = subprocess.run([sys.executable, "-c", "import sys, rhea; print(sorted({'torch', 'transformers'} & set(sys.modules)))"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_main_names_import_from_rhea():
    from rhea import ChatSession, run_suite
    from rhea.eval.runner import run_suite as runner_run_suite
    from rhea.session import ChatSession as SessionChatSession

    assert ChatSession is SessionChatSession and run_suite is runner_run_suite
    assert {"ChatSession", "run_suite"} <= set(rhea.__all__) <= set(dir(rhea))
    with pytest.raises(AttributeError, match="no attribute 'chat_session'"):
        rhea.chat_session  # noqa: B018


def test_the_agent_policies_are_found_by_name_through_the_face():
    """`rhea.POLICY_MODULES` is how the registry, below the agents, finds their policies by name."""
    done = subprocess.run(
        [sys.executable, "-c", "from rhea.policies import policy_class; "
         "print(*(policy_class(n).__module__ for n in ('sculptor', 'acr', 'ace', 'context-agent')))"],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    modules = done.stdout.split()
    assert len(modules) == 4
    assert all(any(m == p or m.startswith(p + ".") for p in rhea.POLICY_MODULES) for m in modules), modules


def _reexported(package: str) -> set[str]:
    """The public names a package's ``__init__`` binds: its imports (not submodules, not typing
    helpers) and its own classes and functions."""
    path = REPO.joinpath(*package.split("."), "__init__.py")
    module = importlib.import_module(package)
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module not in ("__future__", "typing", "collections.abc"):
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return {n for n in names if not n.startswith("_") and not isinstance(getattr(module, n, None), types.ModuleType)}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_lists_what_it_exports_and_each_name_resolves(package):
    module = importlib.import_module(package)
    assert isinstance(getattr(module, "__all__", None), list), f"{package} has no __all__ list"
    assert len(module.__all__) == len(set(module.__all__)), f"{package}.__all__ names a name twice"
    unresolved = [n for n in module.__all__ if not hasattr(module, n)]
    assert unresolved == [], f"{package}.__all__ names what it does not define: {unresolved}"
    missing = sorted(_reexported(package) - set(module.__all__))
    assert missing == [], f"{package} re-exports {missing} without listing them in __all__"


def test_the_readme_stays_a_front_page():
    """README.md says what rhea is, how to install and use it and what it measured; the detail lives in docs/."""
    readme = REPO / "README.md"
    if not readme.is_file():
        pytest.skip("no README.md here (an installed package)")
    lines = readme.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail into docs/ to keep it at most 150"
