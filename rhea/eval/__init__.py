"""Evaluation: verifiable instruction checkers (IAR), benchmark loaders, an LLM judge, and
seeded suites that a runner drives turn by turn.

>>> from rhea.eval import get_suite, InstructionSpec, iar
>>> iar([InstructionSpec("no_comma")], "No commas at all.")
10.0
>>> get_suite("efficiency").generate(n_turns=3, seed=0)[0].turns[0].kind
'query'
"""
from rhea.eval.checkers import (Instruction, InstructionError, InstructionSpec,
                                UnknownInstructionError, UnsupportedInstructionError,
                                adherence, check_ifeval, detect_language, from_ifeval,
                                from_mt_eval, get_instruction, iar, list_instructions, mean_iar)
from rhea.eval.judge import Judge, Judgment, parse_rating
from rhea.eval.loaders import DataFormatError
from rhea.eval.runner import BenchError, run_suite, write_outputs
from rhea.eval.suites import (Episode, Suite, SuiteConfigError, SuiteTurn, UnknownSuiteError,
                              get_suite, list_suites)

__all__ = ["Instruction", "InstructionError", "InstructionSpec", "UnknownInstructionError",
           "UnsupportedInstructionError", "adherence", "check_ifeval", "detect_language",
           "from_ifeval", "from_mt_eval", "get_instruction", "iar", "list_instructions",
           "mean_iar", "Judge", "Judgment", "parse_rating", "DataFormatError", "Episode",
           "Suite", "SuiteConfigError", "SuiteTurn", "UnknownSuiteError", "get_suite",
           "list_suites", "BenchError", "run_suite", "write_outputs"]
