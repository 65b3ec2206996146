"""The refactorer: executes the router's operator on the history.

LLM contract: the reply must hold one non-empty ``<summary>…</summary>`` block; its text
becomes the refactored context that replaces the history. Documented fallback when the
block is missing, unclosed or empty: the operator's deterministic implementation when it
has one (noise_filter, path_prune, attention_anchor), otherwise the original history is
kept unchanged (as NONE would). Either way the reason is recorded.

>>> parse_summary("Sure! <summary>Room is 7.</summary>")
'Room is 7.'
>>> parse_summary("Room is 7.") is None
True
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rhea.agents.acr import deterministic as det
from rhea.agents.acr.errors import ACRConfigError, RefactorerOutputError
from rhea.agents.acr.history import HistoryTurn, controller_user_message
from rhea.agents.acr.operators import ATTENTION_ANCHOR, NOISE_FILTER, NONE, PATH_PRUNE, check_operator, refactor_prompt
from rhea.backends.llm import TextGenerator

_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL | re.IGNORECASE)
REFACTOR_ASK = "Write the refactored context inside <summary></summary>."
#: Operators with a deterministic implementation.
DETERMINISTIC_OPERATORS = (NOISE_FILTER, PATH_PRUNE, ATTENTION_ANCHOR)


def parse_summary(raw: str, *, strict: bool = False) -> str | None:
    """The text of the first ``<summary>`` block, stripped; None (or `RefactorerOutputError`
    with ``strict=True``) when there is no closed, non-empty block."""
    if not isinstance(raw, str):
        raise TypeError(f"refactorer output must be a str, got {type(raw).__name__}")
    match = _SUMMARY.search(raw)
    text = match.group(1).strip() if match else ""
    if text:
        return text
    if strict:
        why = "an empty <summary> block" if match else "no closed <summary>…</summary> block"
        raise RefactorerOutputError(f"refactorer output has {why}: {raw[:200]!r}; the model must wrap its answer in <summary></summary>")
    return None


def refactor_messages(operator: str, turns: list[HistoryTurn], query: str, task: str = "") -> list[dict]:
    """The refactorer's prompt for `operator`."""
    return [{"role": "system", "content": refactor_prompt(operator)},
            {"role": "user", "content": controller_user_message(turns, query, task, REFACTOR_ASK)}]


@dataclass
class RefactorResult:
    """What an operator did. Exactly one of `context` (text replacing the history) and `keep`
    (turn indices kept verbatim) is set, unless the history is left as is (both None);
    `anchor` is text restated next to the question."""

    operator: str
    source: str  # "none" | "deterministic" | "refactorer" | "fallback-deterministic" | "fallback-original"
    context: str | None = None
    keep: list[int] | None = None
    notes: dict[int, str] = field(default_factory=dict)
    anchor: str = ""
    fallback_reason: str | None = None
    raw: str = ""
    scores: dict[int, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.context is not None or self.keep is not None or bool(self.anchor)


class Refactorer:
    """Runs operators: deterministically where possible (``deterministic=True``), else through
    `generator` (the prompt-only base model, the refactorer LoRA, or a teacher).

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> r = Refactorer(ScriptedGenerator(["<summary>The room is 7.</summary>"]))
    >>> r.refactor("fact_rectification", [HistoryTurn(0, "Room 3.", "ok"), HistoryTurn(1, "No, room 7.", "ok")], "Room?").context
    'The room is 7.'
    """

    def __init__(self, generator: TextGenerator | None, *, deterministic: bool = True, tau: float = 0.2,
                 scorer: str = "bm25", embedder: Any = None, anchor_window: int = 6, max_new_tokens: int = 256):
        if generator is not None and not callable(getattr(generator, "generate", None)):
            raise TypeError(f"refactorer generator must be a TextGenerator (with .generate), got {type(generator).__name__}")
        if scorer not in det.SCORERS:
            raise ACRConfigError(f"scorer={scorer!r} must be one of {det.SCORERS}")
        if not 0.0 <= tau <= 1.0:
            raise ACRConfigError(f"tau={tau} must be in [0, 1]")
        self.generator = generator
        self.deterministic = bool(deterministic)
        self.tau, self.scorer, self.embedder = tau, scorer, embedder
        self.anchor_window = anchor_window
        self.max_new_tokens = max_new_tokens

    def refactor(self, operator: str, turns: list[HistoryTurn], query: str, task: str = "", *,
                 instructions: list[str] = (), use_llm: bool | None = None) -> RefactorResult:
        """Apply `operator`. `use_llm` forces (True) or forbids (False) the LLM version; by
        default the deterministic version is used when one exists and ``deterministic`` is on."""
        check_operator(operator)
        if operator == NONE:
            return RefactorResult(NONE, "none")
        llm = use_llm if use_llm is not None else not (self.deterministic and operator in DETERMINISTIC_OPERATORS)
        if not llm:
            return self._deterministic(operator, turns, query, instructions, "deterministic")
        if self.generator is None:
            raise ACRConfigError(f"operator {operator!r} needs an LLM refactorer; pass a generator to Refactorer")
        raw = self.generator.generate(refactor_messages(operator, turns, query, task), max_new_tokens=self.max_new_tokens)
        text = parse_summary(raw)
        if text is not None:
            return RefactorResult(operator, "refactorer", context=text, raw=raw)
        reason = "no closed, non-empty <summary>…</summary> block in the refactorer output"
        if operator in DETERMINISTIC_OPERATORS:
            result = self._deterministic(operator, turns, query, instructions, "fallback-deterministic")
            result.fallback_reason, result.raw = reason, raw
            return result
        return RefactorResult(operator, "fallback-original", fallback_reason=reason + "; original history kept", raw=raw)

    def _deterministic(self, operator: str, turns, query, instructions, source: str) -> RefactorResult:
        if operator == NOISE_FILTER:
            sel = det.noise_filter(turns, query, tau=self.tau, scorer=self.scorer, embedder=self.embedder)
            return RefactorResult(operator, source, keep=sel.keep, notes=sel.notes, scores=sel.scores)
        if operator == PATH_PRUNE:
            sel = det.path_prune(turns)
            return RefactorResult(operator, source, keep=sel.keep, notes=sel.notes)
        anchor = det.attention_anchor(turns, instructions=list(instructions), window=self.anchor_window)
        return RefactorResult(operator, source, anchor=anchor)
