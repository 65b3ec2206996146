"""`AcmStore`: a reversible, sculptable view over a list of chat messages.

The store never edits the original conversation. It keeps the original messages, a set of
fragments (character spans inside one message, each with a 6-char id and a state), the
searches made so far, and an op log. `render()` builds the visible messages from those:
a visible fragment shows its original text, a folded one a one-line marker, a summarized
one its summary between id-tagged markers. Fragments and searches draw ids from one seeded
stream, so ids are unique across both and reproducible for a seed and op sequence.
Message count, order, roles and every other key are never changed (`extend` only appends
new turns), and with no operations `render()` equals the input exactly.
"""
from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any, Sequence

from rhea.agents.sculptor.errors import (
    FragmentOverlapError,
    FragmentStateError,
    InvalidMessagesError,
    MarkerNotFoundError,
    NothingToUndoError,
    UnknownFragmentError,
    UnknownSearchError,
)
from rhea.agents.sculptor.ids import IdGenerator
from rhea.agents.sculptor.records import (  # noqa: F401 (the records stay importable from here)
    FOLDED,
    SUMMARIZED,
    VISIBLE,
    Fragment,
    OpRecord,
    SearchMatch,
    SearchRecord,
)
from rhea.agents.sculptor.text import find_all, split_span, window

ANY_ROLE = "all"
#: First letter of a fragment's and of a search result's id (the paper's 'f1a2b3', 's1a2b3').
FRAGMENT_PREFIX, SEARCH_PREFIX = "f", "s"
#: Rough English average, used only for the approximate token counts in `stats()`.
CHARS_PER_TOKEN = 4


