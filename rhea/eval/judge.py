"""LLM-as-a-judge: FastChat's MT-Bench single-answer grading prompts, and LoCoMo's correctness judge.

The judge is any `rhea.backends.llm.TextGenerator` (a local model, an OpenAI-compatible endpoint,
or a `ScriptedGenerator` in tests). Prompts follow FastChat's ``judge_prompts.jsonl``
(``single-v1``, ``single-math-v1`` and their ``-multi-turn`` forms; Apache-2.0): the judge
explains, then rates 1–10 as ``[[rating]]``. Ratings are parsed as FastChat does
(``[[x]]``, falling back to ``[x]``); output with no rating, or one outside 1–10, gives
``rating=None`` and an ``error`` rather than a made-up score.

`correctness_request` is the judge of LoCoMo-style memory QA as mem0's evaluation applies it
(``evaluation/metrics/llm_judge.py``, Apache-2.0): the judge sees a question, the gold answer and
the generated one, explains in a sentence and labels the answer CORRECT or WRONG ("be generous":
an answer that touches the gold's topic, or names the same date, is correct). Its verdicts are
``rating`` 1.0 (correct) or 0.0 (wrong), read from the ``{"label": ...}`` JSON it is asked for
(else from the one label word it wrote; both or neither: no rating).

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

#: The scales a `JudgeRequest` asks for: a 1-10 rating (FastChat's prompts) or a CORRECT / WRONG label.
RATING_SCALE, LABEL_SCALE = "1-10", "correct-wrong"
#: The prompt name of `correctness_request` (recorded with each verdict).
CORRECTNESS_PROMPT_NAME = "locomo-correctness"
#: LoCoMo's correctness judge prompt, verbatim as mem0's evaluation sends it (one user message, temperature 0):
#: ``ACCURACY_PROMPT`` of evaluation/metrics/llm_judge.py, github.com/mem0ai/mem0 (commit 2352a44), Apache-2.0.
CORRECTNESS_PROMPT = """
Your task is to label an answer to a question as ’CORRECT’ or ’WRONG’. You will be given the following data:
    (1) a question (posed by one user to another user), 
    (2) a ’gold’ (ground truth) answer, 
    (3) a generated answer
which you will score as CORRECT/WRONG.

The point of the question is to ask about something one user should know about the other user based on their prior conversations.
The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT. 

For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.

Now it's time for the real question:
Question: {question}
Gold answer: {gold_answer}
Generated answer: {generated_answer}

First, provide a short (one sentence) explanation of your reasoning, then finish with CORRECT or WRONG. 
Do NOT include both CORRECT and WRONG in your response, or it will break the evaluation script.

