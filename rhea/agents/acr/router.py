"""The router: reads the history, returns ``{"analysis", "drift_detected", "selected_operator"}``.

As in the paper (appendix B.2 "History-only diagnosis", Figures 6-7) the router receives
only the history and the task description, never the current query, and is told to be
conservative. The contract is strict: the reply must be exactly one JSON object
(optionally inside one ```json fence) with exactly those three keys, a str, a bool and
one of `OPERATORS`; ``drift_detected`` false must come with ``"none"`` and true with one of
the six active operators. An older operator spelling (`LEGACY_NAMES`, which a router adapter
or a saved pool may still emit) is accepted with a DeprecationWarning and mapped to the paper's. Anything else is a
contract failure: `Router.route` then returns none (the paper's conservative fallback,
appendix C) and records the reason; `parse_router_output(..., strict=True)` raises
`RouterOutputError` instead.

>>> parse_router_output('{"analysis": "fact changed", "drift_detected": true, '
...                     '"selected_operator": "fact_rectify"}').selected_operator
'fact_rectify'
>>> d = parse_router_output("I think none")
>>> d.selected_operator, d.fallback_reason
('none', 'not JSON: Expecting value at char 0')
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from rhea.agents.acr.errors import RouterOutputError
from rhea.agents.acr.history import HistoryTurn, fit_history_prompt, format_history, task_description
from rhea.agents.acr.operators import LEGACY_NAMES, NONE, OPERATORS, canonical_operator, router_system_prompt, router_user_prompt
from rhea.backends.llm import TextGenerator

ROUTER_KEYS = ("analysis", "drift_detected", "selected_operator")
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


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
    op = data["selected_operator"]
    if op not in OPERATORS and op not in LEGACY_NAMES:
        return f"selected_operator={op!r} is not one of {list(OPERATORS)}"
    if not data["drift_detected"] and LEGACY_NAMES.get(op, op) != NONE:
        return f"drift_detected is false but selected_operator={op!r} (must be none)"
    if data["drift_detected"] and LEGACY_NAMES.get(op, op) == NONE:
        return "drift_detected is true but selected_operator is none (must be one of the six active operators)"
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
    return RouterDecision(data["analysis"], data["drift_detected"], canonical_operator(data["selected_operator"]), None, raw)


def router_messages(turns: list[HistoryTurn], task: str = "") -> list[dict]:
    """The router's prompt: Figure 6 as system message, Figure 7 (task description and history,
    no query) as user message."""
    return [{"role": "system", "content": router_system_prompt()},
            {"role": "user", "content": router_user_prompt(task_description(task), format_history(turns))}]


class Router:
    """Any `TextGenerator` (prompt-only base model, the router LoRA, a teacher) as the router.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> r = Router(ScriptedGenerator(['{"analysis": "ok", "drift_detected": false, "selected_operator": "none"}']))
    >>> r.route([HistoryTurn(0, "hi", "hello")]).selected_operator
    'none'
    """

    def __init__(self, generator: TextGenerator, *, max_new_tokens: int = 96, temperature: float = 0.0):
        if not callable(getattr(generator, "generate", None)):
            raise TypeError(f"router generator must be a TextGenerator (with .generate), got {type(generator).__name__}")
        self.generator = generator
        self.max_new_tokens = max_new_tokens
        self.temperature = float(temperature)

    def route(self, turns: list[HistoryTurn], task: str = "", *, record: list | None = None) -> RouterDecision:
        """The decision for this history (the current query is never shown); none without a call
        when there is no history yet. The prompt is fitted to the generator's window
        (`rhea.agents.acr.history.fit_history_prompt`: the oldest turns give way first); a cut
        appends its ``inner_budget`` record to `record`."""
        if not turns:
            return RouterDecision("", False, NONE, "no history yet: nothing to refactor", "")
        messages = fit_history_prompt(self.generator, lambda shown: router_messages(shown, task), turns,
                                      self.max_new_tokens, call="acr.router", record=record)
        raw = self.generator.generate(messages, max_new_tokens=self.max_new_tokens, temperature=self.temperature)
        return parse_router_output(raw)
