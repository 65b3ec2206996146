"""Checkers: how a reply starts and ends (first letter/word/emoji, end phrase, quotes)."""
from __future__ import annotations

from rhea.eval.checkers.registry import _letter, _register, _text
from rhea.eval.checkers.sampling import END_PHRASES, START_EMOJIS, START_WORDS
from rhea.eval.checkers.text import _first_word


@_register("start_letter", slot="start", params={"letter": _letter},
           phrase="From now on, begin every response with the letter '{letter}'.",
           revoke="You no longer need to begin your responses with the letter '{letter}'.",
           sample=lambda rng: {"letter": rng.choice("ABCDEFGHILMNOPRSTW")},
           mt_eval="startend:start_char")
def _start_letter(text: str, letter: str) -> bool:
    # Case-insensitive so that it composes with the lowercase / uppercase instructions.
    first = text.lstrip(" \t\n\"'*#>-")[:1]
    return first.lower() == letter.lower()


@_register("start_word", slot="start", params={"word": _text},
           phrase="From now on, start every response with the word '{word}'.",
           revoke="You no longer need to start your responses with '{word}'.",
           sample=lambda rng: {"word": rng.choice(START_WORDS)})
def _start_word(text: str, word: str) -> bool:
    return _first_word(text).lower() == word.strip().lower()


@_register("start_emoji", slot="start", params={"emoji": _text},
           phrase="From now on, start every response with the emoji {emoji}.",
           revoke="You no longer need to start your responses with {emoji}.",
           sample=lambda rng: {"emoji": rng.choice(START_EMOJIS)},
           mt_eval="startend:start_emoji")
def _start_emoji(text: str, emoji: str) -> bool:
    return text.lstrip().startswith(emoji.strip())


@_register("repeat_prompt", slot="start", params={"prompt_to_repeat": _text},
           phrase="First repeat the request word for word without change, then give your "
                  "answer. The request is: {prompt_to_repeat}",
           revoke="You no longer need to repeat the request before answering.",
           ifeval="combination:repeat_prompt")
def _repeat_prompt(text: str, prompt_to_repeat: str) -> bool:
    return text.strip().lower().startswith(prompt_to_repeat.strip().lower())


@_register("end_phrase", slot="end", params={"end_phrase": _text},
           phrase="From now on, finish every response with the exact phrase "
                  "'{end_phrase}'. No other words should follow it.",
           revoke="You no longer need to end your responses with '{end_phrase}'.",
           sample=lambda rng: {"end_phrase": rng.choice(END_PHRASES)},
           ifeval="startend:end_checker", mt_eval="startend:end_phrase")
def _end_phrase(text: str, end_phrase: str) -> bool:
    return text.strip().strip('"').lower().endswith(end_phrase.strip().lower())


@_register("quotation", slot="wrap",
           phrase="From now on, wrap every entire response in double quotation marks.",
           revoke="You no longer need to wrap your responses in quotation marks.",
           ifeval="startend:quotation")
def _quotation(text: str) -> bool:
    body = text.strip()
    return len(body) > 1 and body[0] == '"' and body[-1] == '"'
