"""rhea reads top-down: a package imports only packages on its own layer or below (docs/ARCHITECTURE.md).

Every import is counted, module level or inside a function, so a lazy import cannot hide an
upward edge. Old module paths (`rhea.MOVED`) count as where they point now.
"""
from __future__ import annotations

import ast
from pathlib import Path

import rhea

#: Bottom first. A module belongs to the longest prefix listed.
LAYERS = [
    ["rhea", "rhea.errors", "rhea.constants", "rhea.storage"],
    ["rhea.backends", "rhea.modeling", "rhea.testing"],
    ["rhea.context", "rhea.calibration"],
    ["rhea.memory"],
    ["rhea.policies"],
    ["rhea.session"],
    ["rhea.eval"],
    ["rhea.agents"],
    ["rhea.training"],
    ["rhea.serve", "rhea.cli"],
]
ROOT = Path(rhea.__file__).parent


def _layer(module: str) -> int | None:
    for old, new in rhea.MOVED.items():
        if module == old or module.startswith(old + "."):
            module = new + module[len(old):]
    best, layer = "", None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, layer = name, i
    return layer


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m == "rhea" or m.startswith("rhea.")}


def test_no_package_imports_a_layer_above_its_own():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        here = _layer(module)
        assert here is not None, f"{module} is on no layer: add it to LAYERS"
        upward += [f"{module} -> {target}" for target in sorted(_imports(path)) if (_layer(target) or 0) > here]
    assert upward == []


def test_the_top_level_holds_few_modules():
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert set(loose) - {"__init__.py", "cli.py", "errors.py", "constants.py"} <= {"testing.py"}, loose
