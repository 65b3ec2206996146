"""The six Sculptor tools as OpenAI function-calling JSON schemas.

Names, parameters, defaults and limits follow the Sculptor paper's tool list (arXiv
2508.04664, appendix H). The paper's exact description strings were not available to us
offline, so the descriptions below are our own wording of each tool's documented behaviour.
`role` additionally accepts "all" (any role), a rhea extension.

These dicts are what `tokenizer.apply_chat_template(messages, tools=TOOL_SCHEMAS)` and
OpenAI-compatible endpoints take.
"""
from __future__ import annotations

import copy

ROLES = ["user", "assistant", "system", "all"]


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def _int(description: str, default: int, minimum: int, maximum: int) -> dict:
    return {"type": "integer", "description": description, "default": default, "minimum": minimum, "maximum": maximum}


def _role(description: str) -> dict:
    return {"type": "string", "description": description, "enum": ROLES, "default": "user"}


def _text(description: str) -> dict:
    return {"type": "string", "description": description, "minLength": 1}


_FRAGMENT_ID = _text("The 6-character id of a fragment, as returned by fragment_context.")

TOOL_SCHEMAS: list[dict] = [
    _function(
        "fragment_context",
        "Split a span of the conversation into fragments with unique ids, so that parts of it can "
        "later be summarized, folded or restored. The span runs from the first occurrence of "
        "start_marker through the following end_marker, inside one message of the given role. "
        "The visible text does not change; the result lists each fragment id with a preview.",
        {
            "start_marker": _text("Exact text where the span starts (included)."),
            "end_marker": _text("Exact text where the span ends (included); must come after start_marker in the same message."),
            "num_fragments": _int("How many fragments to split the span into.", 5, 1, 20),
            "role": _role("Role of the messages to look in."),
        },
        ["start_marker", "end_marker"],
    ),
    _function(
        "summarize_fragment",
        "Replace a fragment in the context by a summary focused on what matters for the task. "
        "The original stays stored and restore_fragment brings it back.",
        {
            "fragment_id": _FRAGMENT_ID,
            "focus": _text("What the summary should keep (e.g. 'the latest value of each key')."),
        },
        ["fragment_id", "focus"],
    ),
    _function(
        "fold_fragment",
        "Hide a fragment behind a short marker to remove distracting content from the context. "
        "The original stays stored and restore_fragment brings it back.",
        {"fragment_id": _FRAGMENT_ID},
        ["fragment_id"],
    ),
    _function(
        "restore_fragment",
        "Show the original text of a folded or summarized fragment again.",
        {"fragment_id": _FRAGMENT_ID},
        ["fragment_id"],
    ),
    _function(
        "search_context",
        "Find exact, case-insensitive matches of a query in the original conversation, including "
        "folded or summarized parts. Returns a search id and each match with surrounding text.",
        {
            "query": _text("The exact text to look for (case-insensitive)."),
            "role": _role("Role of the messages to search."),
            "max_results": _int("Most matches to return.", 10, 1, 50),
            "context_size": _int("Characters of surrounding text to show on each side of a match.", 200, 50, 1000),
        },
        ["query"],
    ),
    _function(
        "get_search_detail",
        "Show the matches of an earlier search_context call with more surrounding text.",
        {
            "search_id": _text("The search id returned by search_context."),
            "extended_context": _int("Characters of surrounding text to show on each side of a match.", 500, 100, 2000),
        },
        ["search_id"],
    ),
]

TOOL_NAMES: tuple[str, ...] = tuple(s["function"]["name"] for s in TOOL_SCHEMAS)


def tool_schemas() -> list[dict]:
    """A fresh copy of the six schemas (callers may mutate it).

    >>> [s["function"]["name"] for s in tool_schemas()][:2]
    ['fragment_context', 'summarize_fragment']
    """
    return copy.deepcopy(TOOL_SCHEMAS)
