"""Checkers: length in words, sentences and paragraphs."""
from __future__ import annotations

import re

from rhea.eval.checkers.registry import _POS, _register, _relation, _text
from rhea.eval.checkers.text import _first_word, compare, count_words, split_sentences


@_register("word_count", slot="length", params={"relation": _relation, "num_words": _POS},
           phrase="From now on, keep every response to {relation} {num_words} words.",
           revoke="You no longer need to keep your responses to {relation} {num_words} words.",
           sample=lambda rng: rng.choice([{"relation": "at most", "num_words": n}
                                          for n in (40, 60, 80)]
                                         + [{"relation": "at least", "num_words": n}
                                            for n in (120, 150)]),
           ifeval="length_constraints:number_words",
           mt_eval="length_constraints:number_words")
def _word_count(text: str, relation: str, num_words: int) -> bool:
    return compare(count_words(text), relation, num_words)


@_register("sentence_count", slot="sentences",
           params={"relation": _relation, "num_sentences": _POS},
           phrase="From now on, every response should contain {relation} {num_sentences} "
                  "sentences.",
           revoke="You no longer need to use {relation} {num_sentences} sentences.",
           sample=lambda rng: {"relation": rng.choice(["at most", "at least"]),
                               "num_sentences": rng.choice([3, 4, 5])},
           ifeval="length_constraints:number_sentences",
           mt_eval="length_constraints:number_sentences")
def _sentence_count(text: str, relation: str, num_sentences: int) -> bool:
    return compare(len(split_sentences(text)), relation, num_sentences)


def _divided_paragraphs(text: str) -> list[str] | None:
    """Paragraphs separated by the markdown divider ***; None if one is empty inside."""
    parts = re.split(r"\s?\*\*\*\s?", text)
    kept = []
    for i, part in enumerate(parts):
        if part.strip():
            kept.append(part)
        elif 0 < i < len(parts) - 1:
            return None
    return kept


@_register("paragraph_count", slot="paragraphs", params={"num_paragraphs": _POS},
           phrase="From now on, every response must have exactly {num_paragraphs} "
                  "paragraphs, separated from each other by the markdown divider ***.",
           revoke="You no longer need to write {num_paragraphs} paragraphs separated by ***.",
           sample=lambda rng: {"num_paragraphs": rng.choice([2, 3])},
           ifeval="length_constraints:number_paragraphs")
def _paragraph_count(text: str, num_paragraphs: int) -> bool:
    paragraphs = _divided_paragraphs(text)
    return paragraphs is not None and len(paragraphs) == num_paragraphs


@_register("nth_paragraph_first_word", slot="paragraphs",
           params={"num_paragraphs": _POS, "nth_paragraph": _POS, "first_word": _text},
           phrase="From now on, write exactly {num_paragraphs} paragraphs separated by two "
                  "new lines, and start paragraph {nth_paragraph} with the word "
                  "'{first_word}'.",
           revoke="You no longer need that paragraph layout or the word '{first_word}'.",
           ifeval="length_constraints:nth_paragraph_first_word")
def _nth_paragraph_first_word(text: str, num_paragraphs: int, nth_paragraph: int,
                              first_word: str) -> bool:
    paragraphs = [p for p in re.split(r"\n\n", text) if p.strip()]
    if len(paragraphs) != num_paragraphs or nth_paragraph > len(paragraphs):
        return False
    return _first_word(paragraphs[nth_paragraph - 1]).lower() == first_word.strip().lower()
