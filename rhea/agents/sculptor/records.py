"""The store's records: fragments, searches and op-log entries (plain frozen dataclasses)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: A fragment's states.
VISIBLE, FOLDED, SUMMARIZED = "visible", "folded", "summarized"


@dataclass(frozen=True)
class Fragment:
    """A span `[start, end)` of message `message_index`'s original content."""

    id: str
    message_index: int
    start: int
    end: int
    state: str = VISIBLE
    summary: str | None = None
    focus: str | None = None

    @property
    def chars(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SearchMatch:
    """One occurrence of a search query in the original content."""

    message_index: int
    role: str
    start: int
    end: int
    fragment_id: str | None  # the fragment holding the match, if any
    fragment_state: str | None  # its state when the search ran
    id: str = ""  # the result's own id ('s' + 5 hex), what get_search_detail takes


@dataclass(frozen=True)
class SearchRecord:
    """One search_context call: its id, its query, and the matches it showed (each with an id)."""

    id: str
    query: str
    role: str
    context_size: int
    total_matches: int  # before the max_results cap
    matches: tuple[SearchMatch, ...]


@dataclass(frozen=True)
class OpRecord:
    """One entry of the op log; `undo_data` is what `undo()` needs to revert it."""

    kind: str  # "fragment" | "fold" | "summarize" | "restore" | "search" | "extend"
    target: tuple[str, ...]  # fragment ids, or the search id
    changes_view: bool
    undo_data: Any = field(default=None, repr=False, compare=False)
