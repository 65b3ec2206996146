"""Modules that moved stay importable under their old path: the same module, and a DeprecationWarning."""
from __future__ import annotations

import json
import subprocess
import sys

import rhea

PROBE = """
import importlib, json, warnings
import rhea
out = {}
for old, new in rhea.MOVED.items():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    out[old] = [module is importlib.import_module(new), module.__name__, module.__spec__.name,
                [str(w.message) for w in seen if w.category is DeprecationWarning]]
from rhea.context.policies.rhea_policy import RheaPolicy
from rhea.policies.rhea_policy import RheaPolicy as New
out["submodule"] = RheaPolicy is New
print(json.dumps(out))
"""


def test_old_paths_import_the_moved_module_with_a_deprecation_warning():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out.pop("submodule") is True
    assert set(out) == set(rhea.MOVED)
    for old, (same, name, spec_name, warned) in out.items():
        new = rhea.MOVED[old]
        assert same and name == new and spec_name == new, old
        assert warned == [f"{old} moved to {new}; import it from there"], old