class AcmStore:
    """Reversible fragment / fold / summarize / restore / search over chat messages.

    >>> store = AcmStore([{"role": "user", "content": "intro. DATA: a=1 b=2 END. question?"}])
    >>> ids = [f.id for f in store.fragment("DATA:", "END.", 1)]
    >>> _ = store.fold(ids[0])
    >>> store.render()[0]["content"]
    'intro. [Folded fragment fcd18f: 18 chars] question?'
    >>> _ = store.restore(ids[0]); store.render() == store.original
    True
    """

    def __init__(self, messages: Sequence[dict], *, seed: int = 0):
        self._original = _validated_copy(messages)
        self._ids = IdGenerator(seed)
        self._fragments: dict[str, Fragment] = {}
        self._searches: dict[str, SearchRecord] = {}
        self._log: list[OpRecord] = []

    # ----------------------------------------------------------------- read access
    @property
    def original(self) -> list[dict]:
        return copy.deepcopy(self._original)

    @property
    def op_log(self) -> tuple[OpRecord, ...]:
        return tuple(self._log)

    @property
    def fragments(self) -> dict[str, Fragment]:
        return dict(self._fragments)

    def fragment_info(self, fragment_id: str) -> Fragment:
        try:
            return self._fragments[fragment_id]
        except KeyError:
            raise UnknownFragmentError(self._unknown_fragment_message(fragment_id)) from None

    def search_result(self, result_id: str) -> tuple[SearchRecord, SearchMatch]:
        """The search and the one match that `result_id` (a result's id from `search`) names."""
        for record in self._searches.values():
            for match in record.matches:
                if match.id and match.id == result_id:
                    return record, match
        known = [m.id for r in self._searches.values() for m in r.matches if m.id]
        shown = ", ".join(known[-10:]) + (f" (and {len(known) - 10} earlier)" if len(known) > 10 else "")
        hint = (f"{result_id!r} is a whole search, not one result; " if result_id in self._searches else "")
        raise UnknownSearchError(
            f"unknown search result id {result_id!r}; {hint}search_context gives each result its own search_id "
            f"(known: {shown or 'none yet'}). Run search_context first and pass one result's search_id"
        )

    def search_record(self, search_id: str) -> SearchRecord:
        try:
            return self._searches[search_id]
        except KeyError:
            known = ", ".join(self._searches) or "none yet"
            raise UnknownSearchError(
                f"unknown search_id {search_id!r}; known search ids: {known}. Run search_context first"
            ) from None

    def render(self) -> list[dict]:
        """The visible messages: copies of the originals with sculpted content."""
        out = []
        for index, message in enumerate(self._original):
            rendered = dict(message)
            rendered["content"] = self._render_content(index)
            out.append(rendered)
        return out

    def stats(self) -> dict:
        """Visible vs original size (chars and approximate tokens), and fragment counts."""
        original = sum(len(m["content"]) for m in self._original)
        visible = sum(len(m["content"]) for m in self.render())
        states = [f.state for f in self._fragments.values()]
        return {
            "messages": len(self._original),
            "original_chars": original,
            "visible_chars": visible,
            "original_tokens_approx": math.ceil(original / CHARS_PER_TOKEN),
            "visible_tokens_approx": math.ceil(visible / CHARS_PER_TOKEN),
            "fragments": len(states),
            "folded": states.count(FOLDED),
            "summarized": states.count(SUMMARIZED),
        }

    # ------------------------------------------------------------------ operations
    def fragment(self, start_marker: str, end_marker: str, num_fragments: int, role: str = "user") -> list[Fragment]:
        """Split the span from `start_marker` through `end_marker` into fragments.

        The span is looked up in the original content of messages with `role` ("all" for
        any), first message first; the end marker must follow the start marker in the
        same message. Fragmenting changes nothing visible.
        """
        index, start, end = self._locate(start_marker, end_marker, role)
        clash = [f.id for f in self._fragments_in(index) if f.start < end and start < f.end]
        if clash:
            raise FragmentOverlapError(
                f"the span from {start_marker!r} to {end_marker!r} overlaps fragment(s) {', '.join(clash)}; "
                "work with those ids or choose markers outside them"
            )
        content = self._original[index]["content"]
        try:
            pieces = split_span(content, start, end, num_fragments)
        except ValueError as exc:
            raise FragmentStateError(str(exc)) from None
        made = [Fragment(self._ids.new(FRAGMENT_PREFIX), index, lo, hi) for lo, hi in pieces]
        for frag in made:
            self._fragments[frag.id] = frag
        # Fragmenting only adds ids: the rendered text stays the same.
        self._log.append(OpRecord("fragment", tuple(f.id for f in made), False))
        return made

    def fold(self, fragment_id: str) -> Fragment:
        """Hide a fragment behind a one-line marker (its summary too, if summarized)."""
        frag = self.fragment_info(fragment_id)
        if frag.state == FOLDED:
            raise FragmentStateError(f"fragment {fragment_id} is already folded; restore_fragment shows it again")
        return self._set_state("fold", frag, FOLDED, None, None)

    def summarize(self, fragment_id: str, summary: str, focus: str) -> Fragment:
        """Show `summary` (made with `focus` in mind) in place of the fragment's text."""
        frag = self.fragment_info(fragment_id)
        if not isinstance(summary, str) or not summary.strip():
            raise FragmentStateError(f"summary for fragment {fragment_id} is empty; nothing to show in its place")
        return self._set_state("summarize", frag, SUMMARIZED, summary.strip(), focus)

    def restore(self, fragment_id: str) -> Fragment:
        """Show a folded or summarized fragment's original text again."""
        frag = self.fragment_info(fragment_id)
        if frag.state == VISIBLE:
            raise FragmentStateError(f"fragment {fragment_id} is already visible (not folded or summarized)")
        return self._set_state("restore", frag, VISIBLE, None, None)

    def search(self, query: str, role: str = "user", max_results: int = 10, context_size: int = 200) -> SearchRecord:
        """Exact, case-insensitive search over the ORIGINAL content (folded text included).

        The record and each match it keeps (at most `max_results`) get their own id.
        """
        matches = []
        for index in self._message_indices(role):
            message = self._original[index]
            for pos in find_all(message["content"], query):
                holder = self._fragment_at(index, pos)
                matches.append(
                    SearchMatch(index, message["role"], pos, pos + len(query),
                                holder.id if holder else None, holder.state if holder else None)
                )
        record_id = self._ids.new(SEARCH_PREFIX)
        shown = tuple(replace(m, id=self._ids.new(SEARCH_PREFIX)) for m in matches[:max_results])
        record = SearchRecord(record_id, query, role, context_size, len(matches), shown)
        self._searches[record.id] = record
        self._log.append(OpRecord("search", (record.id,), False))
        return record

    def snippet(self, match: SearchMatch, radius: int) -> str:
        """The original text around a match, `radius` chars either side."""
        return window(self._original[match.message_index]["content"], match.start, match.end, radius)

    def extend(self, messages: Sequence[dict]) -> int:
        """Append messages (new turns) to the conversation; fragments and searches stay valid.

        Returns the number of messages added. Undo removes them again.
        """
        added = _validated_copy(messages)
        if not added:
            return 0
        self._original.extend(added)
        self._log.append(OpRecord("extend", (), True, undo_data=len(added)))
        return len(added)

    def state_dict(self) -> dict:
        """Everything needed to resume this store (JSON-serializable): messages, fragments,
        searches, the op log with its undo data, and the id stream's state.

        >>> store = AcmStore([{"role": "user", "content": "a <x>b</x> c"}])
        >>> fid = store.fragment("<x>", "</x>", 1)[0].id; _ = store.fold(fid)
        >>> again = AcmStore.from_state_dict(store.state_dict())
        >>> again.render() == store.render(), again.undo().kind, again.render() == again.original
        (True, 'fold', True)
        """
        from rhea.agents.sculptor import state

        return {
            "version": state.STATE_VERSION,
            "messages": self.original,
            "fragments": [state.fragment_to_dict(f) for f in self._fragments.values()],
            "searches": [state.search_to_dict(r) for r in self._searches.values()],
            "op_log": [state.op_to_dict(op) for op in self._log],
            "ids": {"rng": state.rng_state_to_json(self._ids.rng_state()), "issued": sorted(self._ids.issued)},
        }

    @classmethod
    def from_state_dict(cls, saved: dict) -> "AcmStore":
        """A store equal to the one `state_dict()` was taken from."""
        from rhea.agents.sculptor import state

        saved = state.check_version(saved)
        try:
            store = cls(saved["messages"])
            store._fragments = {f.id: f for f in map(state.fragment_from_dict, saved["fragments"])}
            store._searches = {r.id: r for r in map(state.search_from_dict, saved["searches"])}
            store._log = [state.op_from_dict(op) for op in saved["op_log"]]
            store._ids.restore(state.rng_state_from_json(saved["ids"]["rng"]), saved["ids"]["issued"])
        except (KeyError, TypeError, ValueError) as exc:
            raise state.StoreStateError(
                f"store state is malformed ({type(exc).__name__}: {exc}); pass what AcmStore.state_dict() returned"
            ) from exc
        return store

    def undo(self) -> OpRecord:
        """Revert the last operation and return its record."""
        if not self._log:
            raise NothingToUndoError("nothing to undo: the op log is empty")
        op = self._log.pop()
        if op.kind == "fragment":
            for fid in op.target:
                del self._fragments[fid]
        elif op.kind == "search":
            del self._searches[op.target[0]]
        elif op.kind == "extend":
            del self._original[-op.undo_data:]
        else:
            self._fragments[op.target[0]] = op.undo_data
        return op

    # ------------------------------------------------------------------- internals
    def _set_state(self, kind: str, frag: Fragment, state: str, summary: str | None, focus: str | None) -> Fragment:
        new = replace(frag, state=state, summary=summary, focus=focus)
        self._fragments[frag.id] = new
        self._log.append(OpRecord(kind, (frag.id,), True, undo_data=frag))
        return new

    def _render_content(self, index: int) -> str:
        content = self._original[index]["content"]
        parts, cursor = [], 0
        for frag in self._fragments_in(index):
            parts.append(content[cursor:frag.start])
            parts.append(content[frag.start:frag.end] if frag.state == VISIBLE else render_placeholder(frag))
            cursor = frag.end
        parts.append(content[cursor:])
        return "".join(parts)

    def _fragments_in(self, index: int) -> list[Fragment]:
        return sorted((f for f in self._fragments.values() if f.message_index == index), key=lambda f: f.start)

    def fragment_at(self, index: int, pos: int) -> Fragment | None:
        """The fragment (in its current state) holding character `pos` of message `index`, if any."""
        return self._fragment_at(index, pos)

    def _fragment_at(self, index: int, pos: int) -> Fragment | None:
        return next((f for f in self._fragments_in(index) if f.start <= pos < f.end), None)

    def _message_indices(self, role: str) -> list[int]:
        return [i for i, m in enumerate(self._original) if role == ANY_ROLE or m["role"] == role]

    def _locate(self, start_marker: str, end_marker: str, role: str) -> tuple[int, int, int]:
        start_seen = False
        for index in self._message_indices(role):
            content = self._original[index]["content"]
            start = content.find(start_marker)
            if start == -1:
                continue
            start_seen = True
            end = content.find(end_marker, start + len(start_marker))
            if end != -1:
                return index, start, end + len(end_marker)
        where = "any message" if role == ANY_ROLE else f"any {role!r} message"
        if not start_seen:
            raise MarkerNotFoundError(f"start_marker {start_marker!r} not found in {where}; markers must be copied exactly")
        raise MarkerNotFoundError(
            f"end_marker {end_marker!r} not found after start_marker {start_marker!r} in {where}; "
            "both markers must be in the same message, end after start"
        )

    def _unknown_fragment_message(self, fragment_id: str) -> str:
        known = ", ".join(sorted(self._fragments)) or "none yet"
        return f"unknown fragment_id {fragment_id!r}; existing fragment ids: {known}. Use fragment_context to create fragments"


def render_placeholder(frag: Fragment) -> str:
    """What a folded or summarized fragment shows in place of its text."""
    if frag.state == FOLDED:
        return f"[Folded fragment {frag.id}: {frag.chars:,} chars]"
    return (
        f"[Summary of fragment {frag.id} ({frag.chars:,} chars), focus: {frag.focus}]\n"
        f"{frag.summary}\n[End of summary {frag.id}; restore_fragment shows the original]"
    )


def _validated_copy(messages: Sequence[dict]) -> list[dict]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessagesError(
            f"messages must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__}"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidMessagesError(f"messages[{i}] must be a dict, got {type(message).__name__}: {message!r}")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise InvalidMessagesError(f"messages[{i}]['role']={role!r} must be a non-empty str")
        if not isinstance(content, str):
            raise InvalidMessagesError(
                f"messages[{i}]['content'] must be a str, got {type(content).__name__}; "
                "convert structured content to text first"
            )
    return copy.deepcopy(list(messages))
