"""Split a nested state (dicts/lists with tensors) into JSON + a flat tensor dict, and back, exactly."""
from __future__ import annotations

from typing import Any

import torch

from rhea.errors import RheaConfigError

_TAG = "__tensor__"


def split_tensors(state: Any, prefix: str = "t") -> tuple[Any, dict[str, torch.Tensor]]:
    """Replace every tensor by ``{"__tensor__": key}``; return (JSON-able state, {key: tensor}).

    >>> j, t = split_tensors({"a": torch.ones(2), "b": [1, "x"]})
    >>> j, list(t)
    ({'a': {'__tensor__': 't.a'}, 'b': [1, 'x']}, ['t.a'])
    """
    tensors: dict[str, torch.Tensor] = {}

    def walk(x, path):
        if isinstance(x, torch.Tensor):
            tensors[path] = x.detach().cpu().contiguous()
            return {_TAG: path}
        if isinstance(x, dict):
            if _TAG in x:
                raise RheaConfigError(f"state key {_TAG!r} is reserved (at {path})")
            return {k: walk(v, f"{path}.{k}") for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{path}.{i}") for i, v in enumerate(x)]
        return x

    return walk(state, prefix), tensors


def join_tensors(state: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of `split_tensors`."""
    if isinstance(state, dict):
        if set(state) == {_TAG}:
            key = state[_TAG]
            if key not in tensors:
                raise KeyError(f"tensor {key!r} referenced by the session JSON is missing from its safetensors file")
            return tensors[key]
        return {k: join_tensors(v, tensors) for k, v in state.items()}
    if isinstance(state, list):
        return [join_tensors(v, tensors) for v in state]
    return state
