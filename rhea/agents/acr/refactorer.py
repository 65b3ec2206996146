"""The refactorer: executes the router's operator on the history.

The prompt is the paper's (appendix C.3): the shared system prompt (Figure 8) and the
operator's prompt (Figures 9-14) filled with ``{task_description}``, ``{history}`` and
``{previous_context}`` (the previous refactored context, "None" when there is none). The
current query is not a placeholder of these prompts, so the LLM refactorer never sees it.

LLM contract: the reply must hold one non-empty ``<summary>…</summary>`` block; its text
becomes the refactored context that replaces the history. Fallback as the paper specifies
(appendix C): when the block is missing, unclosed or empty, the raw model output (stripped)
becomes the refactored context (``source="fallback-raw"``); only an empty output keeps the
original history (``source="fallback-original"``). Either way the reason is recorded.

Three operators also have a deterministic implementation (`rhea.agents.acr.deterministic`),
used only when asked for (``deterministic=True``); the paper runs every operator through
the refactorer model.

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
from rhea.agents.acr.history import HistoryTurn, fit_history_prompt, format_history, task_description
from rhea.agents.acr.operators import (ATTENTION_ANCHOR, NOISE_FILTER, NONE, PATH_PRUNE, REFACTORER_SYSTEM, check_operator,
                                       refactor_user_prompt)
from rhea.backends.llm import TextGenerator

_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL | re.IGNORECASE)
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


def refactor_messages(operator: str, turns: list[HistoryTurn], task: str = "", previous_context: str | None = None) -> list[dict]:
    """The refactorer's prompt for `operator`: Figure 8 as system message, the operator's
    prompt (Figures 9-14) with its placeholders filled as user message."""
    return [{"role": "system", "content": REFACTORER_SYSTEM},
            {"role": "user", "content": refactor_user_prompt(operator, task_description(task), format_history(turns),
                                                             previous_context)}]


@dataclass
class RefactorResult:
    """What an operator did. Exactly one of `context` (text replacing the history) and `keep`
    (turn indices kept verbatim) is set, unless the history is left as is (both None);
    `anchor` is text restated next to the question."""

    operator: str
    source: str  # "none" | "deterministic" | "refactorer" | "fallback-raw" | "fallback-original"
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

    def as_text(self, turns: list[HistoryTurn]) -> str | None:
        """The refactored history as one text (what becomes ``{previous_context}`` next time):
        the context, or the kept turns, with the anchor appended; None when nothing changed."""
        if not self.changed:
            return None
        if self.context is not None:
            body = self.context
        else:
            kept = [t for t in turns if self.keep is None or t.index in self.keep]
            body = format_history(kept)
        return f"{body}\n{self.anchor}" if self.anchor else body


class Refactorer:
    """Runs operators through `generator` (the prompt-only base model, the refactorer LoRA, or a
    teacher), or deterministically where a deterministic version exists and ``deterministic=True``.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> r = Refactorer(ScriptedGenerator(["<summary>The room is 7.</summary>"]))
    >>> r.refactor("fact_rectify", [HistoryTurn(0, "Room 3.", "ok"), HistoryTurn(1, "No, room 7.", "ok")], "Room?").context
    'The room is 7.'
    """

    def __init__(self, generator: TextGenerator | None, *, deterministic: bool = False, tau: float = 0.2,
                 scorer: str = "bm25", embedder: Any = None, anchor_window: int = 6, max_new_tokens: int = 256,
                 temperature: float = 0.0):
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
        self.temperature = float(temperature)

    def refactor(self, operator: str, turns: list[HistoryTurn], query: str = "", task: str = "", *,
                 previous_context: str | None = None, instructions: list[str] = (),
                 use_llm: bool | None = None, record: list | None = None) -> RefactorResult:
        """Apply `operator`. The LLM version sees `task`, `turns` and `previous_context`; `query`
        and `instructions` are used only by the deterministic versions (noise_filter's relevance
        scores, attention_anchor's constraints). `use_llm` forces (True) or forbids (False) the
        LLM version; by default it is used unless ``deterministic`` is on and the operator has a
        deterministic version. The LLM's prompt is fitted to its window
        (`rhea.agents.acr.history.fit_history_prompt`: the oldest turns give way first); a cut
        appends its ``inner_budget`` record to `record`."""
        operator = check_operator(operator)
        if operator == NONE:
            return RefactorResult(NONE, "none")
        llm = use_llm if use_llm is not None else not (self.deterministic and operator in DETERMINISTIC_OPERATORS)
        if not llm:
            if operator not in DETERMINISTIC_OPERATORS:
                raise ACRConfigError(f"operator {operator!r} has no deterministic version (only {DETERMINISTIC_OPERATORS})")
            return self._deterministic(operator, turns, query, task, instructions, "deterministic")
        if self.generator is None:
            raise ACRConfigError(f"operator {operator!r} needs an LLM refactorer; pass a generator to Refactorer")

        def build(shown: list[HistoryTurn]) -> list[dict]:
            return refactor_messages(operator, shown, task, previous_context)

        messages = fit_history_prompt(self.generator, build, turns, self.max_new_tokens,
                                      call=f"acr.refactorer.{operator}", record=record)
        raw = self.generator.generate(messages, max_new_tokens=self.max_new_tokens, temperature=self.temperature)
        text = parse_summary(raw)
        if text is not None:
            return RefactorResult(operator, "refactorer", context=text, raw=raw)
        reason = "no closed, non-empty <summary>…</summary> block in the refactorer output"
        if raw.strip():
            return RefactorResult(operator, "fallback-raw", context=raw.strip(),
                                  fallback_reason=reason + "; the raw output is the refactored context (paper, appendix C)",
                                  raw=raw)
        return RefactorResult(operator, "fallback-original", fallback_reason="empty refactorer output; original history kept",
                              raw=raw)

    def _deterministic(self, operator: str, turns, query, task, instructions, source: str) -> RefactorResult:
        if operator == NOISE_FILTER:
            sel = det.noise_filter(turns, query, tau=self.tau, scorer=self.scorer, embedder=self.embedder)
            return RefactorResult(operator, source, keep=sel.keep, notes=sel.notes, scores=sel.scores)
        if operator == PATH_PRUNE:
            sel = det.path_prune(turns)
            return RefactorResult(operator, source, keep=sel.keep, notes=sel.notes)
        anchor = det.attention_anchor(turns, instructions=list(instructions), window=self.anchor_window,
                                      task=task_description(task))
        return RefactorResult(operator, source, anchor=anchor)
