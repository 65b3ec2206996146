"""Prompts of the Sculptor loop.

`PAPER_UNIFIED_PROMPT` is a faithful paraphrase, not the verbatim text: the paper's unified
system prompt (arXiv 2508.04664, appendix) could not be retrieved offline. It states what
the paper's prompt conveys — the model owns ACM tools over its own history, long contexts
carry interfering (outdated, irrelevant) information, the three tool families and their
reversibility, and to answer directly once the context serves the question.
"""
from __future__ import annotations

import json

PAPER_UNIFIED_PROMPT = (
    "You are a helpful assistant equipped with Active Context Management (ACM) tools that let you "
    "sculpt your own working memory: the conversation history you see. Long histories hold "
    "outdated, repeated or irrelevant information that interferes with recall and reasoning, so "
    "you may reshape the context before you answer:\n"
    "1. fragment_context splits a long span, between two exact markers, into fragments with ids.\n"
    "2. summarize_fragment replaces a fragment by a summary focused on what the task needs, and "
    "fold_fragment hides a fragment behind a short marker. Both are reversible: restore_fragment "
    "brings the original text back.\n"
    "3. search_context finds exact, case-insensitive matches anywhere in the original history, "
    "folded or summarized parts included; get_search_detail shows more text around the matches "
    "of an earlier search.\n"
    "Use the tools when the context is long or noisy, or when values were updated over time: fold "
    "or summarize what is superseded or unrelated, search for the exact key or name you are asked "
    "about, restore anything you need to read again. Skip them when the answer is plain. Each "
    "tool result arrives as a tool message after your call. When the context serves the question, "
    "answer the user's last message directly, without calling a tool."
)

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

FORCE_TOOL_PROMPT = (
    "Before answering, use at least one context management tool (for example search_context for "
    "the key you are asked about) to check the relevant part of the history, then answer."
)

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
