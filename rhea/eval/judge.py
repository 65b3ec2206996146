"""LLM-as-a-judge with FastChat's MT-Bench single-answer grading prompts.

The judge is any `rhea.backends.llm.TextGenerator` (a local model, an OpenAI-compatible endpoint,
or a `ScriptedGenerator` in tests). Prompts follow FastChat's ``judge_prompts.jsonl``
(``single-v1``, ``single-math-v1`` and their ``-multi-turn`` forms; Apache-2.0): the judge
explains, then rates 1–10 as ``[[rating]]``. Ratings are parsed as FastChat does
(``[[x]]``, falling back to ``[x]``); output with no rating, or one outside 1–10, gives
``rating=None`` and an ``error`` rather than a made-up score.

>>> from rhea.backends.llm import ScriptedGenerator
>>> judge = Judge(ScriptedGenerator(["Accurate and clear. Rating: [[8]]"]))
>>> judge.rate("What is 2+2?", "4").rating
8.0
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from rhea.backends.llm import TextGenerator, generate_rows
from rhea.errors import RheaConfigError
from rhea.eval.environment import dtype_name

#: MT-Bench categories that FastChat grades against a reference answer.
REFERENCE_CATEGORIES = ("math", "reasoning", "coding")

_RATING = re.compile(r"\[\[(\d+\.?\d*)\]\]")
_RATING_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")

_FORMAT_RULE = ('After providing your explanation, you must rate the response on a scale of '
                '1 to 10 by strictly following this format: "[[rating]]", for example: '
                '"Rating: [[5]]".')
_GENERAL = ("Your evaluation should consider factors such as the helpfulness, relevance, "
            "accuracy, depth, creativity, and level of detail of the response.")
_WITH_REFERENCE = ("Your evaluation should consider correctness and helpfulness. You will be "
                   "given a reference answer and the assistant's answer.")
_INTRO = ("Please act as an impartial judge and evaluate the quality of the response "
          "provided by an AI assistant to the user question displayed below. ")


def _single_prompt(question: str, answer: str, reference: str | None) -> str:
    if reference is None:
        criteria = (f"{_GENERAL} Begin your evaluation by providing a short explanation. "
                    f"Be as objective as possible.")
        reference_block = ""
    else:
        criteria = (f"{_WITH_REFERENCE} Begin your evaluation by comparing the assistant's "
                    f"answer with the reference answer. Identify and correct any mistakes. "
                    f"Be as objective as possible.")
        reference_block = (f"[The Start of Reference Answer]\n{reference}\n"
                           f"[The End of Reference Answer]\n\n")
    return (f"[Instruction]\n{_INTRO}{criteria} {_FORMAT_RULE}\n\n[Question]\n{question}\n\n"
            f"{reference_block}[The Start of Assistant's Answer]\n{answer}\n"
            f"[The End of Assistant's Answer]")


def _multi_turn_messages(questions: tuple[str, str], answers: tuple[str, str],
                         references: tuple[str, str] | None) -> list[dict]:
    if references is None:
        criteria = (f"{_GENERAL} You evaluation should focus on the assistant's answer to the "
                    f"second user question. Begin your evaluation by providing a short "
                    f"explanation. Be as objective as possible.")
        reference_block = ""
    else:
        criteria = (f"{_WITH_REFERENCE} You evaluation should focus on the assistant's answer "
                    f"to the second question. Begin your evaluation by comparing the "
                    f"assistant's answer with the reference answer. Identify and correct any "
                    f"mistakes. Be as objective as possible.")
        reference_block = (f"<|The Start of Reference Answer|>\n\n### User:\n{questions[0]}\n\n"
                           f"### Reference answer:\n{references[0]}\n\n### User:\n"
                           f"{questions[1]}\n\n### Reference answer:\n{references[1]}\n\n"
                           f"<|The End of Reference Answer|>\n\n\n")
    # FastChat's math multi-turn prompt alone drops "displayed below"; kept verbatim.
    intro = _INTRO if references is None else _INTRO.replace(" displayed below", "")
    system = f"{intro}{criteria} {_FORMAT_RULE}\n\n"
    user = (f"{reference_block}<|The Start of Assistant A's Conversation with User|>\n\n"
            f"### User:\n{questions[0]}\n\n### Assistant A:\n{answers[0]}\n\n### User:\n"
            f"{questions[1]}\n\n### Assistant A:\n{answers[1]}\n\n"
            f"<|The End of Assistant A's Conversation with User|>")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_rating(judgment: str) -> float | None:
    """The 1–10 rating in a judge's output, or None when absent or out of range.

    >>> parse_rating("Solid answer. Rating: [[7]]"), parse_rating("Rating: [6.5]")
    (7.0, 6.5)
    >>> parse_rating("I would give it a seven.") is None, parse_rating("[[11]]") is None
    (True, True)
    """
    match = _RATING.search(judgment) or _RATING_BACKUP.search(judgment)
    if not match:
        return None
    rating = float(match.group(1))
    return rating if 1.0 <= rating <= 10.0 else None


@dataclass(frozen=True)
class JudgeRequest:
    """One rating to ask for: the judge's chat messages and FastChat's name for the prompt."""

    messages: tuple
    prompt_name: str


def single_request(question: str, answer: str, *, reference: str | None = None) -> JudgeRequest:
    """FastChat ``single-v1`` (or ``single-math-v1`` with a reference) for one answer."""
    name = "single-v1" if reference is None else "single-math-v1"
    return JudgeRequest(({"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": _single_prompt(question, answer, reference)}), name)


def multi_turn_request(questions: tuple[str, str], answers: tuple[str, str], *,
                       references: tuple[str, str] | None = None) -> JudgeRequest:
    """FastChat ``single-v1-multi-turn`` (or its math form): rates the second answer of a two-turn exchange."""
    if len(questions) != 2 or len(answers) != 2 or (references and len(references) != 2):
        raise RheaConfigError(f"multi-turn judging takes exactly 2 questions and 2 answers "
                              f"(got {len(questions)} and {len(answers)})")
    name = "single-v1-multi-turn" if references is None else "single-math-v1-multi-turn"
    return JudgeRequest(tuple(_multi_turn_messages(tuple(questions), tuple(answers),
                                                   tuple(references) if references else None)), name)


@dataclass(frozen=True)
class Judgment:
    """A judge's verdict: `rating` in [1, 10] or None (then `error` says why)."""

    rating: float | None
    raw: str
    prompt_name: str
    error: str | None = None
    #: "parsed" (read from the judge's text, as FastChat does), "completed" (the text had none: the judge's
    #: likeliest completion of "Rating: [[" after its own explanation), "direct" (no explanation asked: the
    #: probability-weighted rating after "Rating: [[" right after the prompt; `Judge(explain=False)`) or "none"
    source: str = "parsed"
    #: for a completed or direct rating, the judge's probabilities of "1]]" ... "10]]" (normalised over the ten)
    distribution: tuple[float, ...] | None = None

    @property
    def expected(self) -> float | None:
        """The probability-weighted mean rating (G-Eval's reading) when `distribution` is known, else `rating`.

        >>> Judgment(2.0, "", "single-v1", distribution=(0.0, 0.6, 0.4) + (0.0,) * 7).expected
        2.4
        """
        if self.distribution is None:
            return self.rating
        return _weighted(self.distribution)


