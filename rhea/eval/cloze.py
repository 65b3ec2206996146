"""The cloze question of the fact-QA stage: a reply's sentence with one fact blanked out.

It lives here, in the evaluation layer, because two layers use it: `rhea.training.factqa` builds its
training items with it, and `rhea.eval.fact_recall` asks the held-apart items in the same form
(``--question-form cloze``).

>>> blank_sentence("Hi. The eco cycle uses 9.5 litres of water. Bye.", 23, 26)
'The eco cycle uses ____ litres of water.'
>>> CLOZE_QUESTION.format(sentence="x ____ y")
'Which word or number filled the blank in your earlier reply? "x ____ y"'
"""
from __future__ import annotations

import re

CLOZE_QUESTION = 'Which word or number filled the blank in your earlier reply? "{sentence}"'
BLANK = "____"
_SENTENCE = re.compile(r"\S.*?(?:[.!?](?=\s|$)|(?=\n)|$)")  # a stop followed by a space ends it (not 9.5)


def blank_sentence(text: str, start: int, end: int, max_words: int = 24) -> str:
    """The sentence of `text` holding [start, end) with the span replaced by `BLANK`, cut to `max_words` around it."""
    lo, hi = 0, len(text)
    for m in _SENTENCE.finditer(text):
        if m.start() <= start and end <= m.end():
            lo, hi = m.start(), m.end()
            break
    words = (text[lo:start] + BLANK + text[end:hi]).split()
    at = next(i for i, w in enumerate(words) if BLANK in w)
    half = max_words // 2
    return " ".join(words[max(0, at - half):at + half + 1])
