"""The six Sculptor tools as OpenAI function-calling JSON schemas, as the paper prints them.

Names, descriptions, parameters, defaults, limits and `required` lists are the Sculptor
paper's appendix H (Figures 14-19, arXiv 2508.04664), word for word. The id examples read
'f1a2b3' / 's1a2b3' where the extracted text shows 'fla2b3' / 'sla2b3' (an 'l' for a '1').
Two places differ, see docs/reports/fidelity.md (Sculptor):

- Figure 17 (`summarize_fragment`) is cut off after the `focus` property in the paper; its
  `required` list is not printed. Both properties are required here (a summary needs its focus).
- string parameters carry ``"minLength": 1`` (the paper's have none): an empty marker or
  query would match everywhere, so it is refused with a message instead.

These dicts are what `tokenizer.apply_chat_template(messages, tools=TOOL_SCHEMAS)` and
OpenAI-compatible endpoints take.
"""
from __future__ import annotations

import copy

#: The paper's role enum for fragment_context and search_context ("all": any role).
ROLES = ["user", "assistant", "all"]


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
    return {"type": "integer", "default": default, "minimum": minimum, "maximum": maximum, "description": description}


def _role(description: str) -> dict:
    return {"type": "string", "enum": ROLES, "default": "user", "description": description}


def _text(description: str) -> dict:
    return {"type": "string", "description": description, "minLength": 1}


TOOL_SCHEMAS: list[dict] = [
    _function(
        "fragment_context",
        "Fragment conversation content between specified markers into manageable pieces. Useful for "
        "breaking down long text sections for detailed analysis.",
        {
            "start_marker": _text("Start marker text to identify the beginning of content to fragment"),
            "end_marker": _text("End marker text to identify the end of content to fragment"),
            "num_fragments": _int("Number of fragments to create (default: 5)", 5, 1, 20),
            "role": _role("Which role's messages to search in (default: user)"),
        },
        ["start_marker", "end_marker"],
    ),
    _function(
        "summarize_fragment",
        "Summarize a conversation fragment using LLM to compress content while preserving key information. "
        "Supports focus-oriented summarization.",
        {
            "fragment_id": _text("ID of the fragment to summarize (e.g., 'f1a2b3')"),
            "focus": _text("Focus area for the summary (e.g., 'technical details', 'key decisions', "
                           "'action items', 'main points', 'problems', 'solutions')"),
        },
        ["fragment_id", "focus"],
    ),
    _function(
        "fold_fragment",
        "Fold (hide) a conversation fragment to reduce visible context length. The content is preserved "
        "and can be expanded later.",
        {"fragment_id": _text("ID of the fragment to fold (e.g., 'f1a2b3')")},
        ["fragment_id"],
    ),
    _function(
        "restore_fragment",
        "Restore a fragment to its original content from ACM storage. Works for both summarized and "
        "folded fragments.",
        {"fragment_id": _text("ID of the fragment to restore (e.g., 'f1a2b3')")},
        ["fragment_id"],
    ),
    _function(
        "search_context",
        "Search tool for finding exact text matches in conversation history.",
        {
            "query": _text("Exact text to search for in conversation history"),
            "role": _role("Filter by message role (default: user)"),
            "max_results": _int("Maximum number of results to return", 10, 1, 50),
            "context_size": _int("Context characters before/after match", 200, 50, 1000),
        },
        ["query"],
    ),
    _function(
        "get_search_detail",
        "Get detailed context for a search result by its ID. Retrieves extended context around the search "
        "match position.",
        {
            "search_id": _text("Search result ID from search_context (e.g., 's1a2b3')"),
            "extended_context": _int("Number of characters to show before and after the match (default: 500)",
                                     500, 100, 2000),
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
