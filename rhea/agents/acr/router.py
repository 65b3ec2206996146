"""The router: reads the history, returns ``{"analysis", "drift_detected", "selected_operator"}``.

The contract is strict: the reply must be exactly one JSON object (optionally inside one
```json fence) with exactly those three keys, a str, a bool and one of `OPERATORS`, and
``drift_detected`` false must come with ``"NONE"``. Anything else is a contract failure:
`Router.route` then returns NONE and records the reason; `parse_router_output(...,
strict=True)` raises `RouterOutputError` instead.

>>> parse_router_output('{"analysis": "fact changed", "drift_detected": true, '
...                     '"selected_operator": "fact_rectification"}').selected_operator
'fact_rectification'
>>> d = parse_router_output("I think NONE")
>>> d.selected_operator, d.fallback_reason
('NONE', 'not JSON: Expecting value at char 0')
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from rhea.agents.acr.errors import RouterOutputError
from rhea.agents.acr.history import HistoryTurn, controller_user_message
from rhea.agents.acr.operators import NONE, OPERATORS, router_system_prompt
from rhea.backends.llm import TextGenerator

ROUTER_KEYS = ("analysis", "drift_detected", "selected_operator")
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)
ROUTER_ASK = "Your JSON decision:"


@dataclass
class RouterDecision:
    """The router's decision; `fallback_reason` is set when the reply broke the contract (then NONE)."""

    analysis: str
    drift_detected: bool
    selected_operator: str
    fallback_reason: str | None = None
    raw: str = ""

    @property
    def valid(self) -> bool:
        return self.fallback_reason is None

    def to_json(self) -> str:
        """The contract's JSON (the three keys), e.g. as an SFT target."""
        return json.dumps({k: getattr(self, k) for k in ROUTER_KEYS}, ensure_ascii=False)

    def to_record(self) -> dict:
        return {"event": "acr_route", **asdict(self)}


def _contract_error(raw: str) -> str | None:
    """Why `raw` breaks the router contract, or None when it keeps it."""
    text = raw.strip()
    fence = _FENCE.match(text)
    if fence:
        text = fence.group(1).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return f"not JSON: {e.msg} at char {e.pos}"
    if not isinstance(data, dict):
        return f"JSON {type(data).__name__} instead of an object"
    missing = [k for k in ROUTER_KEYS if k not in data]
    extra = sorted(set(data) - set(ROUTER_KEYS))
    if missing or extra:
        return f"keys must be exactly {list(ROUTER_KEYS)}; missing {missing}, unexpected {extra}"
    if not isinstance(data["analysis"], str):
        return f"analysis must be a string, got {type(data['analysis']).__name__}"
    if not isinstance(data["drift_detected"], bool):
        return f"drift_detected must be true or false, got {data['drift_detected']!r}"
    if data["selected_operator"] not in OPERATORS:
        return f"selected_operator={data['selected_operator']!r} is not one of {list(OPERATORS)}"
    if not data["drift_detected"] and data["selected_operator"] != NONE:
        return f"drift_detected is false but selected_operator={data['selected_operator']!r} (must be NONE)"
    return None


def parse_router_output(raw: str, *, strict: bool = False) -> RouterDecision:
    """Validate a router reply against the contract (see the module docstring)."""
    if not isinstance(raw, str):
        raise TypeError(f"router output must be a str, got {type(raw).__name__}")
    reason = _contract_error(raw)
    if reason is not None:
        if strict:
            raise RouterOutputError(f"router output breaks the JSON contract ({reason}): {raw[:200]!r}")
        return RouterDecision("", False, NONE, reason, raw)
    text = raw.strip()
    fence = _FENCE.match(text)
    data = json.loads(fence.group(1) if fence else text)
    return RouterDecision(data["analysis"], data["drift_detected"], data["selected_operator"], None, raw)


def router_messages(turns: list[HistoryTurn], query: str, task: str = "") -> list[dict]:
    """The router's prompt: the contract as system message, the history as user message."""
    return [{"role": "system", "content": router_system_prompt()},
            {"role": "user", "content": controller_user_message(turns, query, task, ROUTER_ASK)}]


class Router:
    """Any `TextGenerator` (prompt-only base model, the router LoRA, a teacher) as the router.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> r = Router(ScriptedGenerator(['{"analysis": "ok", "drift_detected": false, "selected_operator": "NONE"}']))
    >>> r.route([HistoryTurn(0, "hi", "hello")], "bye").selected_operator
    'NONE'
    """

    def __init__(self, generator: TextGenerator, *, max_new_tokens: int = 96):
        if not callable(getattr(generator, "generate", None)):
            raise TypeError(f"router generator must be a TextGenerator (with .generate), got {type(generator).__name__}")
        self.generator = generator
        self.max_new_tokens = max_new_tokens

    def route(self, turns: list[HistoryTurn], query: str, task: str = "") -> RouterDecision:
        """The decision for this history; NONE without a call when there is no history yet."""
        if not turns:
            return RouterDecision("", False, NONE, "no history yet: nothing to refactor", "")
        raw = self.generator.generate(router_messages(turns, query, task), max_new_tokens=self.max_new_tokens)
        return parse_router_output(raw)
