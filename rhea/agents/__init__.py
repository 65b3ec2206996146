"""LLM-driven context controllers: Sculptor, ACR, ACE and Context-Agent.

Each method registers its policy ("sculptor", "acr", "ace", "context-agent") with
`rhea.policies.register_policy` when its module is imported; `rhea.POLICY_MODULES` names those
modules, so that `rhea.policies.get_policy` finds them by name without naming this layer.

Controllers talk to models only through `rhea.backends.llm.TextGenerator`, and read tool calls
from model output with `rhea.agents.toolcalls.parse_tool_calls`.

>>> from rhea.agents import parse_tool_calls
>>> parse_tool_calls('{"name": "fold_fragment", "parameters": {"fragment_id": "a1b2c3"}}').calls[0].arguments
{'fragment_id': 'a1b2c3'}
"""
from __future__ import annotations

from rhea.agents.toolcalls import ParsedToolCalls, ToolCall, loads_lenient, parse_tool_calls

__all__ = ["ToolCall", "ParsedToolCalls", "parse_tool_calls", "loads_lenient"]
