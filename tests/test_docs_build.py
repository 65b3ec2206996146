"""The documentation site builds without a warning, covers every public package, and reads as the
library is today.

`mkdocs build --strict` fails on a broken link or anchor between pages, a page missing from the
navigation, and an API reference entry (`::: rhea.xxx`) that does not resolve. It skips only when
mkdocs or mkdocstrings is not installed (both are in the `dev` extra).
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: A numbered work session ("session 12", "sessions 5-24", "session-25 adapters") or a tracker
#: reference ("issue #22", "#24"): development history, which belongs in git, CHANGELOG.md and the
#: dated pages under docs/reports/, not in the pages that describe the library.
HISTORY = re.compile(r"(?<!\[)[Ss]essions? [0-9]|[Ss]essions? [0-9]+[-–]|[Ss]ession-[0-9]|[Ii]ssue #[0-9]|#[0-9]{2}\b")


def public_packages() -> list[str]:
    """Every importable package under rhea/ and rhea_kernels/ whose path has no private part."""
    found = []
    for top in ("rhea", "rhea_kernels"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT).parts
            if not any(p.startswith("_") for p in parts) and "data" not in parts:
                found.append(".".join(parts))
    return found


def public_modules() -> list[str]:
    """Every public module (a package's __init__ excluded) inside the public packages."""
    return [f"{pkg}.{m.stem}" for pkg in public_packages()
            for m in sorted((ROOT / pkg.replace(".", "/")).glob("*.py"))
            if m.name != "__init__.py" and not m.name.startswith("_")]


def documented_objects() -> set[str]:
    return {m.group(1) for page in (DOCS / "reference").glob("*.md")
            for m in re.finditer(r"^::: ([\w.]+)\s*$", page.read_text(encoding="utf-8"), flags=re.M)}


def test_every_public_package_and_module_has_an_api_reference_entry():
    missing = sorted(set(public_packages() + public_modules()) - documented_objects())
    assert not missing, f"no `::: name` entry under docs/reference/ for: {missing}"


def test_every_reference_page_is_in_the_navigation():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)

    in_nav = set(pages(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk - in_nav == set(), f"pages missing from mkdocs.yml's nav: {sorted(on_disk - in_nav)}"


def test_reader_facing_docs_carry_no_development_history():
    pages = [ROOT / "README.md"] + [p for p in sorted(DOCS.rglob("*.md")) if "reports" not in p.relative_to(DOCS).parts]
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
            for p in pages for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if HISTORY.search(line)]
    assert not hits, "numbered sessions or tracker references outside docs/reports/:\n" + "\n".join(hits)


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
                    reason="mkdocs and mkdocstrings[python] are not installed (pip install -e '.[dev]')")
def test_mkdocs_build_strict_passes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{output[-6000:]}"
    assert "WARNING" not in output, output[-6000:]
    assert (tmp_path / "site" / "reference" / "rhea-modeling" / "index.html").is_file()
    api = (tmp_path / "site" / "reference" / "rhea-session" / "index.html").read_text(encoding="utf-8")
    assert "ChatSession" in api, "the API reference page does not render the package's docstrings"
