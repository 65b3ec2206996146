"""A small offline language detector (writing system, then stopword profiles)."""
from __future__ import annotations

import collections
import string

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
