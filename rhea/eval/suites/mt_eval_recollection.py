"""mt-eval-recollection: MT-Eval's global-instruction recollection task (the Rhea paper's IAR task).

As MT-Eval's ``create_data.py`` builds it: a dialogue opens with one global instruction in MT-Eval's own
words ("Begin all your responses in the upcoming conversation with the letter q. Keep all your responses
under 200 words."), answered "ok." (given, not generated: the episode's fed history), then 10 ordinary
queries from ``global_inst.jsonl`` that MT-Eval lists as compatible with that instruction, drawn without
replacement; the model answers every query in turn (its replies stay in the history), and each reply is
checked by rule against the instruction. Two dialogues per instruction type, so the 14 types (MT-Eval leaves
out the word-count one) give 28 episodes; episodes go round the types in MT-Eval's order (episode k has type
k mod 14), so a shorter run (`n_episodes` 14 or fewer) still spreads over as many types as it has episodes.
IAR = 10 × the share of replies that follow the instruction (strict; IFEval's loose reading beside it),
per turn and per instruction.

The checks are the project's IFEval-style checkers (`rhea.eval.checkers`), with parameters drawn in MT-Eval's
ranges (a lower-case start letter, its two end phrases, 3-6 sentences "less than", 1-2 placeholders, MT-Eval's
languages that the language detector knows); two differ and are said so: MT-Eval's ``start_emoji`` asks for
any emoji, checked here by the first character's Unicode category (the project's checker wants a named
emoji); ``bullet_list`` is drawn with 1-4 bullets (MT-Eval also draws 0, "use only bullet points", whose
check passes any bullet), and keywords come from the project's keyword sets, not MT-Eval's word list.

The instruction texts (`INSTRUCTIONS`) are MT-Eval's (``utils/global_inst.py`` of
github.com/KwanWaiChung/MT-Eval, commit bfe3a46), used under its MIT licence, `MT_EVAL_LICENSE`
(Copyright (c) 2024 Wai-Chung Kwan).

A real run on the embedded model (28 dialogues of 11 turns)::

    rhea bench --suite mt-eval-recollection --data ../shared/data/mt_eval/raw_global_inst.jsonl \\
        --policies vanilla,bm25,recent-k,summary,rhea --max-new-tokens 96 --out runs/mt-eval-recollection

>>> suite = MTEvalRecollectionSuite(data=[("Is tea good?", ("punctuation:no_comma",))] * 20, n_episodes=1)
>>> ep = suite.generate(seed=0)[0]
>>> ep.history[0]["assistant"], len(ep.turns), ep.turns[0].kind
('ok.', 10, 'query')
"""
from __future__ import annotations

import random
import string
import unicodedata
from collections import defaultdict
from typing import Callable, Sequence

from rhea.eval import loaders
from rhea.eval.checkers import InstructionSpec, get_instruction
from rhea.eval.checkers.answer import judge_reply, non_answer
from rhea.eval.checkers.language import LANGUAGE_NAMES
from rhea.eval.suites.base import Suite, SuiteConfigError, SuiteTurn, mean

#: The licence of the MT-Eval instruction texts below, as MT-Eval ships it.
MT_EVAL_LICENSE = """MIT License

Copyright (c) 2024 Wai-Chung Kwan

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated documentation files (the "Software"), to deal in the Software without restriction, including without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE."""

#: MT-Eval appends this to every instruction but the word-count one (it is not checked).
LENGTH_NOTE = " Keep all your responses under 200 words."
#: MT-Eval's languages (``ResponseLanguage.langs``), as ISO codes.
MT_EVAL_LANGUAGES = ("en", "es", "pt", "ar", "hi", "fr", "ru", "de", "ja", "it", "bn", "uk", "th", "ur", "ta", "te",
                     "bg", "ko", "pl", "he", "fa", "vi", "ne", "sw", "kn", "mr", "gu", "pa", "ml", "fi")
_END_PHRASES = ("Any other questions?", "Is there anything else I can help with?")
_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
_ALL = "All your responses in the upcoming conversation must"


