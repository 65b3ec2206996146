"""JSON-friendly views of the store's records, for saving a session and loading it back.

`AcmStore.state_dict()` uses these to write fragments, searches and the op log (with what
`undo()` needs) as plain dicts and lists; `AcmStore.load_state_dict()` reads them back, so
a loaded store renders, undoes and issues ids exactly as the saved one would have.
"""
from __future__ import annotations

from typing import Any

from rhea.agents.sculptor.errors import AcmError
from rhea.agents.sculptor.records import Fragment, OpRecord, SearchMatch, SearchRecord

#: Bumped when the layout changes, so an old file fails with a clear message.
STATE_VERSION = 1


class StoreStateError(AcmError):
    """A saved store state that cannot be loaded (wrong version, missing or malformed keys)."""


def fragment_to_dict(frag: Fragment) -> dict:
    return {"id": frag.id, "message_index": frag.message_index, "start": frag.start, "end": frag.end,
            "state": frag.state, "summary": frag.summary, "focus": frag.focus}


def fragment_from_dict(data: dict) -> Fragment:
    return Fragment(str(data["id"]), int(data["message_index"]), int(data["start"]), int(data["end"]),
                    str(data["state"]), data.get("summary"), data.get("focus"))


def search_to_dict(record: SearchRecord) -> dict:
    return {"id": record.id, "query": record.query, "role": record.role, "context_size": record.context_size,
            "total_matches": record.total_matches,
            "matches": [{"message_index": m.message_index, "role": m.role, "start": m.start, "end": m.end,
                         "fragment_id": m.fragment_id, "fragment_state": m.fragment_state, "id": m.id}
                        for m in record.matches]}


def search_from_dict(data: dict) -> SearchRecord:
    matches = tuple(SearchMatch(int(m["message_index"]), str(m["role"]), int(m["start"]), int(m["end"]),
                                m.get("fragment_id"), m.get("fragment_state"), str(m.get("id", "")))
                    for m in data["matches"])
    return SearchRecord(str(data["id"]), str(data["query"]), str(data["role"]), int(data["context_size"]),
                        int(data["total_matches"]), matches)


def op_to_dict(op: OpRecord) -> dict:
    undo: Any = op.undo_data
    if isinstance(undo, Fragment):
        undo = {"fragment": fragment_to_dict(undo)}
    elif undo is not None:
        undo = {"count": int(undo)}
    return {"kind": op.kind, "target": list(op.target), "changes_view": op.changes_view, "undo": undo}


def op_from_dict(data: dict) -> OpRecord:
    undo = data.get("undo")
    if isinstance(undo, dict) and "fragment" in undo:
        undo = fragment_from_dict(undo["fragment"])
    elif isinstance(undo, dict):
        undo = int(undo["count"])
    return OpRecord(str(data["kind"]), tuple(data["target"]), bool(data["changes_view"]), undo)


def rng_state_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def rng_state_from_json(data: list) -> tuple:
    version, internal, gauss = data
    return version, tuple(internal), gauss


def check_version(state: Any) -> dict:
    if not isinstance(state, dict):
        raise StoreStateError(f"store state must be a dict from AcmStore.state_dict(), got {type(state).__name__}")
    if state.get("version") != STATE_VERSION:
        raise StoreStateError(
            f"store state version {state.get('version')!r} is not {STATE_VERSION}; save it again with this rhea version"
        )
    return state
