"""Checkers: letter case."""
from __future__ import annotations

import re

from rhea.eval.checkers.registry import _NONNEG, _register, _relation
from rhea.eval.checkers.text import compare


@_register("lowercase", slot="case",
           phrase="From now on, write every response entirely in lowercase letters; no "
                  "capital letters are allowed.",
           revoke="You no longer need to write only in lowercase.",
           ifeval="change_case:english_lowercase", mt_eval="change_case:lowercase")
def _lowercase(text: str) -> bool:
    return text.islower()


@_register("uppercase", slot="case",
           phrase="From now on, write every response entirely in English capital letters.",
           revoke="You no longer need to write only in capital letters.",
           ifeval="change_case:english_capital", mt_eval="change_case:capital_letter")
def _uppercase(text: str) -> bool:
    return text.isupper()


@_register("capital_word_frequency", slot="capital_words",
           params={"capital_relation": _relation, "capital_frequency": _NONNEG},
           phrase="From now on, use words in all capital letters {capital_relation} "
                  "{capital_frequency} times in every response.",
           revoke="You no longer need to count your all-capital words.",
           sample=lambda rng: {"capital_relation": "at least",
                               "capital_frequency": rng.choice([2, 3])},
           ifeval="change_case:capital_word_frequency")
def _capital_word_frequency(text: str, capital_relation: str, capital_frequency: int) -> bool:
    capitals = [w for w in re.findall(r"\w+", text) if w.isupper()]
    return compare(len(capitals), capital_relation, capital_frequency)