class Judge:
    """Rates answers 1–10 with an LLM, MT-Bench single-answer style.

    `judge_many` rates several answers together: a local judge (`HFGenerator`) decodes up to
    `batch_size` prompts as one left-padded batch, which on a memory-bound device costs little
    more than one prompt (K episodes' replies of one turn index, judged at once); other judges
    answer one by one.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> j = Judge(ScriptedGenerator(["no rating here"]))
    >>> j.rate("Q?", "A.").error
    'no [[rating]] in 1-10 found in judge output'
    >>> [v.rating for v in Judge(ScriptedGenerator(["[[3]]", "[[9]]"])).judge_many(
    ...     [single_request("Q?", "A."), single_request("Q?", "B.")])]
    [3.0, 9.0]
    """

    def __init__(self, generator: TextGenerator, *, max_new_tokens: int = 512, complete_rating: bool = True,
                 batch_size: int = 8, explain: bool = True):
        if not isinstance(generator, TextGenerator):
            raise TypeError(f"generator={generator!r} must implement rhea.backends.llm.TextGenerator "
                            "(a generate(messages, ...) -> str method)")
        if max_new_tokens < 16:
            raise RheaConfigError(f"max_new_tokens={max_new_tokens} is too small for an explanation "
                             "plus a rating; use >= 16 (FastChat uses 2048)")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise RheaConfigError(f"batch_size={batch_size!r} must be an integer >= 1 (prompts judged in one batch)")
        self.generator = generator
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        #: a local judge (one that can score continuations) whose text has no rating is asked for its
        #: likeliest rating after its own explanation; endpoints keep FastChat's rule (no rating: None)
        self.complete_rating = bool(complete_rating) and callable(getattr(generator, "continuation_logprobs", None))
        #: False: no explanation is generated; the rating is the probability-weighted mean of the judge's
        #: completions "1]]" ... "10]]" of "Rating: [[" right after FastChat's prompt (one prefill per rating
        #: instead of a 256-token generation; a local judge only; benchmarks/judge_agreement.py --direct)
        self.explain = bool(explain)
        if not self.explain and not callable(getattr(generator, "continuation_logprobs", None)):
            raise RheaConfigError("explain=False reads the rating from the judge's next-token probabilities, which "
                                  f"{type(generator).__name__} does not give; use a local judge (HFGenerator) or explain=True")

    def describe(self) -> dict:
        """What decides this judge's ratings, as config.json records it (a resumed run must match)."""
        target = getattr(self.generator, "model", None)
        dtype = None
        if not isinstance(target, str):  # a local model: its zoo name / base model, else its class
            config = getattr(target, "config", None)
            # what it computes in: ratings differ between float32 and bfloat16
            dtype = getattr(target, "dtype", None)
            dtype = dtype_name(dtype) if dtype is not None else None
            target = getattr(config, "base_model", None) or getattr(config, "_name_or_path", None) or type(
                self.generator).__name__
        where = getattr(self.generator, "base_url", None)
        described = {"judge": f"{where}:{target}" if where else str(target), "max_new_tokens": self.max_new_tokens,
                     "complete_rating": self.complete_rating}
        described = described if self.explain else {**described, "explain": False}
        return described if dtype is None else {**described, "dtype": dtype}

    def rate(self, question: str, answer: str, *, reference: str | None = None) -> Judgment:
        """Rate one answer (FastChat ``single-v1``, or ``single-math-v1`` with a reference)."""
        return self.judge_many([single_request(question, answer, reference=reference)])[0]

    def rate_multi_turn(self, questions: tuple[str, str], answers: tuple[str, str], *,
                        references: tuple[str, str] | None = None) -> Judgment:
        """Rate the second answer of a two-turn exchange (``single-v1-multi-turn``)."""
        return self.judge_many([multi_turn_request(questions, answers, references=references)])[0]

    def judge_many(self, requests: Sequence[JudgeRequest]) -> list[Judgment]:
        """A verdict for each request, in order; up to `batch_size` prompts decode together (greedy).

        A batch's verdicts equal one-by-one verdicts up to floating-point reassociation (padding
        changes the reduction order), as for `rhea.backends.llm.generate_rows`.
        """
        if not self.explain:
            return [self._direct(r) for r in requests]
        verdicts: list[Judgment] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = list(requests[start:start + self.batch_size])
            if len(chunk) == 1:  # the generator's own path (its prefix cache), exactly as one rating always ran
                raws = [self.generator.generate(list(chunk[0].messages), max_new_tokens=self.max_new_tokens,
                                                temperature=0.0)]
            else:
                raws = generate_rows([self.generator] * len(chunk), [list(r.messages) for r in chunk],
                                     max_new_tokens=self.max_new_tokens)
            verdicts.extend(self._verdict(r, raw) for r, raw in zip(chunk, raws))
        return verdicts

    def _verdict(self, request: JudgeRequest, raw: str) -> Judgment:
        rating = parse_rating(raw)
        if rating is not None:
            return Judgment(rating, raw, request.prompt_name)
        if self.complete_rating:
            distribution = self._distribution(list(request.messages), raw.rstrip() + "\n")
            return Judgment(_likeliest(distribution), raw, request.prompt_name, source="completed",
                            distribution=distribution)
        return Judgment(None, raw, request.prompt_name, "no [[rating]] in 1-10 found in judge output", source="none")

    def _direct(self, request: JudgeRequest) -> Judgment:
        """No explanation: the probability-weighted rating after "Rating: [[" (G-Eval's reading). Its likeliest
        rating alone is too coarse: Qwen2.5-Coder-1.5B put 1 or 5 first for nearly every answer
        (benchmarks/results/judge_agreement_qwen_direct)."""
        distribution = self._distribution(list(request.messages), "")
        return Judgment(_weighted(distribution), "", request.prompt_name, source="direct", distribution=distribution)

    def _distribution(self, messages: list[dict], written: str) -> tuple[float, ...]:
        """The judge's probabilities of rating 1..10 after the prompt, what it `written`, and "Rating: [["."""
        import math

        from rhea.backends.chat_template import apply_chat_template

        prompt = apply_chat_template(self.generator.tokenizer, messages) + written + "Rating: [["
        scores, _ = self.generator.continuation_logprobs(prompt, [f"{k}]]" for k in range(1, 11)])
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        return tuple(w / total for w in weights)


def same_judge(recorded, described: dict) -> bool:
    """Whether ratings recorded under the judge description `recorded` were made by the judge that
    `described` (`Judge.describe`) describes. A description without ``dtype`` (a local judge that did
    not record what it computed in) matches on the rest.

    >>> same_judge({"judge": "m", "max_new_tokens": 8}, {"judge": "m", "max_new_tokens": 8, "dtype": "float32"})
    True
    >>> same_judge({"judge": "m", "dtype": "bfloat16"}, {"judge": "m", "dtype": "float32"})
    False
    """
    if recorded == described:
        return True
    return (isinstance(recorded, dict) and "dtype" not in recorded
            and recorded == {k: v for k, v in described.items() if k != "dtype"})


def _weighted(distribution: Sequence[float]) -> float:
    """The probability-weighted rating (1-10), to 4 decimals."""
    return round(sum((k + 1) * p for k, p in enumerate(distribution)), 4)


def _likeliest(distribution: Sequence[float]) -> float:
    """The rating 1-10 of highest probability (the lowest on a tie)."""
    return float(1 + max(range(len(distribution)), key=distribution.__getitem__))