def _spec(name: str, **kwargs) -> InstructionSpec:
    return get_instruction(name).spec(**kwargs)


def _draw_start_char(rng):
    letter = rng.choice(string.ascii_lowercase)
    return f"Begin all your responses in the upcoming conversation with the letter {letter}.", _spec(
        "start_letter", letter=letter)


def _draw_language(rng):
    code = rng.choice([c for c in MT_EVAL_LANGUAGES if c in LANGUAGE_NAMES])
    return (f"{_ALL} be written in {LANGUAGE_NAMES[code]} language, no other language is allowed.",
            _spec("response_language", language=code))


def _draw_sentences(rng):
    n = rng.randint(3, 6)
    return f"{_ALL} be less than {n} sentences.", _spec("sentence_count", relation="less than", num_sentences=n)


def _draw_bullets(rng):
    n = rng.randint(1, 4)
    return (f"{_ALL} contain exactly {n} bullet points. Use the markdown bullet points such as:\n"
            "* This is point 1.\n* This is point 2.\n", _spec("bullet_count", num_bullets=n))


def _draw_keywords(rng):
    inst = get_instruction("include_keywords")
    keywords = sorted(inst.sample_kwargs(rng)["keywords"])
    return f"Include keywords {keywords} in all your responses in the upcoming conversation.", _spec(
        "include_keywords", keywords=keywords)


def _draw_end(rng):
    phrase = rng.choice(_END_PHRASES)
    return (f"{_ALL} end with this exact phrase '{phrase}'. No other words should follow this phrase.",
            _spec("end_phrase", end_phrase=phrase))


def _draw_placeholders(rng):
    n = rng.randint(1, 2)
    return (f"{_ALL} contain at least {n} placeholders represented by square brackets, such as [address].",
            _spec("placeholder_count", num_placeholders=n))


def starts_with_emoji(text: str) -> bool:
    """MT-Eval's ``start_emoji`` check: the reply's first visible character is an emoji (a Unicode symbol
    of category So, as pictographs and emoji are).

    >>> starts_with_emoji("🌟 Yes."), starts_with_emoji("Yes 🌟")
    (True, False)
    """
    stripped = text.strip()
    return bool(stripped) and unicodedata.category(stripped[0]) == "So"


#: MT-Eval instruction id -> draw(rng) -> (instruction text, spec or None for the emoji check); MT-Eval's order.
INSTRUCTIONS: dict[str, Callable[[random.Random], tuple[str, InstructionSpec | None]]] = {
    "startend:start_char": _draw_start_char,
    "startend:start_emoji": lambda rng: ("Begin all your responses in the upcoming conversation with emoji.", None),
    "startend:end_phrase": _draw_end,
    "language:response_language": _draw_language,
    "format:json_format": lambda rng: (f"{_ALL} be wrapped in JSON format. You can use markdown ticks such as ```.",
                                       _spec("json_format")),
    "format:bullet_list": _draw_bullets,
    "length_constraints:number_sentences": _draw_sentences,
    "keywords:existence": _draw_keywords,
    "change_case:capital_letter": lambda rng: (f"{_ALL} be in all capital letters.", _spec("uppercase")),
    "change_case:lowercase": lambda rng: (f"{_ALL} be in all lower letters.", _spec("lowercase")),
    "punctuation:no_comma": lambda rng: (f"{_ALL} refrain from the use of any commas.", _spec("no_comma")),
    "combination:two_responses": lambda rng: (
        f"{_ALL} have two different responses. Your two different responses should be separated by 6 asterisk "
        "symbols: ******.", _spec("two_responses")),
    "content:placeholder": _draw_placeholders,
    "format:constrained_response": lambda rng: (f"{_ALL} be one of the following options: {list(_OPTIONS)}.",
                                                _spec("constrained_response")),
}

Query = tuple[str, tuple[str, ...]]  # (query, the MT-Eval instruction ids it may carry)


def load_queries(path: str) -> list[Query]:
    """MT-Eval's ``raw_data/global_inst.jsonl`` as (query, instruction ids) pairs."""
    return [(q.query, q.instructions) for q in loaders.load_mt_eval_global_inst(path)]


