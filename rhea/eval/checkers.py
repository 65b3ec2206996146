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
"""
from __future__ import annotations

import collections
import json
import random
import re
import string
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence


class InstructionError(ValueError):
    """Base class for bad instruction ids or parameters."""


class UnknownInstructionError(InstructionError):
    """An instruction id that is not registered here."""


class UnsupportedInstructionError(InstructionError):
    """An IFEval / MT-Eval instruction id (or parameter) this module cannot check."""


class InstructionArgumentError(InstructionError):
    """A missing, extra or out-of-range parameter for an instruction."""


# ---------------------------------------------------------------------------- text helpers

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


# ------------------------------------------------------------------------ language detector

# Script ranges (inclusive code points). A script that only one supported language uses
# decides by itself; shared scripts (Latin, Cyrillic, Arabic, Devanagari) fall through to
# stopword profiles.
_SCRIPTS = (
    (0x0041, 0x024F, "latin"), (0x1E00, 0x1EFF, "latin"), (0x0400, 0x04FF, "cyrillic"),
    (0x0600, 0x06FF, "arabic"), (0x0900, 0x097F, "devanagari"), (0x0980, 0x09FF, "bn"),
    (0x0A00, 0x0A7F, "pa"), (0x0A80, 0x0AFF, "gu"), (0x0B80, 0x0BFF, "ta"),
    (0x0C00, 0x0C7F, "te"), (0x0C80, 0x0CFF, "kn"), (0x0E00, 0x0E7F, "th"),
    (0xAC00, 0xD7AF, "ko"), (0x1100, 0x11FF, "ko"), (0x3040, 0x30FF, "ja"),
    (0x4E00, 0x9FFF, "han"), (0x0370, 0x03FF, "el"),
)

_STOPWORDS = {
    "en": "the and is are of to in that it for with as was on this be not you have",
    "fr": "le la les et est des une un du que dans pour pas qui sur avec au ce sont",
    "de": "der die und ist das nicht ein eine zu den mit von sich auch auf für dem ich",
    "es": "el la los las y es de que en un una por para con no se del al lo como",
    "it": "il lo la gli le e di che è un una per non con del della sono si anche come",
    "pt": "o a os as e é de que em um uma para com não do da no na se por são",
    "nl": "de het een en van is dat niet op te zijn met voor ook maar er als die",
    "vi": "của và là các có không những được trong người một này cho với đã khi",
    "sw": "na ya wa kwa ni za katika la kuwa hii kama lakini pia hiyo watu sana",
    "fi": "ja on ei että se oli hän mutta kun ovat tai myös joka sekä kuin tämä",
    "ru": "и в не на что это как он я с по но из у же вы так все было",
    "bg": "и на е да се за от не това са че като по с но ще има един",
    "ar": "في من على أن إلى هذا التي الذي عن مع كان هذه ما لا هو",
    "fa": "است و در به که این را با می از برای یک آن شود",
    "ur": "ہے کے کی میں اور سے کا کو یہ ہیں نہیں تھا بھی",
    "hi": "है के की में और से का को यह हैं नहीं था भी एक",
    "mr": "आहे आणि या हे की नाही त्या च्या आहेत होते तो ती व",
    "ne": "छ र को मा हो गर्न पनि छन् यो थियो भएको गरेको",
}
_PROFILES = {lang: frozenset(words.split()) for lang, words in _STOPWORDS.items()}
_SHARED_SCRIPTS = {
    "latin": ("en", "fr", "de", "es", "it", "pt", "nl", "vi", "sw", "fi"),
    "cyrillic": ("ru", "bg"), "arabic": ("ar", "fa", "ur"), "devanagari": ("hi", "mr", "ne"),
}

#: ISO 639-1 code -> English name, for every language `detect_language` can return.
LANGUAGE_NAMES = {
    "en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian",
    "pt": "Portuguese", "nl": "Dutch", "vi": "Vietnamese", "sw": "Swahili", "fi": "Finnish",
    "ru": "Russian", "bg": "Bulgarian", "ar": "Arabic", "fa": "Persian", "ur": "Urdu",
    "hi": "Hindi", "mr": "Marathi", "ne": "Nepali", "bn": "Bengali", "pa": "Punjabi",
    "gu": "Gujarati", "ta": "Tamil", "te": "Telugu", "kn": "Kannada", "th": "Thai",
    "ko": "Korean", "ja": "Japanese", "zh": "Chinese", "el": "Greek",
}
_PUNCT = string.punctuation + "«»“”‘’„–—…।॥،؛؟、。，！？：；"


def _script(char: str) -> str | None:
    code = ord(char)
    for lo, hi, name in _SCRIPTS:
        if lo <= code <= hi:
            return name
    return None


def detect_language(text: str) -> str | None:
    """Guess the ISO 639-1 language of `text`, or None when there is no evidence.

    Two steps: the dominant writing system among the letters (Hangul → ko, Thai → th,
    kana → ja, Han alone → zh, ...), then, for scripts several supported languages share,
    the language whose stopword list matches most tokens. Only `LANGUAGE_NAMES` are
    supported; text in others comes back as the nearest supported language or None.

    >>> detect_language("Le chat est sur la table et il dort.")
    'fr'
    >>> detect_language("12345") is None
    True
    """
    counts = collections.Counter(s for s in map(_script, text) if s)
    if not counts:
        return None
    if counts.get("ja"):  # Japanese mixes kana with Han; kana alone marks it.
        return "ja"
    script = counts.most_common(1)[0][0]
    if script == "han":
        return "zh"
    if script not in _SHARED_SCRIPTS:
        return script
    tokens = [t.strip(_PUNCT).lower() for t in text.split()]
    hits = {lang: sum(t in _PROFILES[lang] for t in tokens) for lang in _SHARED_SCRIPTS[script]}
    best = max(hits.values())
    winners = [lang for lang, n in hits.items() if n == best]
    # No stopword at all, or a tie, is not evidence for any one language.
    return winners[0] if best > 0 and len(winners) == 1 else None


# ---------------------------------------------------------------------- parameter validation

def _int_at_least(minimum: int) -> Callable[[str, Any], None]:
    def validate(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return validate


def _text(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}={value!r} must be a non-empty string")


def _text_list(name: str, value: Any) -> None:
    if (isinstance(value, str) or not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, str) and v.strip() for v in value)):
        raise ValueError(f"{name}={value!r} must be a non-empty list of non-empty strings")


def _relation(name: str, value: Any) -> None:
    if value not in RELATIONS:
        raise ValueError(f"{name}={value!r} must be one of {RELATIONS}")


def _language(name: str, value: Any) -> None:
    if value not in LANGUAGE_NAMES:
        raise UnsupportedInstructionError(
            f"{name}={value!r} is not a language detect_language supports; "
            f"use one of {sorted(LANGUAGE_NAMES)}")


def _letter(name: str, value: Any) -> None:
    if not (isinstance(value, str) and len(value) == 1 and value.isalpha()):
        raise ValueError(f"{name}={value!r} must be a single letter such as 'A'")


def _char(name: str, value: Any) -> None:
    if not (isinstance(value, str) and len(value) == 1 and not value.isspace()):
        raise ValueError(f"{name}={value!r} must be a single visible character such as 'e'")


_POS = _int_at_least(1)
_NONNEG = _int_at_least(0)


# ------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class Instruction:
    """One kind of verifiable instruction; parameters are passed as keyword arguments.

    >>> inst = get_instruction("word_count")
    >>> inst.phrase(relation="at most", num_words=50)
    'From now on, keep every response to at most 50 words.'
    >>> inst.check("Short answer.", relation="at most", num_words=50)
    True
    """

    id: str
    slot: str
    params: Mapping[str, Callable[[str, Any], None]]
    checker: Callable[..., bool] = field(repr=False)
    phrase_template: str | Callable[..., str] = field(repr=False)
    revoke_template: str | Callable[..., str] = field(repr=False)
    sampler: Callable[[random.Random], dict] = field(repr=False)

    def validate(self, kwargs: Mapping[str, Any]) -> None:
        """Raise `InstructionArgumentError` naming any missing, extra or bad parameter."""
        missing = set(self.params) - set(kwargs)
        extra = set(kwargs) - set(self.params)
        if missing or extra:
            raise InstructionArgumentError(
                f"instruction {self.id!r} takes parameters {sorted(self.params)}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}")
        for name, validate in self.params.items():
            try:
                validate(name, kwargs[name])
            except InstructionError:
                raise
            except ValueError as err:
                raise InstructionArgumentError(f"instruction {self.id!r}: {err}") from None

    def check(self, text: str, **kwargs: Any) -> bool:
        """True when `text` follows this instruction with these parameters."""
        self.validate(kwargs)
        return bool(self.checker(text, **kwargs))

    def phrase(self, **kwargs: Any) -> str:
        """How a user gives this instruction, e.g. "From now on, ..."."""
        self.validate(kwargs)
        return _render(self.phrase_template, kwargs)

    def revoke_phrase(self, **kwargs: Any) -> str:
        """How a user takes this instruction back."""
        self.validate(kwargs)
        return _render(self.revoke_template, kwargs)

    def sample_kwargs(self, rng: random.Random) -> dict:
        """Draw parameters from `rng` (same rng state → same parameters)."""
        kwargs = self.sampler(rng)
        self.validate(kwargs)
        return kwargs

    def spec(self, **kwargs: Any) -> "InstructionSpec":
        return InstructionSpec(self.id, kwargs)


def _render(template: str | Callable[..., str], kwargs: Mapping[str, Any]) -> str:
    if callable(template):
        return template(**kwargs)
    shown = {k: ", ".join(f"'{x}'" for x in v) if isinstance(v, (list, tuple)) else v
             for k, v in kwargs.items()}
    return template.format(**shown)


@dataclass(frozen=True)
class InstructionSpec:
    """An instruction id with its parameters: what a conversation turn makes active.

    >>> s = InstructionSpec("no_comma")
    >>> s.check("No commas here."), s.slot
    (True, 'punctuation')
    """

    id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kwargs", dict(self.kwargs))
        self.instruction.validate(self.kwargs)

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def instruction(self) -> Instruction:
        return get_instruction(self.id)

    @property
    def slot(self) -> str:
        return self.instruction.slot

    @property
    def key(self) -> str:
        """A stable string naming id and parameters, e.g. ``start_word(word='Indeed')``."""
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.kwargs.items()))
        return f"{self.id}({args})"

    def check(self, text: str) -> bool:
        return self.instruction.check(text, **self.kwargs)

    def phrase(self) -> str:
        return self.instruction.phrase(**self.kwargs)

    def revoke_phrase(self) -> str:
        return self.instruction.revoke_phrase(**self.kwargs)

    def to_dict(self) -> dict:
        return {"id": self.id, "kwargs": dict(self.kwargs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "InstructionSpec":
        return cls(data["id"], data.get("kwargs") or {})


_REGISTRY: dict[str, Instruction] = {}
_IFEVAL_IDS: dict[str, str] = {}
_MT_EVAL_IDS: dict[str, str] = {}


def _register(id: str, *, slot: str, params: Mapping[str, Callable] | None = None,
              phrase: str | Callable, revoke: str | Callable,
              sample: Callable[[random.Random], dict] | None = None,
              ifeval: str | None = None, mt_eval: str | None = None):
    def decorate(check: Callable[..., bool]) -> Callable[..., bool]:
        sampler = sample or _needs_task_parameters(id, params or {})
        _REGISTRY[id] = Instruction(id, slot, dict(params or {}), check, phrase, revoke, sampler)
        if ifeval:
            _IFEVAL_IDS[ifeval] = id
        if mt_eval:
            _MT_EVAL_IDS[mt_eval] = id
        return check
    return decorate


def _needs_task_parameters(id: str, params: Mapping) -> Callable[[random.Random], dict]:
    def sample(rng: random.Random) -> dict:
        if params:
            raise InstructionArgumentError(
                f"instruction {id!r} takes task-specific parameters {sorted(params)} that "
                "cannot be drawn at random; build it with get_instruction(id).spec(...)")
        return {}
    return sample


def get_instruction(id: str) -> Instruction:
    """The registered instruction named `id` (see `list_instructions()`)."""
    try:
        return _REGISTRY[id]
    except KeyError:
        raise UnknownInstructionError(
            f"unknown instruction id {id!r}; choose one of {list_instructions()}") from None


def list_instructions() -> list[str]:
    """Ids of every registered instruction, sorted."""
    return sorted(_REGISTRY)


# --------------------------------------------------------------------------- sampling pools

START_WORDS = ("Indeed", "Certainly", "Absolutely", "Well", "Honestly", "Interestingly")
START_EMOJIS = ("🙂", "🚀", "🌟", "📌", "✅", "🔥", "🎯", "💡")
END_PHRASES = ("Is there anything else I can help with?", "Any other questions?",
               "Hope this helps!", "That is all for now.",
               "Let me know if you have additional questions.")
KEYWORD_SETS = (("history", "future"), ("balance", "practice"), ("example", "simple"),
                ("today", "people"), ("important", "change"))
FORBIDDEN_WORDS = (("very", "really"), ("basically", "actually"), ("thing", "stuff"),
                   ("just", "quite"))
#: Languages the retention suite samples: Latin-script ones the detector separates well.
SAMPLED_LANGUAGES = ("fr", "de", "es", "it", "pt")


def _choice(pool: Sequence) -> Callable[[random.Random], Any]:
    return lambda rng: rng.choice(pool)


# ------------------------------------------------------------------------------ start / end

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


# ---------------------------------------------------------------------------------- length

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


# ------------------------------------------------------------------------------------- case

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


# ----------------------------------------------------------------------------------- format

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


# ---------------------------------------------------------------------------------- content

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


# ------------------------------------------------------------------------------- conflicts

# Slot pairs that cannot both hold: a JSON reply cannot start with an emoji, a French reply
# cannot contain English keywords, a word limit may forbid a sentence minimum.
_CONFLICTING_SLOTS = {
    frozenset(p) for p in [
        ("wrap", "start"), ("wrap", "postscript"), ("length", "sentences"),
        ("case", "capital_words"), ("sentences", "paragraphs"), ("length", "paragraphs"),
    ]
}
_FORMAT_COMPATIBLE = {"case", "forbidden", "keywords"}
# Pairs of instructions that clash although their slots usually do not.
_CONFLICTING_IDS = {frozenset(("constrained_response", "lowercase")),
                    frozenset(("constrained_response", "uppercase"))}
_LANGUAGE_COMPATIBLE = {"length", "sentences", "paragraphs", "bullets", "punctuation",
                        "placeholders", "highlights", "wrap", "title", "format"}


def conflicts(a: InstructionSpec, b: InstructionSpec) -> bool:
    """True when `a` and `b` cannot both be followed (same slot, or clashing slots).

    >>> conflicts(InstructionSpec("lowercase"), InstructionSpec("uppercase"))
    True
    """
    if a.slot == b.slot or frozenset((a.id, b.id)) in _CONFLICTING_IDS:
        return True
    slots = {a.slot, b.slot}
    if "format" in slots:
        return not (slots - {"format"}) <= _FORMAT_COMPATIBLE
    if "language" in slots:
        return not (slots - {"language"}) <= _LANGUAGE_COMPATIBLE
    return frozenset(slots) in _CONFLICTING_SLOTS


def sample_compatible(rng: random.Random, n: int,
                      pool: Sequence[str] | Sequence[InstructionSpec] | None = None
                      ) -> list[InstructionSpec]:
    """Draw `n` mutually compatible specs from `pool` (ids or specs; default: all sampleable).

    >>> specs = sample_compatible(random.Random(0), 3)
    >>> len(specs), any(conflicts(a, b) for a in specs for b in specs if a is not b)
    (3, False)
    """
    candidates = list(pool) if pool is not None else SAMPLEABLE
    order = rng.sample(candidates, len(candidates))
    chosen: list[InstructionSpec] = []
    for item in order:
        spec = item if isinstance(item, InstructionSpec) else InstructionSpec(
            item, get_instruction(item).sample_kwargs(rng))
        if not any(conflicts(spec, c) for c in chosen):
            chosen.append(spec)
        if len(chosen) == n:
            return chosen
    raise InstructionArgumentError(
        f"cannot draw n={n} mutually compatible instructions from a pool of "
        f"{len(candidates)}; lower n or widen the pool")


#: Instructions whose parameters `sample_kwargs` can draw on its own (global-instruction
#: style; the IFEval-only ones need task-specific parameters such as `prompt_to_repeat`).
SAMPLEABLE = ("start_letter", "start_word", "start_emoji", "end_phrase", "quotation",
              "word_count", "sentence_count", "paragraph_count", "lowercase", "uppercase",
              "json_format", "bullet_count", "title", "highlight_count", "section_count",
              "two_responses", "constrained_response", "placeholder_count", "postscript",
              "include_keywords", "exclude_keywords", "keyword_frequency", "no_comma",
              "response_language")


# ------------------------------------------------------------------------------ IFEval ids

def ifeval_id_map() -> dict[str, str]:
    """IFEval instruction id → our instruction id, for every IFEval id we can check."""
    return dict(_IFEVAL_IDS)


def mt_eval_id_map() -> dict[str, str]:
    """MT-Eval global-instruction id → our instruction id (parameters are ours to draw)."""
    return dict(_MT_EVAL_IDS)


def from_ifeval(instruction_id: str, kwargs: Mapping[str, Any] | None = None
                ) -> InstructionSpec:
    """The spec for one IFEval (``input_data.jsonl``) instruction id and its kwargs.

    Keys whose value is None are dropped (the Hugging Face copy of IFEval pads every
    kwargs dict with them).

    >>> from_ifeval("length_constraints:number_words", {"relation": "at least", "num_words": 300}).key
    "word_count(num_words=300, relation='at least')"
    """
    if instruction_id not in _IFEVAL_IDS:
        raise UnsupportedInstructionError(
            f"IFEval instruction {instruction_id!r} has no checker here; supported: "
            f"{sorted(_IFEVAL_IDS)}")
    clean = {k: v for k, v in (kwargs or {}).items() if v is not None}
    return InstructionSpec(_IFEVAL_IDS[instruction_id], clean)


def from_mt_eval(instruction_id: str, rng: random.Random) -> InstructionSpec:
    """A spec for an MT-Eval global-instruction id, parameters drawn from `rng`."""
    if instruction_id not in _MT_EVAL_IDS:
        raise UnsupportedInstructionError(
            f"MT-Eval instruction {instruction_id!r} has no checker here; supported: "
            f"{sorted(_MT_EVAL_IDS)}")
    inst = get_instruction(_MT_EVAL_IDS[instruction_id])
    return inst.spec(**inst.sample_kwargs(rng))


def check_ifeval(record: Mapping[str, Any], response: str, *,
                 on_unsupported: str = "raise") -> dict:
    """Score one IFEval record (``instruction_id_list`` + ``kwargs``) against `response`.

    Returns ``{"results": {ifeval_id: bool}, "unsupported": [ids], "follow_all": bool|None}``;
    ``follow_all`` is None when nothing could be checked. With ``on_unsupported="report"``
    unknown ids are listed instead of raising; they never count as followed.

    >>> rec = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    >>> check_ifeval(rec, "Fine.")["follow_all"]
    True
    """
    if on_unsupported not in ("raise", "report"):
        raise ValueError(f"on_unsupported={on_unsupported!r} must be 'raise' or 'report'")
    ids = record["instruction_id_list"]
    all_kwargs = record.get("kwargs") or [{}] * len(ids)
    if len(all_kwargs) != len(ids):
        raise InstructionArgumentError(
            f"IFEval record has {len(ids)} instruction ids but {len(all_kwargs)} kwargs "
            "dicts; they must be parallel lists")
    results, unsupported = {}, []
    for inst_id, kwargs in zip(ids, all_kwargs):
        try:
            spec = from_ifeval(inst_id, kwargs)
        except UnsupportedInstructionError:
            if on_unsupported == "raise":
                raise
            unsupported.append(inst_id)
            continue
        results[inst_id] = spec.check(response)
    follow_all = all(results.values()) if results else None
    return {"results": results, "unsupported": unsupported, "follow_all": follow_all}


# ---------------------------------------------------------------------------------- scoring

def adherence(specs: Iterable[InstructionSpec], reply: str) -> dict[str, bool]:
    """Per-instruction pass/fail of `reply`, keyed by `InstructionSpec.key`."""
    return {spec.key: spec.check(reply) for spec in specs}


def iar(specs: Iterable[InstructionSpec], reply: str) -> float | None:
    """Instruction adherence rate on the paper's 0–10 scale for one reply.

    10 × (active instructions satisfied) / (active instructions); None when none is active.

    >>> iar([InstructionSpec("no_comma"), InstructionSpec("lowercase")], "all good.")
    10.0
    """
    results = adherence(specs, reply)
    if not results:
        return None
    return 10.0 * sum(results.values()) / len(results)


def mean_iar(per_turn: Iterable[float | None]) -> float | None:
    """Mean of per-turn IARs, skipping turns with no active instruction (None)."""
    values = [v for v in per_turn if v is not None]
    return sum(values) / len(values) if values else None
