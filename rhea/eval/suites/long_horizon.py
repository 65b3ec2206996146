"""long-horizon: chained questions over many turns, with recall of early facts.

An episode opens by planting `n_facts` personal facts ("By the way, my dog's name is
Mochi."), continues with two-turn MT-Bench questions (both turns of a question are kept
next to each other, as in MT-Bench), and ends by asking for each planted fact.

Scoring, rule-based first:
- recall probes: the reply must name the planted value (exact match after normalising);
- questions whose reference answer is short (a number, a name) are also matched against it.
With a `judge` (any `TextGenerator`, wrapped in `rhea.eval.judge.Judge`), every question
reply is rated 1–10 with FastChat's single-answer prompts: ``single-v1`` for first turns,
``single-v1-multi-turn`` for second turns (the first answer is taken from `history`),
their ``-math`` forms with a reference for math / reasoning / coding. Without a judge the
rule-based part still runs and the result says ``"judge": "skipped"``.

>>> suite = LongHorizonSuite(n_episodes=1, n_facts=1)
>>> ep = suite.generate(n_turns=6, seed=0)[0]
>>> [t.kind for t in ep.turns]
['update', 'query', 'query', 'query', 'query', 'probe']
"""
from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from rhea.eval import loaders
from rhea.eval.judge import (REFERENCE_CATEGORIES, Judge, JudgeRequest, judge_scores, multi_turn_request,
                             single_request)
from rhea.eval.suites.base import (Suite, SuiteConfigError, SuiteTurn, mean, require_int,
                                   value_matches)
from rhea.eval.suites.builtin import CHAINED_QUESTIONS, PLANTED_FACTS
from rhea.backends.llm import TextGenerator

#: References up to this many characters are short enough to match by rule.
SHORT_REFERENCE_CHARS = 40


def builtin_questions() -> list[loaders.MTBenchQuestion]:
    return [loaders.MTBenchQuestion(q["question_id"], q["category"], tuple(q["turns"]),
                                    tuple(q.get("reference", ()))) for q in CHAINED_QUESTIONS]


