"""Sampling: the parameter pools instructions draw from, which instructions conflict, and
drawing a mutually compatible set."""
from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from rhea.eval.checkers.errors import InstructionArgumentError
from rhea.eval.checkers.registry import InstructionSpec, get_instruction


# --------------------------------------------------------------------------- sampling pools

START_WORDS = ("Indeed", "Certainly", "Absolutely", "Well", "Honestly", "Interestingly")
START_EMOJIS = ("🙂", "🚀", "🌟", "📌", "✅", "🔥", "🎯", "💡")
END_PHRASES = ("Is there anything else I can help with?", "Any other questions?",
               "Hope this helps!", "That is all for now.",
               "Let me know if you have additional questions.")
KEYWORD_SETS = (("history", "future"), ("balance", "practice"), ("example", "simple"),
                ("today", "people"), ("important", "change"))
FORBIDDEN_WORDS = (("very", "really"), ("basically", "actually"), ("thing", "stuff"),
                   ("just", "quite"))
#: Languages the retention suite samples: Latin-script ones the detector separates well.
SAMPLED_LANGUAGES = ("fr", "de", "es", "it", "pt")


def _choice(pool: Sequence) -> Callable[[random.Random], Any]:
    return lambda rng: rng.choice(pool)


# ------------------------------------------------------------------------------- conflicts

# Slot pairs that cannot both hold: a JSON reply cannot start with an emoji, a French reply
# cannot contain English keywords, a word limit may forbid a sentence minimum.
_CONFLICTING_SLOTS = {
    frozenset(p) for p in [
        ("wrap", "start"), ("wrap", "postscript"), ("length", "sentences"),
        ("case", "capital_words"), ("sentences", "paragraphs"), ("length", "paragraphs"),
    ]
}
_FORMAT_COMPATIBLE = {"case", "forbidden", "keywords"}
# Pairs of instructions that clash although their slots usually do not.
_CONFLICTING_IDS = {frozenset(("constrained_response", "lowercase")),
                    frozenset(("constrained_response", "uppercase"))}
_LANGUAGE_COMPATIBLE = {"length", "sentences", "paragraphs", "bullets", "punctuation",
                        "placeholders", "highlights", "wrap", "title", "format"}


def conflicts(a: InstructionSpec, b: InstructionSpec) -> bool:
    """True when `a` and `b` cannot both be followed (same slot, or clashing slots).

    >>> conflicts(InstructionSpec("lowercase"), InstructionSpec("uppercase"))
    True
    """
    if a.slot == b.slot or frozenset((a.id, b.id)) in _CONFLICTING_IDS:
        return True
    slots = {a.slot, b.slot}
    if "format" in slots:
        return not (slots - {"format"}) <= _FORMAT_COMPATIBLE
    if "language" in slots:
        return not (slots - {"language"}) <= _LANGUAGE_COMPATIBLE
    return frozenset(slots) in _CONFLICTING_SLOTS


def sample_compatible(rng: random.Random, n: int,
                      pool: Sequence[str] | Sequence[InstructionSpec] | None = None
                      ) -> list[InstructionSpec]:
    """Draw `n` mutually compatible specs from `pool` (ids or specs; default: all sampleable).

    >>> specs = sample_compatible(random.Random(0), 3)
    >>> len(specs), any(conflicts(a, b) for a in specs for b in specs if a is not b)
    (3, False)
    """
    candidates = list(pool) if pool is not None else SAMPLEABLE
    order = rng.sample(candidates, len(candidates))
    chosen: list[InstructionSpec] = []
    for item in order:
        spec = item if isinstance(item, InstructionSpec) else InstructionSpec(
            item, get_instruction(item).sample_kwargs(rng))
        if not any(conflicts(spec, c) for c in chosen):
            chosen.append(spec)
        if len(chosen) == n:
            return chosen
    raise InstructionArgumentError(
        f"cannot draw n={n} mutually compatible instructions from a pool of "
        f"{len(candidates)}; lower n or widen the pool")


#: Instructions whose parameters `sample_kwargs` can draw on its own (global-instruction
#: style; the IFEval-only ones need task-specific parameters such as `prompt_to_repeat`).
SAMPLEABLE = ("start_letter", "start_word", "start_emoji", "end_phrase", "quotation",
              "word_count", "sentence_count", "paragraph_count", "lowercase", "uppercase",
              "json_format", "bullet_count", "title", "highlight_count", "section_count",
              "two_responses", "constrained_response", "placeholder_count", "postscript",
              "include_keywords", "exclude_keywords", "keyword_frequency", "no_comma",
              "response_language")
