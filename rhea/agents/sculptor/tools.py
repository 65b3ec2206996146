"""`SculptorToolbox`: the six Sculptor tools over an `AcmStore`, called by name.

Every call returns a JSON string, the tool message the model reads next. Problems the
model can fix — unknown tool, arguments that break the schema, unknown ids, markers not
found, wrong fragment state — come back as `{"error": "..."}` instead of raising, so a
bad call costs the model one turn, never the loop.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from rhea.agents.sculptor.errors import AcmError, ToolArgumentError, UnknownToolError
from rhea.agents.sculptor.schemas import TOOL_NAMES, TOOL_SCHEMAS, tool_schemas
from rhea.agents.sculptor.store import AcmStore, SearchRecord
from rhea.agents.sculptor.summarizer import summarize_text
from rhea.agents.sculptor.validation import validate_arguments
from rhea.agents.toolcalls import loads_lenient
from rhea.backends.llm import TextGenerator

_SCHEMA_BY_NAME = {s["function"]["name"]: s for s in TOOL_SCHEMAS}


@dataclass(frozen=True)
class ToolOutcome:
    """What one call did: the tool message, its error (if any), whether the view changed."""

    content: str
    error: str | None
    changed_view: bool
    error_type: str | None = None  # the error's class name, e.g. "ToolArgumentError"


class SculptorToolbox:
    """The six Sculptor tools bound to one store and one summarizer.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> store = AcmStore([{"role": "user", "content": "<doc>old notes</doc> Q?"}])
    >>> box = SculptorToolbox(store, ScriptedGenerator([]))
    >>> json.loads(box.call("fragment_context", {"start_marker": "<doc>", "end_marker": "</doc>",
    ...                                          "num_fragments": 1}))["fragments"][0]["chars"]
    20
    >>> box.call("fold_fragment", '{"fragment_id": "nope"}')[:60]
    '{"error": "unknown fragment_id \\'nope\\'; existing fragment ids'
    """

    def __init__(self, store: AcmStore, summarizer: TextGenerator, *, summary_max_new_tokens: int = 256,
                 preview_chars: int = 60):
        if not isinstance(store, AcmStore):
            raise TypeError(f"store must be an AcmStore, got {type(store).__name__}")
        if not callable(getattr(summarizer, "generate", None)):
            raise TypeError(f"summarizer must be a TextGenerator (with .generate), got {type(summarizer).__name__}")
        self.store = store
        self.summarizer = summarizer
        self.summary_max_new_tokens = summary_max_new_tokens
        self.preview_chars = preview_chars
        #: ``inner_budget`` records of the summary prompts cut to the summarizer's window
        self.budget_records: list[dict] = []
        self._handlers: dict[str, Callable[..., dict]] = {
            "fragment_context": self._fragment_context,
            "summarize_fragment": self._summarize_fragment,
            "fold_fragment": self._fold_fragment,
            "restore_fragment": self._restore_fragment,
            "search_context": self._search_context,
            "get_search_detail": self._get_search_detail,
        }

    def schemas(self) -> list[dict]:
        """The tools' OpenAI function schemas (for `apply_chat_template(tools=...)`)."""
        return tool_schemas()

    def call(self, name: str, arguments: dict | str | None = None) -> str:
        """Run tool `name` and return its JSON result (or `{"error": ...}`)."""
        return self.execute(name, arguments).content

    def execute(self, name: str, arguments: dict | str | None = None) -> ToolOutcome:
        """Like `call`, also telling whether it failed and whether the visible context changed."""
        ops_before = len(self.store.op_log)
        try:
            result = self._dispatch(name, arguments)
        except AcmError as exc:
            return ToolOutcome(_dump({"error": str(exc)}), str(exc), False, type(exc).__name__)
        changed = any(op.changes_view for op in self.store.op_log[ops_before:])
        return ToolOutcome(_dump(result), None, changed)

    # ------------------------------------------------------------------ dispatch
    def _dispatch(self, name: Any, arguments: Any) -> dict:
        if name not in self._handlers:
            raise UnknownToolError(f"unknown tool {name!r}; available tools: {', '.join(TOOL_NAMES)}")
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = loads_lenient(arguments) if arguments.strip() else {}
            except ValueError as exc:
                raise ToolArgumentError(f"arguments of {name} are not valid JSON ({exc})") from None
        clean = validate_arguments(_SCHEMA_BY_NAME[name], arguments)
        return self._handlers[name](**clean)

    # --------------------------------------------------------------------- tools
    def _fragment_context(self, start_marker: str, end_marker: str, num_fragments: int, role: str) -> dict:
        made = self.store.fragment(start_marker, end_marker, num_fragments, role)
        content = self.store.original[made[0].message_index]["content"]
        return {
            "status": "fragmented",
            "message_index": made[0].message_index,
            "fragments": [
                {"fragment_id": f.id, "chars": f.chars, "preview": self._preview(content[f.start:f.end])}
                for f in made
            ],
        }

    def _summarize_fragment(self, fragment_id: str, focus: str) -> dict:
        frag = self.store.fragment_info(fragment_id)
        text = self.store.original[frag.message_index]["content"][frag.start:frag.end]
        summary = summarize_text(self.summarizer, text, focus, max_new_tokens=self.summary_max_new_tokens,
                                 record=self.budget_records)
        done = self.store.summarize(fragment_id, summary, focus)
        return {"status": "summarized", "fragment_id": done.id, "original_chars": done.chars,
                "summary_chars": len(done.summary), **self._sizes()}

    def _fold_fragment(self, fragment_id: str) -> dict:
        done = self.store.fold(fragment_id)
        return {"status": "folded", "fragment_id": done.id, "hidden_chars": done.chars, **self._sizes()}

    def _restore_fragment(self, fragment_id: str) -> dict:
        done = self.store.restore(fragment_id)
        return {"status": "restored", "fragment_id": done.id, "restored_chars": done.chars, **self._sizes()}

    def _search_context(self, query: str, role: str, max_results: int, context_size: int) -> dict:
        record = self.store.search(query, role, max_results, context_size)
        return self._search_result(record, context_size)

    def _get_search_detail(self, search_id: str, extended_context: int) -> dict:
        # The paper's schema: "Get detailed context for a search result by its ID" — one result.
        record, match = self.store.search_result(search_id)
        holder = self.store.fragment_at(match.message_index, match.start)
        return {
            "search_id": match.id,
            "query": record.query,
            "message_index": match.message_index,
            "role": match.role,
            "position": match.start,
            "fragment_id": holder.id if holder else None,
            "fragment_state": holder.state if holder else None,
            "extended_context": extended_context,
            "text": self.store.snippet(match, extended_context),
        }

    # ------------------------------------------------------------------- helpers
    def _search_result(self, record: SearchRecord, radius: int) -> dict:
        return {
            "query": record.query,
            "total_matches": record.total_matches,
            "shown": len(record.matches),
            "results": [
                {
                    "search_id": m.id,
                    "message_index": m.message_index,
                    "role": m.role,
                    "position": m.start,
                    "fragment_id": m.fragment_id,
                    "fragment_state": m.fragment_state,
                    "text": self.store.snippet(m, radius),
                }
                for m in record.matches
            ],
        }

    def _preview(self, text: str) -> str:
        half = self.preview_chars // 2
        return text if len(text) <= self.preview_chars else f"{text[:half]} … {text[-half:]}"

    def _sizes(self) -> dict:
        stats = self.store.stats()
        return {"context_chars": stats["visible_chars"], "original_chars_total": stats["original_chars"]}


def _dump(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False)
