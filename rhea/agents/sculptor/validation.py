"""Check tool arguments against a tool's JSON schema and fill in defaults.

Covers the subset of JSON Schema the Sculptor tools use: object with `properties`,
`required`, `additionalProperties: false`; `string` (with `minLength`, `enum`) and
`integer` (with `minimum`, `maximum`). Every problem is reported at once, by name, so the
model can fix its call in one retry.
"""
from __future__ import annotations

from rhea.agents.sculptor.errors import ToolArgumentError

_TYPE_NAMES = {"string": "a string", "integer": "an integer"}


def validate_arguments(schema: dict, arguments: object) -> dict:
    """Return `arguments` with defaults filled in, or raise `ToolArgumentError`.

    `schema` is an OpenAI function schema (`{"type": "function", "function": {...}}`) or
    its `parameters` object. Integral floats (5.0) count as integers; bools and numeric
    strings do not.

    >>> s = {"type": "object", "properties": {"n": {"type": "integer", "default": 5,
    ...      "minimum": 1, "maximum": 20}}, "required": []}
    >>> validate_arguments(s, {})
    {'n': 5}
    >>> validate_arguments(s, {"n": 50})
    Traceback (most recent call last):
    rhea.agents.sculptor.errors.ToolArgumentError: n=50 is out of range [1, 20]
    """
    params = schema["function"]["parameters"] if "function" in schema else schema
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}: {arguments!r}")
    props, problems = params.get("properties", {}), []
    for name in params.get("required", []):
        if name not in arguments:
            problems.append(f"missing required argument {name!r}")
    if params.get("additionalProperties") is False:
        for name in arguments:
            if name not in props:
                problems.append(f"unknown argument {name!r} (allowed: {', '.join(props)})")
    clean = {}
    for name, spec in props.items():
        if name in arguments:
            value, problem = _check_value(name, spec, arguments[name])
            if problem:
                problems.append(problem)
            else:
                clean[name] = value
        elif "default" in spec:
            clean[name] = spec["default"]
    if problems:
        raise ToolArgumentError("; ".join(problems))
    return clean


def _check_value(name: str, spec: dict, value: object) -> tuple[object, str | None]:
    kind = spec.get("type")
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return value, f"{name} must be {_TYPE_NAMES[kind]}, got {type(value).__name__} {value!r}"
        lo, hi = spec.get("minimum"), spec.get("maximum")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return value, f"{name}={value} is out of range [{lo}, {hi}]"
    elif kind == "string":
        if not isinstance(value, str):
            return value, f"{name} must be {_TYPE_NAMES[kind]}, got {type(value).__name__} {value!r}"
        if len(value) < spec.get("minLength", 0):
            return value, f"{name} must not be empty"
    elif kind is not None:
        # A schema this checker cannot enforce is a programming error, not a model error.
        raise TypeError(f"validate_arguments does not support schema type {kind!r} (argument {name!r})")
    if "enum" in spec and value not in spec["enum"]:
        return value, f"{name}={value!r} is not one of {spec['enum']}"
    return value, None
