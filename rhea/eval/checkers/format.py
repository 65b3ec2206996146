"""Checkers: layout and format (JSON, bullets, title, highlights, sections, fixed options)."""
from __future__ import annotations

import json
import re

from rhea.eval.checkers.registry import _POS, _register, _text
from rhea.eval.checkers.text import strip_json_fence


@_register("json_format", slot="format",
           phrase="From now on, format every entire response as valid JSON; you may wrap "
                  "it in a ```json code block.",
           revoke="You no longer need to answer in JSON.",
           ifeval="detectable_format:json_format", mt_eval="format:json_format")
def _json_format(text: str) -> bool:
    try:
        json.loads(strip_json_fence(text))
    except ValueError:
        return False
    return True


def _bullet_lines(text: str) -> int:
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes)


@_register("bullet_count", slot="bullets", params={"num_bullets": _POS},
           phrase="From now on, every response must contain exactly {num_bullets} markdown "
                  "bullet points, such as:\n* This is point 1.\n* This is point 2",
           revoke="You no longer need to use exactly {num_bullets} bullet points.",
           sample=lambda rng: {"num_bullets": rng.choice([2, 3, 4, 5])},
           ifeval="detectable_format:number_bullet_lists", mt_eval="format:bullet_list")
def _bullet_count(text: str, num_bullets: int) -> bool:
    return _bullet_lines(text) == num_bullets


@_register("title", slot="title",
           phrase="From now on, give every response a title wrapped in double angular "
                  "brackets, such as <<poem of joy>>.",
           revoke="You no longer need to give your responses a <<title>>.",
           ifeval="detectable_format:title")
def _title(text: str) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", text))


@_register("highlight_count", slot="highlights", params={"num_highlights": _POS},
           phrase="From now on, highlight at least {num_highlights} sections of every "
                  "response with markdown, i.e. *highlighted section*.",
           revoke="You no longer need to highlight sections with markdown.",
           sample=lambda rng: {"num_highlights": rng.choice([1, 2, 3])},
           ifeval="detectable_format:number_highlighted_sections")
def _highlight_count(text: str, num_highlights: int) -> bool:
    single = [h for h in re.findall(r"\*[^\n\*]*\*", text) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", text) if h[2:-2].strip()]
    return len(single) + len(double) >= num_highlights


@_register("section_count", slot="sections",
           params={"section_spliter": _text, "num_sections": _POS},
           phrase="From now on, every response must have {num_sections} sections; mark the "
                  "beginning of each with '{section_spliter} X' (X its number).",
           revoke="You no longer need to split your responses into sections.",
           sample=lambda rng: {"section_spliter": rng.choice(["Section", "SECTION"]),
                               "num_sections": rng.choice([2, 3])},
           ifeval="detectable_format:multiple_sections")
def _section_count(text: str, section_spliter: str, num_sections: int) -> bool:
    sections = re.split(r"\s?" + re.escape(section_spliter.strip()) + r"\s?\d+\s?", text)
    return len(sections) - 1 >= num_sections


@_register("two_responses", slot="format",
           phrase="From now on, give two different responses every time, separated by six "
                  "asterisk symbols: ******.",
           revoke="You no longer need to give two responses.",
           ifeval="combination:two_responses", mt_eval="combination:two_responses")
def _two_responses(text: str) -> bool:
    parts = text.split("******")
    kept = []
    for i, part in enumerate(parts):
        if part.strip():
            kept.append(part.strip())
        elif 0 < i < len(parts) - 1:
            return False
    return len(kept) == 2 and kept[0] != kept[1]


CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


@_register("constrained_response", slot="format",
           phrase="From now on, answer with one of the following options: "
                  + ", ".join(f"'{o}'" for o in CONSTRAINED_OPTIONS),
           revoke="You no longer need to answer with those fixed options.",
           ifeval="detectable_format:constrained_response",
           mt_eval="format:constrained_response")
def _constrained_response(text: str) -> bool:
    return any(option in text.strip() for option in CONSTRAINED_OPTIONS)
