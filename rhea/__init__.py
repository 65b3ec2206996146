"""rhea: long multi-turn conversations for Hugging Face causal LMs.

Heavy submodules are imported lazily so that `import rhea` stays cheap.

The package reads top-down (see docs/ARCHITECTURE.md): `session` and `eval` drive
`policies`, which use `memory` and `context`; `modeling` and `backends` sit below them.
Modules that moved keep their old import path for a while (`MOVED`), with a
DeprecationWarning that names the new one.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "RheaConfig": "rhea.modeling.config",
    "RheaForCausalLM": "rhea.modeling.rhea_model",
    "load_default_model": "rhea.modeling.loading",
    "load_base_model": "rhea.modeling.loading",
}

#: Old module path -> where it lives now (a package's submodules follow it).
MOVED = {
    "rhea.llm": "rhea.backends.llm",
    "rhea.embedding": "rhea.backends.embedding",
    "rhea.retrieval": "rhea.backends.retrieval",
    "rhea.models": "rhea.modeling.zoo",
    "rhea.models_cli": "rhea.modeling.zoo_cli",
    "rhea.generation": "rhea.session.generation",
    "rhea.context.policies": "rhea.policies",
    "rhea.eval.batched": "rhea.eval.episodes",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rhea' has no attribute {name!r}")


def _moved_to(name: str) -> str | None:
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of an old path in `MOVED` return the module at its new path (the same object)."""

    def find_spec(self, fullname, path=None, target=None):
        new = _moved_to(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname in MOVED)

    def create_module(self, spec):
        new = _moved_to(spec.name)
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the alias; put it back
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
