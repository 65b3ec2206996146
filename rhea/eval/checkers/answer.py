"""Strict and loose checking, and the non-answer gate that fails every rule.

Two readings of a rule, both reported by the instruction-retention suite:

- **strict** (`check_strict`): IFEval's strict check on the reply as it stands, except the
  answer-options rule (``constrained_response``), which passes only when the whole reply is
  one of the options. IFEval's own check passes any reply that *contains* an option, so "My
  answer is yes." followed by a long answer scored as followed.
- **loose** (`check_loose`): IFEval's loose check: the rule passes if it holds for any of the
  reply, the reply without its first line, without its last line, without both, and each of
  those with the markdown asterisks removed; the options rule uses IFEval's containment.

A **non-answer** (`non_answer`) fails every rule in both readings: an empty reply (no letter
or digit), an echo of the question, a reply that is only a question, or degenerate repetition. Without the gate an empty reply
passes "do not use the words ..." and "no commas" for free.

>>> non_answer("", "What is a lake?")
'empty'
>>> non_answer("What is a lake?", "What is a lake?")
'echo'
>>> non_answer("the the the the the the the the the the the the", "Why?")
'repetition'
>>> non_answer("A lake is a large body of still water.", "What is a lake?") is None
True
>>> from rhea.eval.checkers.registry import InstructionSpec
>>> spec = InstructionSpec("constrained_response")
>>> check_strict(spec, "My answer is yes."), check_strict(spec, "My answer is yes. Because...")
(True, False)
>>> check_loose(spec, "My answer is yes. Because...")
True
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

from rhea.eval.checkers.format import CONSTRAINED_OPTIONS
from rhea.eval.checkers.registry import InstructionSpec
from rhea.eval.checkers.text import split_sentences

#: The reasons `non_answer` gives.
NON_ANSWER_REASONS = ("empty", "echo", "question", "repetition")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def non_answer(reply: str, question: str | None = None) -> str | None:
    """Why `reply` is not an answer to `question` ('empty', 'echo', 'question', 'repetition'),
    or None.

    - empty: no letter or digit at all;
    - echo: at most three words longer than the question, and at least 80% of its word pairs
      are the question's (a restated question, not an answer: "Chess is a sport and a game."
      to "Is chess a sport or a game?" is an answer);
    - question: the whole reply is one question ("Why does a cat purr?" to "Why do cats purr?",
      or another question altogether), which answers nothing;
    - repetition: 12+ words of which fewer than 40% of the 3-grams are distinct, or one word
      making up more than half of 8+ words (a degenerate loop).
    """
    words = _words(reply)
    if not words:
        return "empty"
    if question is not None:
        asked = _words(question)
        if asked and len(words) <= len(asked) + 3:
            if len(words) == 1:
                if words == asked:
                    return "echo"
            else:
                pairs = set(zip(asked, asked[1:]))
                said = list(zip(words, words[1:]))
                if sum(p in pairs for p in said) / len(said) >= 0.8:
                    return "echo"
    stripped = reply.strip().rstrip("*_`\"' ")
    if stripped.endswith("?") and len(split_sentences(stripped)) == 1:
        return "question"
    if len(words) >= 12:
        grams = list(zip(words, words[1:], words[2:]))
        if len(set(grams)) / len(grams) < 0.4:
            return "repetition"
    if len(words) >= 8 and max(words.count(w) for w in set(words)) > len(words) / 2:
        return "repetition"
    return None


def _exact_option(reply: str) -> bool:
    return reply.strip().strip("\"'*`_ \n\t") in CONSTRAINED_OPTIONS


#: Strict readings that differ from IFEval's check (documented above).
_STRICT = {"constrained_response": lambda spec, reply: _exact_option(reply)}


def check_strict(spec: InstructionSpec, reply: str) -> bool:
    """The strict reading of `spec` on `reply` (no non-answer gate: see `judge_reply`)."""
    override = _STRICT.get(spec.id)
    return bool(override(spec, reply)) if override else spec.check(reply)


def loose_variants(reply: str) -> list[str]:
    """IFEval's loose variants: reply, minus first line, minus last line, minus both; each
    also with ``*`` removed."""
    lines = reply.split("\n")
    bases = [reply, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(),
             "\n".join(lines[1:-1]).strip()]
    return bases + [b.replace("*", "") for b in bases]


def check_loose(spec: InstructionSpec, reply: str) -> bool:
    """IFEval's loose reading: `spec` holds for some non-empty loose variant of `reply`."""
    return any(v.strip() and spec.check(v) for v in loose_variants(reply))


def judge_reply(specs: Iterable[InstructionSpec], reply: str, question: str | None = None
                ) -> dict:
    """Strict and loose pass/fail of every spec, keyed by `InstructionSpec.key`, after the
    non-answer gate: ``{"strict": {...}, "loose": {...}, "non_answer": reason | None}``.

    >>> judge_reply([InstructionSpec("no_comma")], "", "Why?")["strict"]
    {'no_comma()': False}
    """
    specs: Sequence[InstructionSpec] = list(specs)
    reason = non_answer(reply, question)
    return {"strict": {s.key: reason is None and check_strict(s, reply) for s in specs},
            "loose": {s.key: reason is None and check_loose(s, reply) for s in specs},
            "non_answer": reason}
