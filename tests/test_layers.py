"""rhea reads top-down: a package imports only packages on its own layer or below (docs/ARCHITECTURE.md),
and no module imports itself back through others (no import circle, in rhea or rhea_kernels).

Every import is counted, module level or inside a function, so a lazy import cannot hide an upward
edge or a circle. So are imports by name that the code spells out: ``importlib.import_module("rhea.x")``
(or ``__import__``) with a literal name, and a module-level table of module names that the module
imports in a loop (``COMMAND_MODULES`` in cli.py). The package face, ``rhea/__init__.py``, is the one
module allowed to name any layer: it re-exports the public names lazily and names the modules that
register the agent policies (`rhea.POLICY_MODULES`); it imports none of them itself.
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
    ["rhea.agents", "rhea.peers"],
    ["rhea.training"],
    ["rhea.serve", "rhea.cli"],
]
ROOT = Path(rhea.__file__).parent
PACKAGES = (ROOT, ROOT.parent / "rhea_kernels")
FACE = "rhea"
IMPORT_FUNCTIONS = ("import_module", "__import__")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")


def _sources() -> dict[str, Path]:
    """Every source module of rhea and rhea_kernels by dotted name."""
    return {_module_name(p): p for package in PACKAGES for p in sorted(package.rglob("*.py"))}


SOURCES = _sources()


def _ours(name: str) -> bool:
    return name.split(".")[0] in {p.name for p in PACKAGES}


def _layer(module: str) -> int | None:
    best, layer = "", None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, layer = name, i
    return layer


def _string_table(value: ast.AST) -> list[str]:
    """The strings of a tuple / list / dict-values literal when each of them names one of our modules."""
    items = value.values if isinstance(value, ast.Dict) else getattr(value, "elts", None)
    if not items or not all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        return []
    names = [i.value for i in items]
    return names if all(n in SOURCES for n in names) else []


def imported_names(path: Path, module: str | None = None) -> set[str]:
    """The dotted names of our modules that `path` (the module named `module`) imports: each a source
    module, else the package or module a name was imported from, else a compiled module."""
    module = module or _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in SOURCES else base for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) in IMPORT_FUNCTIONS:
                found.add(node.args[0].value)
    for node in tree.body:  # module-level tables of module names imported by name
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            found.update(_string_table(node.value))
    return {m for m in found if _ours(m)}


def import_graph() -> dict[str, set[str]]:
    """module -> the source modules of ours it imports. A compiled module (``rhea_kernels._C``) imports
    nothing of ours and is left out; so are the face's tables of names (it imports none of them)."""
    return {module: set() if module == FACE else {m for m in imported_names(path) if m in SOURCES and m != module}
            for module, path in SOURCES.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of `graph` with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    circles.append(sorted(part))
    return circles


def test_no_package_imports_a_layer_above_its_own():
    upward = []
    for module, path in SOURCES.items():
        if not module.startswith("rhea.") and module != FACE:
            continue  # rhea_kernels: tests/kernels checks that it never imports rhea
        here = _layer(module)
        assert here is not None, f"{module} is on no layer: add it to LAYERS"
        if module == FACE:
            continue
        upward += [f"{module} -> {target}" for target in sorted(imported_names(path))
                   if target.startswith("rhea.") and (_layer(target) or 0) > here]
    assert upward == []


def test_no_import_circle():
    circles = import_circles(import_graph())
    assert circles == [], "import circles (each list imports itself back): " + "; ".join(
        " <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert import_circles(graph) == [["a", "b", "c"]]


def test_imports_by_name_and_tables_of_names_count(tmp_path):
    sample = tmp_path / "probe.py"
    sample.write_text('import importlib\nfrom . import base\nPLUGINS = ("rhea.agents.acr", "rhea.eval.runner")\n'
                      'NOT_MODULES = ("rhea.training", "a phrase")\n'
                      'def load():\n    importlib.import_module("rhea.session.chat")\n    __import__("rhea.serve")\n')
    assert imported_names(sample, "rhea.policies.probe") == {
        "rhea.agents.acr", "rhea.eval.runner", "rhea.session.chat", "rhea.serve", "rhea.policies.base"}


def test_the_face_names_only_modules_that_exist():
    face = SOURCES[FACE]
    tables = [t for node in ast.parse(face.read_text()).body if isinstance(node, (ast.Assign, ast.AnnAssign))
              for t in [_string_table(node.value)] if t]
    assert tables and set(rhea.POLICY_MODULES) <= {n for t in tables for n in t}
    for name in rhea.__all__:
        assert getattr(rhea, name) is not None, name


def test_no_module_reaches_a_layer_through_the_face():
    """Inside the packages, the face gives only what sits at the bottom (`__version__`, `POLICY_MODULES`):
    ``from rhea import ChatSession`` in a lower module would be an upward import the checks above miss."""
    lazy = set(rhea.__all__) - {"__version__", "POLICY_MODULES"}
    through = []
    for module, path in SOURCES.items():
        if module == FACE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == FACE and node.level == 0:
                through += [f"{module}: from rhea import {a.name}" for a in node.names if a.name in lazy]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == FACE \
                    and node.attr in lazy:
                through.append(f"{module}: rhea.{node.attr}")
    assert through == []


def test_the_top_level_holds_few_modules():
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert set(loose) - {"__init__.py", "cli.py", "errors.py", "constants.py"} <= {"testing.py"}, loose
