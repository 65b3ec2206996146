"""rhea: long multi-turn conversations for Hugging Face causal LMs.

The names below are imported on first use, so that ``import rhea`` stays cheap (no torch):

>>> import rhea
>>> rhea.__version__
'0.1.0'
>>> from rhea import ChatSession, run_suite
>>> ChatSession.__module__, run_suite.__module__
('rhea.session.chat', 'rhea.eval.runner')

The package reads top-down (see docs/ARCHITECTURE.md): `session` and `eval` drive
`policies`, which use `memory` and `context`; `modeling` and `backends` sit below them. The
agent methods and the peer methods (`rhea.peers`: kvpress, LLMLingua) sit above `eval`; this module is where they join the policy registry
(`POLICY_MODULES`).
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module that defines it (imported when the name is first read).
_LAZY = {
    "ChatSession": "rhea.session.chat",
    "run_suite": "rhea.eval.runner",
    "get_policy": "rhea.policies.registry",
    "available_policies": "rhea.policies.registry",
    "RheaConfig": "rhea.modeling.config",
    "RheaForCausalLM": "rhea.modeling.rhea_model",
    "load_default_model": "rhea.modeling.loading",
    "load_base_model": "rhea.modeling.loading",
    "RheaError": "rhea.errors",
}

#: Modules whose import registers more policies by name with `rhea.policies.register_policy`: the
#: agent methods, which sit above the policy layer and so cannot be named by it. The registry
#: imports these the first time it is asked for a name it does not hold, or for the full list.
POLICY_MODULES = (
    "rhea.agents.sculptor.policy",
    "rhea.agents.ace",
    "rhea.agents.context_agent",
    "rhea.agents.acr",
    "rhea.peers.kvpress_policy",
    "rhea.peers.llmlingua_policy",
)

__all__ = ["__version__", "POLICY_MODULES", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # read once: later reads are plain attribute lookups
        return value
    raise AttributeError(f"module 'rhea' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
