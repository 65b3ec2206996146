"""Checkers: content (placeholders, postscript, keywords, letters, commas, language)."""
from __future__ import annotations

import re
from typing import Sequence

from rhea.eval.checkers.language import LANGUAGE_NAMES, detect_language
from rhea.eval.checkers.registry import (_POS, _char, _language, _register, _relation, _text,
                                        _text_list)
from rhea.eval.checkers.sampling import FORBIDDEN_WORDS, KEYWORD_SETS, SAMPLED_LANGUAGES
from rhea.eval.checkers.text import compare


@_register("placeholder_count", slot="placeholders", params={"num_placeholders": _POS},
           phrase="From now on, every response must contain at least {num_placeholders} "
                  "placeholders in square brackets, such as [address].",
           revoke="You no longer need to include [placeholders].",
           sample=lambda rng: {"num_placeholders": rng.choice([2, 3])},
           ifeval="detectable_content:number_placeholders", mt_eval="content:placeholder")
def _placeholder_count(text: str, num_placeholders: int) -> bool:
    return len(re.findall(r"\[.*?\]", text)) >= num_placeholders


@_register("postscript", slot="postscript", params={"postscript_marker": _text},
           phrase="From now on, end every response with a postscript starting with "
                  "{postscript_marker}",
           revoke="You no longer need to add a {postscript_marker} postscript.",
           sample=lambda rng: {"postscript_marker": rng.choice(["P.S.", "P.P.S"])},
           ifeval="detectable_content:postscript")
def _postscript(text: str, postscript_marker: str) -> bool:
    marker = postscript_marker.strip().lower()
    # IFEval's patterns: tolerate a space inside "P. S." / "P. P. S".
    pattern = {"p.p.s": r"\s*p\.\s?p\.\s?s.*$", "p.s.": r"\s*p\.\s?s\..*$"}.get(
        marker, r"\s*" + re.escape(marker) + r".*$")
    return bool(re.findall(pattern, text.lower(), flags=re.MULTILINE))


@_register("include_keywords", slot="keywords", params={"keywords": _text_list},
           phrase="From now on, include the keywords {keywords} in every response.",
           revoke="You no longer need to include the keywords {keywords}.",
           sample=lambda rng: {"keywords": list(rng.choice(KEYWORD_SETS))},
           ifeval="keywords:existence", mt_eval="keywords:existence")
def _include_keywords(text: str, keywords: Sequence[str]) -> bool:
    return all(re.search(re.escape(k), text, flags=re.IGNORECASE) for k in keywords)


@_register("exclude_keywords", slot="forbidden", params={"forbidden_words": _text_list},
           phrase="From now on, do not include the words {forbidden_words} in any response.",
           revoke="You may use the words {forbidden_words} again.",
           sample=lambda rng: {"forbidden_words": list(rng.choice(FORBIDDEN_WORDS))},
           ifeval="keywords:forbidden_words")
def _exclude_keywords(text: str, forbidden_words: Sequence[str]) -> bool:
    return not any(re.search(r"\b" + re.escape(w) + r"\b", text, flags=re.IGNORECASE)
                   for w in forbidden_words)


@_register("keyword_frequency", slot="keyword_frequency",
           params={"keyword": _text, "relation": _relation, "frequency": _POS},
           phrase="From now on, use the word '{keyword}' {relation} {frequency} times in "
                  "every response.",
           revoke="You no longer need to repeat the word '{keyword}'.",
           sample=lambda rng: {"keyword": rng.choice(["simply", "clearly", "notably"]),
                               "relation": "at least", "frequency": rng.choice([2, 3])},
           ifeval="keywords:frequency")
def _keyword_frequency(text: str, keyword: str, relation: str, frequency: int) -> bool:
    count = len(re.findall(re.escape(keyword), text, flags=re.IGNORECASE))
    return compare(count, relation, frequency)


@_register("letter_frequency", slot="letter_frequency",
           params={"letter": _char, "let_relation": _relation, "let_frequency": _POS},
           phrase="From now on, the letter '{letter}' should appear {let_relation} "
                  "{let_frequency} times in every response.",
           revoke="You no longer need to count the letter '{letter}'.",
           sample=lambda rng: {"letter": rng.choice("zqxj"), "let_relation": "less than",
                               "let_frequency": rng.choice([2, 3])},
           ifeval="keywords:letter_frequency")
def _letter_frequency(text: str, letter: str, let_relation: str, let_frequency: int) -> bool:
    return compare(text.lower().count(letter.lower()), let_relation, let_frequency)


@_register("no_comma", slot="punctuation",
           phrase="From now on, do not use any commas in your responses.",
           revoke="You may use commas again.",
           ifeval="punctuation:no_comma", mt_eval="punctuation:no_comma")
def _no_comma(text: str) -> bool:
    return "," not in text


@_register("response_language", slot="language", params={"language": _language},
           phrase=lambda language: (f"From now on, respond only in {LANGUAGE_NAMES[language]}; "
                                    "no other language is allowed."),
           revoke=lambda language: (f"You no longer need to respond in "
                                    f"{LANGUAGE_NAMES[language]}."),
           sample=lambda rng: {"language": rng.choice(SAMPLED_LANGUAGES)},
           ifeval="language:response_language", mt_eval="language:response_language")
def _response_language(text: str, language: str) -> bool:
    # Unlike IFEval (which counts undetectable text as followed), no evidence is a failure.
    return detect_language(text) == language