class MTEvalRecollectionSuite(Suite):
    """One MT-Eval global instruction (answered "ok."), then its compatible queries; IAR per reply."""

    name = "mt-eval-recollection"
    default_turns = 10
    score_fields = ("iar",)

    def __init__(self, *, data: Sequence[Query] | None = None, n_episodes: int = 28, sessions_per_instruction: int = 2):
        if data is None:
            from rhea.eval.suites.builtin import ORDINARY_QUESTIONS

            data = [(q, tuple(INSTRUCTIONS)) for q in ORDINARY_QUESTIONS]
        super().__init__(data=[(q, tuple(ids)) for q, ids in data], n_episodes=n_episodes)
        self.sessions_per_instruction = sessions_per_instruction
        self.types = [i for i in INSTRUCTIONS if any(i in ids for _, ids in self.data)]
        if not self.types:
            raise SuiteConfigError(f"no query in the data lists an instruction this suite checks ({sorted(INSTRUCTIONS)})")
        if n_episodes > len(self.types) * sessions_per_instruction:
            raise SuiteConfigError(f"n_episodes={n_episodes} exceeds the {len(self.types)} instruction types × "
                                   f"{sessions_per_instruction} dialogues the data gives; lower --episodes")

    load = staticmethod(load_queries)

    def generate(self, n_turns: int | None = None, seed: int = 0):
        self._pools = {i: [q for q, ids in self.data if i in ids] for i in self.types}
        self._next = 0
        return super().generate(n_turns, seed)

    def _episode(self, n_turns: int, rng: random.Random):
        inst_id = self.types[self._next % len(self.types)]  # round the types: a short run covers many
        self._next += 1
        text, spec = INSTRUCTIONS[inst_id](rng)
        text += LENGTH_NOTE
        pool = self._pools[inst_id]
        if len(pool) < n_turns:
            raise SuiteConfigError(f"instruction {inst_id!r} has {len(pool)} compatible queries left for a dialogue of "
                                   f"{n_turns}; lower --turns or --episodes")
        queries = []
        for _ in range(n_turns):  # without replacement across the instruction's dialogues, as MT-Eval draws
            queries.append(pool.pop(rng.randrange(len(pool))))
        active = (spec,) if spec is not None else ()
        turns = [SuiteTurn(q, "query", active, meta={"mt_eval_id": inst_id, "distance": i + 1})
                 for i, q in enumerate(queries)]
        meta = {"mt_eval_id": inst_id, "instruction": text, "spec": spec.to_dict() if spec else None,
                "history": [{"user": text, "assistant": "ok.", "meta": {}}]}
        return turns, meta

    def score_turn(self, turn: SuiteTurn, reply: str, *, history=()) -> dict:
        if turn.kind != "query":
            return {}
        if turn.active_instructions:
            judged = judge_reply(turn.active_instructions, reply, turn.user)
            strict, loose = (all(judged[k].values()) for k in ("strict", "loose"))
            reason = judged["non_answer"]
        else:  # the emoji instruction: MT-Eval's any-emoji check
            reason = non_answer(reply, turn.user)
            strict = loose = reason is None and starts_with_emoji(reply)
        return {"iar": 10.0 * strict, "iar_loose": 10.0 * loose, "followed": bool(strict),
                "instruction": turn.meta["mt_eval_id"], "non_answer": reason}

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        queries = [s for s in turn_scores if s.get("kind") == "query"]
        by_turn, by_instruction = defaultdict(list), defaultdict(list)
        for s in queries:
            by_turn[s["turn_index"]].append(s["iar"])
            by_instruction[s["instruction"]].append(s["iar"])
        return {"iar": mean(s["iar"] for s in queries), "iar_loose": mean(s["iar_loose"] for s in queries),
                "iar_by_turn": {t + 1: mean(v) for t, v in sorted(by_turn.items())},
                "iar_by_instruction": {i: mean(v) for i, v in sorted(by_instruction.items())},
                "non_answers": sum(bool(s.get("non_answer")) for s in queries)}
