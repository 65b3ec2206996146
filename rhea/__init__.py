"""rhea: long multi-turn conversations for Hugging Face causal LMs.

Heavy submodules are imported lazily so that `import rhea` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "RheaConfig": "rhea.modeling.config",
    "RheaForCausalLM": "rhea.modeling.rhea_model",
    "load_default_model": "rhea.modeling.loading",
    "load_base_model": "rhea.modeling.loading",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rhea' has no attribute {name!r}")