Just return the label CORRECT or WRONG in a json format with the key as "label".
"""
_LABEL_JSON = re.compile(r'"label"\s*:\s*"?\s*(correct|wrong)\b', re.IGNORECASE)
_LABEL_WORD = re.compile(r"\b(CORRECT|WRONG)\b")
#: What a local judge's label is read after, when its text has none (completed) or none is written (direct).
_LABEL_CUE = '{"label": "'

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


def parse_label(judgment: str) -> float | None:
    """1.0 for a CORRECT label in a judge's output, 0.0 for WRONG, None when there is none or both.

    The ``{"label": ...}`` JSON the correctness prompt asks for is read first (any case); else the one
    label word, in capitals, the text holds (mem0's prompt forbids writing both).

    >>> parse_label('The answer names the same city. {"label": "CORRECT"}'), parse_label("It differs. WRONG")
    (1.0, 0.0)
    >>> parse_label("Not CORRECT, so WRONG") is None, parse_label("I am not sure.") is None
    (True, True)
    """
    match = _LABEL_JSON.search(judgment)
    if match:
        return 1.0 if match.group(1).upper() == "CORRECT" else 0.0
    words = set(_LABEL_WORD.findall(judgment))
    if len(words) != 1:
        return None
    return 1.0 if words == {"CORRECT"} else 0.0


@dataclass(frozen=True)
class JudgeRequest:
    """One verdict to ask for: the judge's chat messages, the prompt's name, and its scale (`RATING_SCALE`:
    a 1-10 rating; `LABEL_SCALE`: CORRECT / WRONG)."""

    messages: tuple
    prompt_name: str
    scale: str = RATING_SCALE


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


def correctness_request(question: str, gold: str, answer: str) -> JudgeRequest:
    """LoCoMo's correctness judge (`CORRECTNESS_PROMPT`) for one answer to a memory question.

    >>> r = correctness_request("Which city did I fly to?", "Lisbon", "You flew to Lisbon.")
    >>> r.scale, r.messages[0]["role"], "Gold answer: Lisbon" in r.messages[0]["content"]
    ('correct-wrong', 'user', True)
    """
    content = CORRECTNESS_PROMPT.format(question=question, gold_answer=gold, generated_answer=answer)
    return JudgeRequest(({"role": "user", "content": content},), CORRECTNESS_PROMPT_NAME, LABEL_SCALE)


@dataclass(frozen=True)
class Judgment:
    """A judge's verdict: `rating` in [1, 10] (a 1-10 prompt) or 1.0 / 0.0 (correct / wrong: the
    correctness prompt), or None (then `error` says why)."""

    rating: float | None
    raw: str
    prompt_name: str
    error: str | None = None
    #: "parsed" (read from the judge's text, as FastChat does), "completed" (the text had none: the judge's
    #: likeliest completion of "Rating: [[" after its own explanation), "direct" (no explanation asked: the
    #: probability-weighted rating after "Rating: [[" right after the prompt; `Judge(explain=False)`) or "none"
    source: str = "parsed"
    #: for a completed or direct rating, the judge's probabilities of "1]]" ... "10]]" (normalised over the ten),
    #: or of CORRECT and WRONG (normalised over the two) for a label
    distribution: tuple[float, ...] | None = None

    @property
    def expected(self) -> float | None:
        """The probability-weighted mean rating (G-Eval's reading) when `distribution` is known, else `rating`;
        for a label, the probability of CORRECT.

        >>> Judgment(2.0, "", "single-v1", distribution=(0.0, 0.6, 0.4) + (0.0,) * 7).expected
        2.4
        >>> Judgment(1.0, "", "locomo-correctness", distribution=(0.75, 0.25)).expected
        0.75
        """
        if self.distribution is None:
            return self.rating
        if len(self.distribution) == 2:
            return round(self.distribution[0], 4)
        return _weighted(self.distribution)


class Judge:
    """Rates answers with an LLM: 1–10, MT-Bench single-answer style, or CORRECT / WRONG (`correctness_request`).

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

    def correctness(self, question: str, gold: str, answer: str) -> Judgment:
        """Whether `answer` is correct against `gold` (LoCoMo's judge, `correctness_request`): rating 1.0 or 0.0."""
        return self.judge_many([correctness_request(question, gold, answer)])[0]

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
        label = request.scale == LABEL_SCALE
        rating = parse_label(raw) if label else parse_rating(raw)
        if rating is not None:
            return Judgment(rating, raw, request.prompt_name)
        if self.complete_rating:
            distribution = self._distribution(request, raw.rstrip() + "\n")
            return Judgment(_likeliest(distribution, label), raw, request.prompt_name, source="completed",
                            distribution=distribution)
        missing = "no CORRECT / WRONG label (or both)" if label else "no [[rating]] in 1-10"
        return Judgment(None, raw, request.prompt_name, f"{missing} found in judge output", source="none")

    def _direct(self, request: JudgeRequest) -> Judgment:
        """No explanation: the probability-weighted rating after "Rating: [[" (G-Eval's reading). Its likeliest
        rating alone is too coarse: Qwen2.5-Coder-1.5B put 1 or 5 first for nearly every answer
        (benchmarks/results/judge_agreement_qwen_direct). A label: the likelier of CORRECT and WRONG after
        ``{"label": "``, its probability kept (`Judgment.expected`)."""
        distribution = self._distribution(request, "")
        rating = _likeliest(distribution, True) if request.scale == LABEL_SCALE else _weighted(distribution)
        return Judgment(rating, "", request.prompt_name, source="direct", distribution=distribution)

    def _distribution(self, request: JudgeRequest, written: str) -> tuple[float, ...]:
        """The judge's probabilities of rating 1..10 after the prompt, what it `written`, and "Rating: [["; for a
        label, of CORRECT and WRONG after ``{"label": "``."""
        import math

        from rhea.backends.chat_template import apply_chat_template

        label = request.scale == LABEL_SCALE
        cue = _LABEL_CUE if label else "Rating: [["
        options = ['CORRECT"', 'WRONG"'] if label else [f"{k}]]" for k in range(1, 11)]
        prompt = apply_chat_template(self.generator.tokenizer, list(request.messages)) + written + cue
        scores, _ = self.generator.continuation_logprobs(prompt, options)
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        return tuple(w / total for w in weights)


def judge_scores(judge: "Judge | None", scores: list[dict], asked: Sequence[tuple[int, JudgeRequest]]) -> list[dict]:
    """`scores` with the verdict on each ``(i, request)`` of `asked` in ``scores[i]``, all asked in one
    `Judge.judge_many` call (a batched run's K episodes: one batch for the judge too): ``judge`` ("ok", or
    "error" with no rating), ``judge_rating``, ``judge_prompt``, ``judge_error``, ``judge_source``. With no judge,
    each asked score says ``"judge": "skipped"`` and has no rating.

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> scores = judge_scores(Judge(ScriptedGenerator(["[[6]]"])), [{}, {"f1": 1.0}], [(1, single_request("Q?", "A."))])
    >>> scores[1]["judge_rating"], scores[0]
    (6.0, {})
    >>> judge_scores(None, [{}], [(0, single_request("Q?", "A."))])
    [{'judge': 'skipped', 'judge_rating': None}]
    """
    if judge is None:
        for i, _ in asked:
            scores[i].update({"judge": "skipped", "judge_rating": None})
        return scores
    verdicts = judge.judge_many([request for _, request in asked]) if asked else []
    for (i, _), verdict in zip(asked, verdicts):
        scores[i].update({"judge": "ok" if verdict.rating is not None else "error", "judge_rating": verdict.rating,
                          "judge_prompt": verdict.prompt_name, "judge_error": verdict.error,
                          "judge_source": verdict.source})
    return scores


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


def _likeliest(distribution: Sequence[float], label: bool = False) -> float:
    """The rating 1-10 of highest probability (the lowest on a tie); for a label (CORRECT, WRONG), 1.0 when
    CORRECT is the likelier (WRONG on a tie), else 0.0."""
    if label:
        return 1.0 if distribution[0] > distribution[1] else 0.0
    return float(1 + max(range(len(distribution)), key=distribution.__getitem__))