class LongHorizonSuite(Suite):
    """Planted facts, chained MT-Bench questions, recall probes; optional LLM judge."""

    name = "long-horizon"
    default_turns = 20
    score_fields = ("judge_rating", "turn_number")

    def __init__(self, *, data: Sequence[loaders.MTBenchQuestion] | None = None,
                 judge: Judge | TextGenerator | None = None, n_episodes: int = 8,
                 n_facts: int = 2):
        super().__init__(data=list(data) if data is not None else builtin_questions(),
                         n_episodes=n_episodes)
        if not self.data:
            raise SuiteConfigError("data has no questions; pass at least one MT-Bench question")
        require_int("n_facts", n_facts, 0)
        if n_facts > len(PLANTED_FACTS):
            raise SuiteConfigError(f"n_facts={n_facts} exceeds the {len(PLANTED_FACTS)} "
                                   "built-in fact kinds; lower n_facts")
        self.n_facts = n_facts
        self.judge = judge if judge is None or isinstance(judge, Judge) else Judge(judge)

    @staticmethod
    def load(path: str | Path) -> list[loaders.MTBenchQuestion]:
        """MT-Bench ``question.jsonl`` (or the H4 JSON list); see `loaders`."""
        return loaders.load_mt_bench_questions(path)

    def min_turns(self) -> int:
        return 2 * self.n_facts + 1

    def _episode(self, n_turns: int, rng: random.Random):
        facts = rng.sample(PLANTED_FACTS, self.n_facts)
        planted = [(fact, rng.choice(fact[3])) for fact in facts]
        turns = [SuiteTurn(statement.format(value=value), "update",
                           meta={"fact": attribute, "value": value})
                 for (attribute, statement, _, _), value in planted]
        body = n_turns - 2 * self.n_facts
        questions = rng.sample(self.data, len(self.data))
        while body > 0:
            question = questions.pop(0) if questions else rng.choice(self.data)
            for number, text in enumerate(question.turns[:min(2, body)]):
                reference = (question.reference[number].strip() or None
                             if number < len(question.reference) else None)
                turns.append(SuiteTurn(text, "query", expected=reference, meta={
                    "question_id": question.question_id, "category": question.category,
                    "turn_number": number + 1, "first_question": question.turns[0],
                    "references": question.reference[:2]}))
                body -= 1
        for (attribute, _, recall, candidates), value in planted:
            turns.append(SuiteTurn(recall, "probe", expected=value,
                                   meta={"fact": attribute, "candidates": list(candidates)}))
        return turns, {"facts": {a: v for (a, *_), v in planted}}

    def score_turn(self, turn: SuiteTurn, reply: str, *, history=()) -> dict:
        return self.score_turns([(turn, reply, history)])[0]

    def score_turns(self, items) -> list[dict]:
        """Scores of each ``(turn, reply, history)``; every judged reply among them is rated in one
        `Judge.judge_many` call (K episodes' turn t in a batched run: one batch for the judge too)."""
        scores = [self._rule_scores(turn, reply) for turn, reply, _ in items]
        asked = [(i, self.judge_request(turn, reply, history)) for i, (turn, reply, history) in enumerate(items)
                 if turn.kind == "query"]
        return judge_scores(self.judge, scores, asked)

    @staticmethod
    def _rule_scores(turn: SuiteTurn, reply: str) -> dict:
        if turn.kind == "probe":
            return {"recall_correct": value_matches(reply, turn.expected, turn.meta["candidates"])}
        if turn.kind != "query":
            return {}
        short = turn.expected is not None and len(turn.expected) <= SHORT_REFERENCE_CHARS
        return {"category": turn.meta["category"], "turn_number": turn.meta["turn_number"],
                "rule_correct": value_matches(reply, turn.expected) if short else None}

    @staticmethod
    def judge_request(turn: SuiteTurn, reply: str, history: Sequence[tuple[str, str]]) -> JudgeRequest:
        """FastChat's prompt for a question reply: multi-turn for a second turn whose first answer is in
        `history`, the math forms with the reference for math / reasoning / coding."""
        use_reference = turn.meta["category"] in REFERENCE_CATEGORIES and turn.expected
        reference = turn.expected if use_reference else None
        first_answer = next((a for u, a in reversed(list(history))
                             if u == turn.meta["first_question"]), None)
        if turn.meta["turn_number"] == 2 and first_answer is not None:
            references = turn.meta["references"]
            return multi_turn_request((turn.meta["first_question"], turn.user), (first_answer, reply),
                                      references=references if use_reference and len(references) == 2 else None)
        return single_request(turn.user, reply, reference=reference)

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        probes = [s for s in turn_scores if s.get("kind") == "probe"]
        queries = [s for s in turn_scores if s.get("kind") == "query"]
        rated = [s for s in queries if s.get("judge_rating") is not None]
        by_category, by_turn = defaultdict(list), defaultdict(list)
        for s in rated:
            by_category[s["category"]].append(s["judge_rating"])
            by_turn[s["turn_number"]].append(s["judge_rating"])
        judged = any(s.get("judge") != "skipped" for s in queries)
        return {
            "recall_accuracy": mean(float(s["recall_correct"]) for s in probes),
            "rule_accuracy": mean(float(s["rule_correct"]) for s in queries
                                  if s.get("rule_correct") is not None),
            "judge": "ok" if judged else "skipped",
            "judge_mean": mean(s["judge_rating"] for s in rated),
            "judge_errors": sum(s.get("judge") == "error" for s in queries),
            # a local judge whose text had no [[rating]]: its likeliest rating after its own explanation
            "judge_completed": sum(s.get("judge_source") == "completed" for s in rated),
            "judge_by_category": {c: mean(v) for c, v in sorted(by_category.items())},
            "judge_by_turn_number": {t: mean(v) for t, v in sorted(by_turn.items())},
        }
