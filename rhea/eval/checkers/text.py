"""Text utilities the checkers share: counting words and sentences, comparisons."""
from __future__ import annotations

import re

#: Comparison relations accepted by the counting instructions (IFEval uses the first two).
RELATIONS = ("less than", "at least", "at most", "more than", "exactly")

_ABBREVIATIONS = ("mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e",
                  "no", "fig", "approx", "u.s", "a.m", "p.m")


def compare(count: int, relation: str, threshold: int) -> bool:
    """`count <relation> threshold`, e.g. ``compare(3, "at least", 2)`` is True."""
    ops = {"less than": count < threshold, "at least": count >= threshold,
           "at most": count <= threshold, "more than": count > threshold,
           "exactly": count == threshold}
    return ops[relation]


def count_words(text: str) -> int:
    """Words as IFEval counts them (nltk's ``RegexpTokenizer(r"\\w+")``)."""
    return len(re.findall(r"\w+", text))


def split_sentences(text: str) -> list[str]:
    """Split on ``.``/``!``/``?`` followed by space, and on line breaks.

    A regex stand-in for IFEval's punkt-based splitter: common abbreviations ("Dr.",
    "e.g.") and decimals ("3.5") do not end a sentence.

    >>> split_sentences("Dr. Who is 3.5 m tall. Really? Yes!")
    ['Dr. Who is 3.5 m tall.', 'Really?', 'Yes!']
    """
    protected = re.sub(r"(?<=\d)\.(?=\d)", "\0", text)
    abbrev = "|".join(re.escape(a) for a in _ABBREVIATIONS)
    protected = re.sub(rf"\b({abbrev})\.", lambda m: m.group(1) + "\0", protected, flags=re.I)
    pieces = re.split(r"(?<=[.!?])[\"'”’)\]]*\s+|\n+", protected)
    return [p.replace("\0", ".").strip() for p in pieces if re.search(r"\w", p)]


def strip_json_fence(text: str) -> str:
    """Drop a surrounding markdown code fence (```json ... ```), as IFEval does."""
    body = text.strip()
    body = re.sub(r"^```(?:json|JSON|Json)?\s*", "", body)
    return re.sub(r"\s*```$", "", body).strip()


def _first_word(text: str) -> str:
    match = re.search(r"\w+", text.lstrip(" \t\n\"'*#>-"))
    return match.group(0) if match else ""
