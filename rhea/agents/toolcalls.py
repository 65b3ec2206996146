"""Parse tool calls out of whatever a model or an API returned.

Conventions understood:

- Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (a missing
  closing tag at the very end is tolerated: stop strings often cut it);
- Llama 3.x: bare JSON ``{"name": ..., "parameters": {...}}`` (optionally after
  ``<|python_tag|>``), and ``<function=name>{...}</function>``;
- fenced code blocks (```` ```json ... ``` ````) holding a call or a list of calls;
- OpenAI-style structures: a response (``choices[i].message.tool_calls``), a message with
  ``tool_calls``, or tool-call dicts ``{"id", "type": "function", "function": {"name",
  "arguments": "<json string>"}}`` — as Python objects or as JSON text.

JSON is read leniently where that is unambiguous: single-quoted strings, trailing commas,
Python's True/False/None. The parser never raises on bad input: it returns the calls it
could read, the problems it found, and the text left once the calls are cut out.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rhea.errors import RheaConfigError

__all__ = ["ToolCall", "ParsedToolCalls", "parse_tool_calls", "loads_lenient"]


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's name, its arguments, and the raw text it was read from.

    >>> ToolCall("fold_fragment", {"fragment_id": "a1b2c3"}).name
    'fold_fragment'
    """

    name: str
    arguments: dict
    raw: str = field(default="", compare=False)
    id: str | None = field(default=None, compare=False)


class ParsedToolCalls(NamedTuple):
    calls: list[ToolCall]
    errors: list[str]
    text: str  # the input with every recognised tool call cut out, stripped


