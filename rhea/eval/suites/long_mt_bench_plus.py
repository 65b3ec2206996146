"""long-mt-bench-plus: MT-Bench+ conversations concatenated into 60+ turn sessions, the paper's Long-MT-Bench+.

As SeCom builds Long-MT-Bench+ (its example holds 5 MT-Bench+ conversations, about 70 turns, one after
the other): an episode concatenates `conversations_per_episode` MemoChat MT-Bench+ conversations (seeded
order, disjoint across episodes), the model writing its own reply to every user turn (``kind="query"``);
then the retrospective question of each conversation ("Explain the literary value of the first sentence
I asked you to translate.", MT-Bench+'s ``-Q`` turn) is asked at the end, each on its own
(``kind="question"``, `ChatSession.ask`), so it must be answered from 60+ turns back.

Scoring (`LongHorizonSuite`'s judge, FastChat's prompts; ``--judge-local`` or ``--judge-url``):
- every reply to a user turn is rated 1-10 (``single-v1``; a follow-up turn with ``single-v1-multi-turn``
  and the turn before it of the same MT-Bench question): ``judge_mean``, and by position in the session;
- every retrospective answer is rated 1-10 with ``single-v1``, the question shown after the earlier
  exchanges it refers to (the user turns of the MT-Bench question its ``turn-info`` names, with the
  model's own replies then): ``retrospective_judge_mean``, the headline;
- by rule: whether the turns a retrospective question refers to were in the context
  (``evidence_in_context``), and non-answers (empty, an echo, degenerate repetition) fail.
Without a judge the rule part runs and the ratings say ``"skipped"`` (rate later with ``rhea judge``).

A real run on the embedded model (10 sessions of 5 conversations, ~70 turns each)::

    rhea bench --suite long-mt-bench-plus --data ../shared/data/mt_bench_plus/mtbenchplus.json \\
        --policies vanilla,bm25,recent-k,summary,rhea --episodes 2 --max-new-tokens 128 --out runs/long-mt-bench-plus

>>> suite = LongMTBenchPlusSuite(n_episodes=1, conversations_per_episode=2)
>>> ep = suite.generate(seed=0)[0]
>>> [t.kind for t in ep.turns][-2:], ep.turns[-1].meta["evidence_turns"] != []
(['question', 'question'], True)
"""
from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from rhea.backends.llm import TextGenerator
from rhea.eval import loaders
from rhea.eval.checkers.answer import non_answer
from rhea.eval.judge import Judge, JudgeRequest, judge_scores, single_request
from rhea.eval.loaders import MTBenchPlusConversation
from rhea.eval.suites.base import SuiteConfigError, SuiteTurn, mean, require_int
from rhea.eval.suites.builtin import CHAINED_QUESTIONS
from rhea.eval.suites.long_horizon import LongHorizonSuite


def builtin_conversations() -> list[MTBenchPlusConversation]:
    """MT-Bench+-shaped conversations from the built-in chained questions (written for rhea), each ending
    with a retrospective question about its first question: for smoke runs with no data file."""
    out = []
    for i in range(0, len(CHAINED_QUESTIONS) - 1, 2):
        a, b = CHAINED_QUESTIONS[i], CHAINED_QUESTIONS[i + 1]
        turns = tuple((text, f"{q['category']}-{q['question_id']}-{n}") for q in (a, b)
                      for n, text in enumerate(q["turns"]))
        question = ("Going back to the very first thing I asked you, repeat your answer in one sentence.",
                    f"{a['category']}-{a['question_id']}-Q")
        out.append(MTBenchPlusConversation(f"builtin-{i // 2}", "retrospection", turns, question))
    return out


def _question_key(turn_info: str) -> str:
    """``"stem-143-1"`` -> ``"stem-143"`` (the MT-Bench question a turn belongs to)."""
    return turn_info.rsplit("-", 1)[0]


