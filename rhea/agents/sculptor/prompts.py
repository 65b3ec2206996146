"""Prompts of the Sculptor loop, the paper's word for word where it prints one.

From the Sculptor paper's appendix D (arXiv 2508.04664):

- `PAPER_UNIFIED_PROMPT` (D.2, Figure 9): the minimal, generic prompt of the zero-shot
  evaluations and of RL training; the loop's default;
- `PI_LLM_PROMPT` (D.1, Figure 7): the benchmark-specific prompt for PI-LLM (fragment, then
  fold the earlier updates); `benchmarks/sculptor_pi.py` uses it, as the paper's Table 1 does;
- `NEEDLEBENCH_PROMPT` (D.1, Figure 8): the benchmark-specific prompt for NeedleBench
  Multi-Needle Reasoning (chained search_context / get_search_detail).

The paper prints tool names in code font; the prompts below keep its backticks (PI-LLM) and
quotes (NeedleBench) as printed. The other prompts here (`TOOL_FORMAT_TEMPLATE`, the budget,
nudge and malformed-call messages) have no counterpart in the paper: they are the loop's
plumbing for models without native tool calling (see docs/reports/fidelity.md, Sculptor).
"""
from __future__ import annotations

import json

PAPER_UNIFIED_PROMPT = (
    "You are a helpful assistant. You can autonomously manage your own context: fold irrelevant "
    "information, focus on useful details, summarize long texts to keep your context concise, and use "
    "search tools to find key information in large documents."
)

PI_LLM_PROMPT = (
    "You are an intelligent assistant specialized for PI-LLM (Proactive Interference) testing. Your task "
    "is to track continuous updates to multiple key-value pairs and accurately remember the latest value "
    "for each key amidst substantial interference information.\n"
    "Remember: First use the `fragment_context` tool to split the long text into multiple fragments, then "
    "use `fold_fragment` to fold unimportant, earlier key-value updates, allowing you to concentrate on "
    "the final updates. The recommended approach is to divide the entire update stream into multiple "
    "fragments (e.g., ten fragments), then keep only the last two or three fragments while folding the "
    "rest. This strategy enables focus on the current, most recent content without being distracted by "
    "earlier information."
)

NEEDLEBENCH_PROMPT = (
    "You are an agent skilled at analyzing family relationships between different people. You have "
    "\"search_context\" and \"get_search_detail\" tools. You excel at conducting chained searches for key "
    "information in long texts until you find complete information to reach your desired final answer.\n"
    "When searching for the oldest ancestor, ensure that every person name found has been verified "
    "through the search tools to confirm they truly have no higher-level ancestors before concluding "
    "your reasoning."
)

#: The paper's system prompts by name (``--prompt`` of benchmarks/sculptor_pi.py).
PAPER_PROMPTS = {"unified": PAPER_UNIFIED_PROMPT, "pi-llm": PI_LLM_PROMPT, "needlebench": NEEDLEBENCH_PROMPT}

TOOL_FORMAT_TEMPLATE = (
    "# Tools\n\n"
    "You may call one or more tools. Their signatures, as JSON schemas:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "To call a tool, write for each call:\n"
    "<tool_call>\n{{\"name\": <tool name>, \"arguments\": <JSON object>}}\n</tool_call>\n"
    "A reply without any tool call is your final answer."
)

BUDGET_EXHAUSTED_PROMPT = (
    "You have used all {max_tool_calls} tool calls you are allowed. Do not call any more tools: "
    "give your final answer to the question now."
)

#: The fallback for ``tool_choice="required"`` when a generator cannot take it (see loop.py).
FORCE_TOOL_PROMPT = "Before answering, call at least one of the context management tools."

MALFORMED_CALL_MESSAGE = (
    "could not read your tool call ({problems}). Write each call as "
    "<tool_call>{{\"name\": <tool name>, \"arguments\": <JSON object>}}</tool_call>"
)


def tool_description(schemas: list[dict]) -> str:
    """The text block that tells a generator without native tool calling about the tools.

    >>> tool_description([{"type": "function", "function": {"name": "f"}}]).splitlines()[4]
    '{"type": "function", "function": {"name": "f"}}'
    """
    return TOOL_FORMAT_TEMPLATE.format(tools="\n".join(json.dumps(s, ensure_ascii=False) for s in schemas))