_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION_TAG = re.compile(r"<function=([\w.\-]+)>(.*?)</function>", re.DOTALL)
_FENCED = re.compile(r"```[ \t]*([\w\-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_NOISE_TOKENS = ("<|python_tag|>", "[TOOL_CALLS]", "<|eom_id|>", "<|eot_id|>")
_LITERALS = {"True": "true", "False": "false", "None": "null"}


def parse_tool_calls(output: Any) -> ParsedToolCalls:
    """Read every tool call in `output` (model text, or an API response/message object).

    >>> calls, errors, text = parse_tool_calls(
    ...     'Let me look.<tool_call>{"name": "fold_fragment", "arguments": {"fragment_id": "ab12cd"}}</tool_call>')
    >>> calls[0].name, calls[0].arguments, errors, text
    ('fold_fragment', {'fragment_id': 'ab12cd'}, [], 'Let me look.')
    >>> parse_tool_calls("no tools here {really}")
    ParsedToolCalls(calls=[], errors=[], text='no tools here {really}')
    """
    if isinstance(output, (dict, list)):
        return _parse_object(output)
    if not isinstance(output, str):
        return ParsedToolCalls([], [f"cannot read tool calls from a {type(output).__name__}"], "")
    calls: list[ToolCall] = []
    errors: list[str] = []
    spans: list[tuple[int, int]] = []
    _read_tagged(output, calls, errors, spans)
    _read_function_tags(output, calls, errors, spans)
    _read_fenced(output, calls, errors, spans)
    _read_bare(output, calls, errors, spans)
    calls_in_order = [c for _, c in sorted(zip([_start_of(c, output) for c in calls], calls), key=lambda p: p[0])]
    return ParsedToolCalls(calls_in_order, errors, _cut(output, spans))


def loads_lenient(text: str) -> Any:
    """`json.loads`, falling back to a repair of single quotes, trailing commas and Python literals.

    >>> loads_lenient("{'a': 'it is', 'b': [1, 2,], 'c': True,}")
    {'a': 'it is', 'b': [1, 2], 'c': True}
    """
    try:
        return json.loads(text, strict=False)
    except ValueError:
        pass
    return json.loads(_repair_json(text), strict=False)


# ------------------------------------------------------------------ text conventions
def _read_tagged(text: str, calls: list, errors: list, spans: list) -> None:
    for match in _TAGGED.finditer(text):
        body = _unfence(match.group(1).strip())
        if not body:
            errors.append("empty <tool_call> block")
        else:
            _add_parsed(body, match.group(0), calls, errors, required=True)
        spans.append(match.span())


def _read_function_tags(text: str, calls: list, errors: list, spans: list) -> None:
    for match in _FUNCTION_TAG.finditer(text):
        if _inside(match.start(), spans):
            continue
        arguments, problem = _arguments(match.group(2).strip() or "{}")
        if problem:
            errors.append(f"tool {match.group(1)!r}: {problem}")
        else:
            calls.append(ToolCall(match.group(1), arguments, match.group(0)))
        spans.append(match.span())


def _read_fenced(text: str, calls: list, errors: list, spans: list) -> None:
    for match in _FENCED.finditer(text):
        if _inside(match.start(), spans):
            continue
        body = match.group(2).strip()
        if body.startswith("{") or body.startswith("["):
            if _add_parsed(body, match.group(0), calls, errors, required=False):
                spans.append(match.span())


def _read_bare(text: str, calls: list, errors: list, spans: list) -> None:
    pos, unterminated = 0, None
    while True:
        start = text.find("{", pos)
        if start == -1:
            break
        pos = start + 1
        if _inside(start, spans):
            continue
        end = _balanced_end(text, start)
        if end is None:
            # A stray "{" in prose must not hide a later call, so keep scanning.
            if unterminated is None and _looks_like_call(text[start:]):
                unterminated = start
            continue
        raw = text[start:end]
        if _add_parsed(raw, raw, calls, errors, required=False):
            spans.append((start, end))
            pos = end
    if unterminated is not None and not any(lo > unterminated for lo, _ in spans):
        errors.append(f"unterminated JSON tool call: {_clip(text[unterminated:])}")


def _add_parsed(body: str, raw: str, calls: list, errors: list, *, required: bool) -> bool:
    """Parse `body` and append its calls; return whether it was a tool call at all."""
    try:
        obj = loads_lenient(body)
    except (ValueError, RecursionError) as exc:  # absurdly deep nesting must not escape either
        if required or _looks_like_call(body):
            errors.append(f"could not parse tool call JSON ({exc}): {_clip(body)}")
            return True
        return False
    found, problems = _calls_from(obj, raw)
    if not found and not problems:
        if required:
            errors.append(f"no tool name in {_clip(body)}; expected {{\"name\": ..., \"arguments\": {{...}}}}")
        return required
    calls.extend(found)
    errors.extend(problems)
    return True


# ---------------------------------------------------------------- object conventions
def _parse_object(obj: Any) -> ParsedToolCalls:
    found, problems = _calls_from(obj, "")
    text = ""
    if isinstance(obj, dict):
        message = _first_message(obj) or obj
        text = message.get("content") if isinstance(message.get("content"), str) else ""
    return ParsedToolCalls(found, problems, text.strip())


def _calls_from(obj: Any, raw: str) -> tuple[list[ToolCall], list[str]]:
    if isinstance(obj, list):
        calls, problems = [], []
        for item in obj:
            c, p = _calls_from(item, raw)
            calls.extend(c)
            problems.extend(p)
        return calls, problems
    if not isinstance(obj, dict):
        return [], []
    message = _first_message(obj)
    if message is not None:
        return _calls_from(message.get("tool_calls") or [], raw)
    if "tool_calls" in obj:
        return _calls_from(obj["tool_calls"] or [], raw)
    if isinstance(obj.get("function"), dict):
        return _one_call(obj["function"], raw or json.dumps(obj), obj.get("id"))
    if "name" in obj and ({"arguments", "parameters"} & obj.keys() or len(obj) == 1):
        return _one_call(obj, raw or json.dumps(obj), obj.get("id"))
    return [], []


def _one_call(spec: dict, raw: str, call_id: Any) -> tuple[list[ToolCall], list[str]]:
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        return [], [f"tool call has no valid name: {_clip(raw)}"]
    arguments, problem = _arguments(spec.get("arguments", spec.get("parameters")))
    if problem:
        return [], [f"tool {name!r}: {problem}"]
    return [ToolCall(name.strip(), arguments, raw, call_id if isinstance(call_id, str) else None)], []


def _arguments(value: Any) -> tuple[dict, str | None]:
    # OpenAI sends arguments as a JSON string; most templates as an object.
    if value is None or value == "":
        return {}, None
    if isinstance(value, str):
        try:
            value = loads_lenient(value)
        except (ValueError, RecursionError) as exc:
            return {}, f"arguments are not valid JSON ({exc}): {_clip(value)}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _first_message(obj: dict) -> dict | None:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or choices[0].get("delta")
        return message if isinstance(message, dict) else None
    return None


# -------------------------------------------------------------------------- helpers
def _repair_json(text: str) -> str:
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = _string_end(text, i, '"')
            out.append(text[i:j])
            i = j
        elif ch == "'":
            j = _string_end(text, i, "'")
            if j > n or text[j - 1] != "'" or j - 1 == i:
                raise RheaConfigError(f"unterminated single-quoted string at char {i}")
            out.append(json.dumps(text[i + 1:j - 1].replace("\\'", "'")))
            i = j
        elif ch == ",":
            k = i + 1
            while k < n and text[k].isspace():
                k += 1
            if k >= n or text[k] not in "}]":
                out.append(ch)
            i += 1
        elif ch.isalpha() or ch == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(_LITERALS.get(text[i:j], text[i:j]))
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _string_end(text: str, start: int, quote: str) -> int:
    """Index just past the string that opens at `start` (len(text)+1 if unterminated)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == quote:
            return i + 1
        else:
            i += 1
    return len(text) + 1


def _balanced_end(text: str, start: int) -> int | None:
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch in "\"'" and (ch == '"' or _opens_single_quoted(text, i)):
            i = _string_end(text, i, ch)
            if i > len(text):
                return None
            continue
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _opens_single_quoted(text: str, i: int) -> bool:
    # Inside JSON-ish text a single quote opens a string only where a value or key may
    # start; elsewhere it is an apostrophe.
    k = i - 1
    while k >= 0 and text[k].isspace():
        k -= 1
    return k >= 0 and text[k] in "{[:,"


def _looks_like_call(text: str) -> bool:
    return re.search(r"""["']name["']\s*:""", text) is not None


def _unfence(body: str) -> str:
    match = _FENCED.fullmatch(body)
    return match.group(2).strip() if match else body


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(lo <= pos < hi for lo, hi in spans)


def _start_of(call: ToolCall, text: str) -> int:
    pos = text.find(call.raw) if call.raw else -1
    return pos if pos >= 0 else len(text)


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    kept, cursor = [], 0
    for lo, hi in sorted(spans):
        kept.append(text[cursor:lo])
        cursor = max(cursor, hi)
    kept.append(text[cursor:])
    out = "".join(kept)
    for token in _NOISE_TOKENS:
        out = out.replace(token, "")
    return out.strip()


def _clip(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"