class LongMTBenchPlusSuite(LongHorizonSuite):
    """Concatenated MT-Bench+ conversations answered by the model, then their retrospective questions."""

    name = "long-mt-bench-plus"
    default_turns = None  # an episode is as long as its conversations
    score_fields = ("judge_rating", "turn_number")
    #: the turn kinds whose replies the judge rates (`rhea judge` reads this too)
    judged_kinds = ("query", "question")

    def __init__(self, *, data: Sequence[MTBenchPlusConversation] | None = None,
                 judge: Judge | TextGenerator | None = None, n_episodes: int = 2, conversations_per_episode: int = 5):
        conversations = list(data) if data is not None else builtin_conversations()
        super().__init__(data=None, judge=judge, n_episodes=n_episodes, n_facts=0)
        self.data = conversations
        require_int("conversations_per_episode", conversations_per_episode, 1)
        usable = [c for c in self.data if c.question is not None]
        if len(usable) < n_episodes * conversations_per_episode:
            raise SuiteConfigError(
                f"{n_episodes} episodes of {conversations_per_episode} conversations need "
                f"{n_episodes * conversations_per_episode} conversations with a retrospective question; the data has "
                f"{len(usable)}: lower --episodes or conversations_per_episode")
        self.conversations_per_episode = conversations_per_episode

    @staticmethod
    def load(path: str | Path) -> list[MTBenchPlusConversation]:
        """MemoChat's ``mtbenchplus.json``; see `loaders.load_mt_bench_plus`."""
        return loaders.load_mt_bench_plus(path)

    def generate(self, n_turns: int | None = None, seed: int = 0):
        if n_turns is not None:
            raise SuiteConfigError(f"n_turns={n_turns}: a {self.name} episode is as long as its conversations; "
                                   "drop --turns and set conversations_per_episode instead")
        usable = [c for c in self.data if c.question is not None]
        self._order = random.Random(f"{self.name}:{seed}:order").sample(usable, len(usable))
        return super().generate(None, seed)

    def _episode(self, n_turns, rng: random.Random):
        group = [self._order.pop(0) for _ in range(self.conversations_per_episode)]
        turns, asked = [], []
        for conv in group:
            seen: dict[str, list[int]] = defaultdict(list)
            for text, info in conv.turns:
                key = _question_key(info)
                earlier = seen[key]
                turns.append(SuiteTurn(text, "query", meta={
                    "category": info.split("-")[0], "question_id": f"{conv.id}/{key}", "turn_info": info,
                    "turn_number": 2 if earlier else 1,
                    "first_question": turns[earlier[-1]].user if earlier else text, "references": [],
                    "conversation": conv.id}))
                seen[key].append(len(turns) - 1)
            text, info = conv.question
            evidence = list(seen.get(_question_key(info), []))
            asked.append(SuiteTurn(text, "question", meta={"category": "retrospective", "turn_info": info,
                                                           "evidence_turns": evidence, "conversation": conv.id,
                                                           "evidence_users": [turns[i].user for i in evidence],
                                                           "turn_number": 1, "conversation_type": conv.type}))
        return turns + asked, {"conversations": [c.id for c in group], "user_turns": len(turns)}

    def score_turns(self, items) -> list[dict]:
        scores, asked = [], []
        for i, (turn, reply, history) in enumerate(items):
            score = {"category": turn.meta.get("category"), "turn_number": turn.meta.get("turn_number"),
                     "non_answer": non_answer(reply, turn.user)}
            scores.append(score)
            if turn.kind in self.judged_kinds:
                asked.append((i, self.judge_request(turn, reply, history)))
        return judge_scores(self.judge, scores, asked)

    def judge_request(self, turn: SuiteTurn, reply: str, history: Sequence[tuple[str, str]]) -> JudgeRequest:
        """A query reply: `LongHorizonSuite.judge_request`. A retrospective answer: ``single-v1`` on the question
        shown after the exchanges it refers to (their user turns, with the replies `history` holds)."""
        if turn.kind != "question":
            return LongHorizonSuite.judge_request(turn, reply, history)
        replies = {}
        for user, answer in history:  # the last time each referred-to message was answered
            replies[user] = answer
        lines = [f"User: {user}\nAssistant: {replies[user]}" for user in turn.meta["evidence_users"] if user in replies]
        context = "\n\n".join(lines) if lines else "(the earlier exchanges were not recorded)"
        question = (f"[Earlier in a long conversation]\n{context}\n\n[Many turns later, the user asks about that "
                    f"part of the conversation]\n{turn.user}")
        return single_request(question, reply)

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        queries = [s for s in turn_scores if s.get("kind") == "query"]
        questions = [s for s in turn_scores if s.get("kind") == "question"]
        rated = [s for s in queries if s.get("judge_rating") is not None]
        by_decile = defaultdict(list)
        for s in rated:
            by_decile[10 * (s["turn_index"] // 10)].append(s["judge_rating"])
        judged = any(s.get("judge") not in (None, "skipped") for s in queries + questions)
        return {
            "retrospective_judge_mean": mean(s.get("judge_rating") for s in questions),
            "judge_mean": mean(s["judge_rating"] for s in rated),
            "evidence_in_context": mean(s.get("evidence_in_context") for s in questions),
            "judge": "ok" if judged else "skipped",
            "judge_errors": sum(s.get("judge") == "error" for s in queries + questions),
            "judge_by_turn": {t: mean(v) for t, v in sorted(by_decile.items())},
            "non_answers": sum(bool(s.get("non_answer")) for s in queries + questions),
            "retrospective_questions": len(questions),
        }
