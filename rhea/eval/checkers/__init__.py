"""Verifiable instructions: the rules whose adherence IAR measures.

Each `Instruction` is one kind of global directive a user can give ("start every response
with 'Indeed'", "no commas", "answer in French"). It knows how to check a reply, how to
phrase itself (and its revocation) as a user would, which *slot* it occupies (two active
instructions in one slot contradict each other, so memory keeps only the newer), and how
to draw seeded parameters. An `InstructionSpec` is an instruction with its parameters.

The check semantics follow Google's IFEval (instruction_following_eval/instructions.py)
wherever IFEval has the same instruction, so IFEval- and MT-Eval-format records can be
scored here (`from_ifeval`, `check_ifeval`); ids we do not implement raise
`UnsupportedInstructionError` instead of passing silently. Deliberate differences from
IFEval: sentences are split by a regex (no nltk punkt), lowercase/uppercase do not also
require English (the language instruction covers that), text whose language cannot be
detected fails the language check instead of passing, and start checks ignore case.

>>> spec = get_instruction("start_word").spec(word="Indeed")
>>> spec.phrase()
"From now on, start every response with the word 'Indeed'."
>>> spec.check("Indeed, Paris is the capital of France.")
True
>>> iar([spec, InstructionSpec("no_comma")], "Indeed, it is.")
5.0

The package is split along its jobs: `text` (counting utilities), `language` (detector),
`registry` (the instruction model and registry), the checker families (`startend`, `length`,
`case`, `format`, `content`; importing them registers their instructions), `sampling`
(pools, conflicts), `adapters` (IFEval / MT-Eval) and `iar` (scoring).
"""
from __future__ import annotations

# The checker families register their instructions on import (order = registration order).
from rhea.eval.checkers import startend  # noqa: F401  isort: skip
from rhea.eval.checkers import length  # noqa: F401  isort: skip
from rhea.eval.checkers import case  # noqa: F401  isort: skip
from rhea.eval.checkers import format  # noqa: F401  isort: skip
from rhea.eval.checkers import content  # noqa: F401  isort: skip
from rhea.eval.checkers.adapters import (check_ifeval, from_ifeval, from_mt_eval, ifeval_id_map,
                                         mt_eval_id_map)
from rhea.eval.checkers.errors import (InstructionArgumentError, InstructionError,
                                       UnknownInstructionError, UnsupportedInstructionError)
from rhea.eval.checkers.format import CONSTRAINED_OPTIONS
from rhea.eval.checkers.iar import adherence, iar, mean_iar
from rhea.eval.checkers.language import LANGUAGE_NAMES, detect_language
from rhea.eval.checkers.registry import (Instruction, InstructionSpec, get_instruction,
                                         list_instructions)
from rhea.eval.checkers.sampling import (END_PHRASES, FORBIDDEN_WORDS, KEYWORD_SETS,
                                         SAMPLEABLE, SAMPLED_LANGUAGES, START_EMOJIS,
                                         START_WORDS, conflicts, sample_compatible)
from rhea.eval.checkers.text import (RELATIONS, compare, count_words, split_sentences,
                                     strip_json_fence)

__all__ = ["CONSTRAINED_OPTIONS", "END_PHRASES", "FORBIDDEN_WORDS", "Instruction",
           "InstructionArgumentError", "InstructionError", "InstructionSpec", "KEYWORD_SETS",
           "LANGUAGE_NAMES", "RELATIONS", "SAMPLEABLE", "SAMPLED_LANGUAGES", "START_EMOJIS",
           "START_WORDS", "UnknownInstructionError", "UnsupportedInstructionError", "adherence",
           "check_ifeval", "compare", "conflicts", "count_words", "detect_language",
           "from_ifeval", "from_mt_eval", "get_instruction", "iar", "ifeval_id_map",
           "list_instructions", "mean_iar", "mt_eval_id_map", "sample_compatible",
           "split_sentences", "strip_json_fence"]
