"""multi-session-qa: questions about a long history of earlier sessions, answered from the history.

An episode's history is fed, not generated: conversations from the data (each one or more sessions of
turns with the replies given then) are concatenated in a seeded order into one long history, LoCoMo-style
(sessions numbered from 1 in the order they are fed, each turn carrying ``{"session": n, "date": ...}`` in
its meta, so a turn shown away from its place carries its session header), until it holds at least
`min_history_turns` turns (default 300 with a data file; 0: one conversation per episode, the default for
the built-in history). The policy catches up on the history
turn by turn (`ContextPolicy.catch_up`); then each question is asked on its own (``kind="question"``,
`ChatSession.ask`): every question sees the same history, and the policy's state (a kept plan, its
memories) carries on from question to question. Episodes use disjoint conversations.

Haystack (``haystack=`` a chat file or loaded chats, ``history_tokens=`` N; ``rhea bench --haystack PATH
--history-tokens N``): LongMemEval's construction, the evidence sessions among filler sessions. Chats read by
`rhea.eval.loaders.load_filler_chats` (UltraChat, ShareGPT) are placed between the episode's evidence sessions
(the evidence keeps its order; each chat goes before a seeded evidence session or after the last) until the
history holds N content tokens, counted as a plan's ledger counts the full history (user and reply text of
each turn plus one session header per session) with `tokenizer` (the bench model's in ``rhea bench``; None:
rhea's words-and-punctuation approximation). Chats come in a seeded order per episode (same seed, same
histories), each at most once per episode and again in other episodes; a chat that states the gold answer of a
question the episode asks is left out (yes / no answers aside), so only the evidence turns hold what a
question asks. Filler sessions are numbered with the others and take the date of the evidence session before
them (of the first one after, when none is before; no date when the evidence has none). When the usable chats
run out short of N, generating raises `SuiteConfigError` saying how many tokens they reached.
`min_history_turns` still counts the evidence conversations' turns; the episode meta names the filler
(``filler_turns``: history indices, ``filler_sessions``, ``filler_chats``) and the history's
``history_tokens``.

Scores per question, against the gold answer: SQuAD token F1 (``f1``), whether the reply contains the
normalised gold answer (``contains``), and, from the plan, whether the evidence turns were in the context
(``evidence_in_context``: raw, latent or recalled; ``evidence_raw``: as text; over the questions that got
a plan: a turn that failed, e.g. a prompt over the model's window, scores F1 0 and is counted in the run's
``errors``), with the question's ``category`` for a breakdown. With a `judge` (``rhea bench --judge-local MODEL`` /
``--judge-url``, or `rhea judge` on the finished run), each reply is also judged blind for correctness with
LoCoMo's judge (`rhea.eval.judge.correctness_request`: question, gold answer, reply; no policy name, no
context): ``judge_correct``, the share judged CORRECT, with `judge_check`: how often the judge calls an answer
that is the gold's words exactly correct, and one sharing no word with it wrong.

Data (`rhea.eval.loaders.load_multi_session`): the project's format (sessions with optional dates,
questions with gold answers and evidence turn ids), MemoChat's TopiOCQA conversations (turn-recall
questions built from each turn, quoting its user words), ConvLab-3 MultiWOZ / SGD dialogues (questions on
the final dialogue state, evidence = the turn that set the value). With no data, a small built-in
history runs (for smoke tests only).

A real run on the embedded model (four policies, 20 questions over 300+ turns of TopiOCQA)::

    rhea bench --suite multi-session-qa --data ../shared/data/dialogue_corpora/memochat_topiocqa_test_question.jsonl \\
        --policies vanilla,bm25,recent-k,rhea --episodes 1 --turns 20 --max-new-tokens 32 --out runs/msqa

The same questions over 20k-token histories, TopiOCQA among UltraChat chats::

    rhea bench --suite multi-session-qa --data ../shared/data/dialogue_corpora/memochat_topiocqa_test_question.jsonl \\
        --haystack ../shared/data/dialogue_corpora/ultrachat_200k_sample20.json --history-tokens 20000 \\
        --policies bm25,recent-k,rhea --episodes 1 --turns 20 --max-new-tokens 32 --out runs/msqa-haystack

>>> suite = MultiSessionQASuite(n_episodes=1)
>>> ep = suite.generate(seed=0)[0]
>>> ep.turns[0].kind, ep.history[0]["meta"]["session"]
('question', 1)
"""
from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from rhea.context.conversation import Turn, session_header
from rhea.eval import loaders
from rhea.eval.judge import Judge, JudgeRequest, correctness_request, judge_scores
from rhea.eval.loaders import MultiSessionConversation, Session, SessionQuestion, SessionTurn
from rhea.eval.suites.base import Suite, SuiteConfigError, SuiteTurn, mean, normalize_answer, require_int


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD's token F1 between `prediction` and `gold` after `normalize_answer`.

    >>> round(token_f1("It was Mariah Carey, I think", "Mariah Carey."), 3)
    0.5
    """
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def contains_answer(prediction: str, gold: str) -> bool:
    """Whether the normalised gold answer occurs in the normalised reply as whole words.

    >>> contains_answer("She was born in 1969.", "1969"), contains_answer("in 19690", "1969")
    (True, False)
    """
    ref = normalize_answer(gold)
    return bool(ref) and re.search(rf"(?<!\w){re.escape(ref)}(?!\w)", normalize_answer(prediction)) is not None


def builtin_data() -> list[MultiSessionConversation]:
    """A small dated history written for rhea, so the suite runs with no data file (smoke tests)."""
    def turns(cid, pairs):
        return tuple(SessionTurn(f"{cid}:{i}", u, a) for i, (u, a) in enumerate(pairs))

    a = turns("trip", [("I booked flights to Lisbon for the conference.", "Great, enjoy Lisbon!"),
                       ("My talk is about soil bacteria.", "That sounds like a fascinating topic."),
                       ("Any tips for jet lag?", "Sleep on local time from the first night.")])
    b = turns("garden", [("I planted three apple trees today.", "Lovely, which varieties?"),
                         ("Two Braeburn and one Cox.", "Good choices for a temperate garden."),
                         ("The soil here is quite clay-heavy.", "Add compost to loosen it.")])
    return [MultiSessionConversation("builtin", (Session(a, "2024-03-02"), Session(b, "2024-04-15")), (
        SessionQuestion("Which city did I book flights to?", "Lisbon", ("trip:0",), "single-hop"),
        SessionQuestion("What is my conference talk about?", "soil bacteria", ("trip:1",), "single-hop"),
        SessionQuestion("How many apple trees did I plant?", "three", ("garden:0",), "single-hop"),
        SessionQuestion("On what date did I plant the apple trees?", "2024-04-15", ("garden:0",), "date")),
        "builtin")]


def judge_check(scores: Sequence[dict]) -> dict:
    """How far a correctness judge agrees with the rule scores where they leave no doubt: of the judged replies
    that hold exactly the gold answer's words (F1 1), the share judged correct (``exact_judged_correct``, of
    ``exact``), and of those sharing no word with it (F1 0), the share judged wrong (``disjoint_judged_wrong``, of
    ``disjoint``). A judge far below 1 on either is not measuring correctness.

    >>> judge_check([{"f1": 1.0, "judge_rating": 1.0}, {"f1": 1.0, "judge_rating": 0.0}, {"f1": 0.0, "judge_rating": 0.0}])
    {'exact': 2, 'exact_judged_correct': 0.5, 'disjoint': 1, 'disjoint_judged_wrong': 1.0}
    """
    rated = [s for s in scores if s.get("judge_rating") is not None and s.get("f1") is not None]
    exact = [s["judge_rating"] for s in rated if s["f1"] == 1.0]
    disjoint = [1.0 - s["judge_rating"] for s in rated if s["f1"] == 0.0]
    return {"exact": len(exact), "exact_judged_correct": mean(exact),
            "disjoint": len(disjoint), "disjoint_judged_wrong": mean(disjoint)}


#: The history an episode reaches with a data file, in turns: the long regime (LoCoMo's conversations hold 300+).
DEFAULT_HISTORY_TURNS = 300


class MultiSessionQASuite(Suite):
    """A fed multi-session history, then independent questions scored by F1, containment and evidence."""

    name = "multi-session-qa"
    default_turns = None  # every question of the episode's conversations
    score_fields = ("f1",)
    #: the turn kinds whose replies the judge rates (`rhea judge` reads this too)
    judged_kinds = ("question",)

    def __init__(self, *, data: Sequence[MultiSessionConversation] | None = None, n_episodes: int = 1,
                 min_history_turns: int | None = None,
                 haystack: str | Path | Sequence[MultiSessionConversation] | None = None,
                 history_tokens: int | None = None, tokenizer: Any = None, judge: Any = None):
        super().__init__(data=list(data) if data is not None else builtin_data(), n_episodes=n_episodes)
        self.judge = judge if judge is None or isinstance(judge, Judge) else Judge(judge)
        if not self.data:
            raise SuiteConfigError("data has no conversations; pass at least one (see rhea.eval.loaders."
                                   "load_multi_session)")
        if min_history_turns is None:
            min_history_turns = DEFAULT_HISTORY_TURNS if data is not None else 0
        require_int("min_history_turns", min_history_turns, 0)
        self.min_history_turns = min_history_turns
        if (haystack is None) != (history_tokens is None):
            given, missing = (("haystack", "history_tokens") if history_tokens is None
                              else ("history_tokens", "haystack"))
            raise SuiteConfigError(f"{given} needs {missing}: pad the history with filler chats (haystack, e.g. "
                                   "--haystack ultrachat.json) up to a token count (history_tokens, e.g. "
                                   "--history-tokens 20000); pass both or neither")
        if history_tokens is not None:
            require_int("history_tokens", history_tokens, 1)
        if isinstance(haystack, (str, Path)):
            haystack = loaders.load_filler_chats(haystack)
        self.haystack = list(haystack) if haystack is not None else None
        if self.haystack is not None and not self.haystack:
            raise SuiteConfigError("haystack has no chats; pass at least one (see rhea.eval.loaders.load_filler_chats)")
        self.history_tokens = history_tokens
        self.tokenizer = tokenizer
        self._filler_texts: list[str] | None = None

    load = staticmethod(loaders.load_multi_session)

    def _groups(self, rng: random.Random) -> list[list[MultiSessionConversation]]:
        """`n_episodes` disjoint groups of conversations, in a seeded order, each of at least
        `min_history_turns` turns (one conversation each when that is 0)."""
        order = rng.sample(self.data, len(self.data))
        groups, current = [], []
        for conv in order:
            current.append(conv)
            if sum(c.n_turns for c in current) >= self.min_history_turns:
                groups.append(current)
                current = []
            if len(groups) == self.n_episodes:
                return groups
        total = sum(c.n_turns for c in self.data)
        raise SuiteConfigError(
            f"the data ({len(self.data)} conversations, {total} turns) gives only {len(groups)} disjoint episodes of "
            f"at least {self.min_history_turns} turns, not n_episodes={self.n_episodes}; lower --episodes or "
            "min_history_turns, or pass more data")

    def generate(self, n_turns: int | None = None, seed: int = 0):
        self._seed, self._episode_number = seed, 0
        self._groups_left = self._groups(random.Random(f"{self.name}:{seed}:groups"))
        return super().generate(n_turns, seed)

    def _count(self, text: str) -> int:
        from rhea.policies.assemble import count_tokens

        return count_tokens(text, self.tokenizer)

    def _history_tokens(self, sessions: Sequence[tuple[MultiSessionConversation, Session, str, bool]]) -> int:
        """The content tokens of a history of `sessions` (``(conversation, session, date, filler)``), numbered from 1,
        counted as a plan's ledger counts the full history: each turn's user and reply text, and one session
        header per session."""
        total = 0
        for number, (_, session, date, _) in enumerate(sessions, start=1):
            header = session_header(Turn(".", "", {"session": number, **({"date": date} if date else {})}))
            total += self._count(header + " ") + sum(self._count(t.user) + self._count(t.assistant)
                                                     for t in session.turns)
        return total

    def _with_filler(self, group: Sequence[MultiSessionConversation], number: int, answers: Sequence[str]
                     ) -> list[tuple[MultiSessionConversation, Session, str, bool]]:
        """The evidence sessions of `group` in order with filler chats of the haystack placed between them (each
        before a seeded evidence session, or after the last) until the history holds `history_tokens`: chats in a
        seeded order, each at most once, leaving out those that state one of `answers` (the gold answers of the
        questions asked; as whole words after `normalize_answer`, yes / no and the like aside)."""
        evidence = [(conv, session, session.date, False) for conv in group for session in conv.sessions]
        if self.haystack is None:
            return evidence
        if self._filler_texts is None:  # each chat's text, normalised once as answers are
            self._filler_texts = [normalize_answer(" ".join(f"{t.user} {t.assistant}" for s in f.sessions
                                                            for t in s.turns)) for f in self.haystack]
        answers = {normalize_answer(a) for a in answers} - {normalize_answer(u) for u in loaders.UNINFORMATIVE_ANSWERS}
        stated = re.compile("|".join(rf"(?<!\w){re.escape(a)}(?!\w)" for a in sorted(answers))) if answers else None
        usable = [f for f, text in zip(self.haystack, self._filler_texts) if stated is None or not stated.search(text)]
        rng = random.Random(f"{self.name}:{self._seed}:haystack:{number}")
        order = rng.sample(usable, len(usable))
        gaps = [rng.randrange(len(evidence) + 1) for _ in order]
        # a filler session before evidence session g takes the date of the last dated one before g, else the next
        dated = [e[2] for e in evidence]
        dates = [next((d for d in reversed(dated[:g]) if d), "") or next((d for d in dated[g:] if d), "")
                 for g in range(len(evidence) + 1)]
        chosen = 0
        while True:
            placed = [[] for _ in range(len(evidence) + 1)]
            for chat, gap in zip(order[:chosen], gaps):
                placed[gap].append(chat)
            sessions = []
            for gap, fillers in enumerate(placed):
                for chat in fillers:
                    sessions.extend((chat, filler, dates[gap], True) for filler in chat.sessions)
                if gap < len(evidence):
                    sessions.append(evidence[gap])
            reached = self._history_tokens(sessions)
            if reached >= self.history_tokens:
                return sessions
            if chosen == len(order):
                raise SuiteConfigError(
                    f"episode {number}: the haystack's {len(usable)} usable chats (of {len(self.haystack)}; a chat "
                    f"stating the gold answer of a question asked is left out) bring its history to {reached} "
                    f"tokens, short of history_tokens={self.history_tokens}; each chat is used at most once per "
                    "episode, so lower --history-tokens or pass a haystack file with more chats")
            chosen += 1

    def _episode(self, n_turns: int | None, rng: random.Random):
        group = self._groups_left.pop(0)
        number, self._episode_number = self._episode_number, self._episode_number + 1
        questions = [(conv, q) for conv in group for q in conv.questions]
        if not questions:
            raise SuiteConfigError(f"conversations {[c.id for c in group]} hold no questions; pass data with questions")
        if n_turns is not None and n_turns > len(questions):
            raise SuiteConfigError(f"n_turns={n_turns} asks more questions than the episode's {len(questions)} "
                                   f"({len(group)} conversations); lower --turns or raise --min-history-turns")
        chosen = rng.sample(questions, n_turns if n_turns is not None else len(questions))
        history, position, filler_turns, filler_sessions = [], {}, [], []
        sessions = self._with_filler(group, number, [q.answer for _, q in chosen])
        for session_number, (conv, session, date, filler) in enumerate(sessions, start=1):
            meta = {"session": session_number, **({"date": date} if date else {})}
            if filler:
                filler_sessions.append(session_number)
            for turn in session.turns:
                if filler:
                    filler_turns.append(len(history))
                else:
                    position[(conv.id, turn.id)] = (len(history), session_number)
                history.append({"user": turn.user, "assistant": turn.assistant, "meta": dict(meta)})
        session_number = len(sessions)
        turns = []
        for conv, q in chosen:
            evidence = [position[(conv.id, e)][0] for e in q.evidence]
            session = position[(conv.id, q.evidence[0])][1]
            turns.append(SuiteTurn(q.question.replace("{session}", str(session)), "question", expected=q.answer,
                                   meta={"evidence": evidence, "category": q.category or "uncategorised",
                                         "conversation": conv.id, "session": session}))
        meta = {"conversations": [c.id for c in group], "history_turns": len(history), "sessions": session_number,
                "sources": sorted({c.source for c in group}), "history": history}
        if self.haystack is not None:
            meta.update({"history_tokens": self._history_tokens(sessions), "history_tokens_target": self.history_tokens,
                         "filler_chats": list(dict.fromkeys(c.id for c, _, _, filler in sessions if filler)),
                         "filler_sessions": filler_sessions, "filler_turns": filler_turns})
        return turns, meta

    def score_turn(self, turn: SuiteTurn, reply: str, *, history=()) -> dict:
        return self.score_turns([(turn, reply, history)])[0]

    def score_turns(self, items) -> list[dict]:
        """F1, containment and category of each question reply of ``(turn, reply, history)``, and the judge's
        verdicts (`judge_scores`: all in one call; "skipped" without a judge)."""
        scores = [{} if turn.kind != "question" else
                  {"f1": token_f1(reply, turn.expected), "contains": float(contains_answer(reply, turn.expected)),
                   "category": turn.meta["category"]} for turn, reply, _ in items]
        asked = [(i, self.judge_request(turn, reply, history)) for i, (turn, reply, history) in enumerate(items)
                 if turn.kind in self.judged_kinds]
        return judge_scores(self.judge, scores, asked)

    @staticmethod
    def judge_request(turn: SuiteTurn, reply: str, history: Sequence[tuple[str, str]] = ()) -> JudgeRequest:
        """LoCoMo's correctness judge on a question's reply: the question, its gold answer and the reply only."""
        return correctness_request(turn.user, turn.expected, reply)

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        asked = [s for s in turn_scores if s.get("kind") == "question"]
        by_category = defaultdict(list)
        for s in asked:
            by_category[s["category"]].append(s)
        summary = {"f1": mean(s.get("f1") for s in asked), "contains": mean(s.get("contains") for s in asked),
                   "evidence_in_context": mean(s.get("evidence_in_context") for s in asked),
                   "evidence_raw": mean(s.get("evidence_raw") for s in asked), "questions": len(asked)}
        judged = [s for s in asked if s.get("judge") in ("ok", "error")]
        if judged:  # a judged run: the share judged correct, over the replies the judge labelled
            summary.update({"judge_correct": mean(s.get("judge_rating") for s in judged),
                            "judge_errors": sum(s["judge"] == "error" for s in judged),
                            "judge_completed": sum(s.get("judge_source") == "completed" for s in judged),
                            "judge_check": judge_check(judged)})
        summary["by_category"] = {c: {"n": len(v), "f1": mean(s.get("f1") for s in v),
                                      "contains": mean(s.get("contains") for s in v),
                                      "evidence_in_context": mean(s.get("evidence_in_context") for s in v),
                                      **({"judge_correct": mean(s.get("judge_rating") for s in v)} if judged else {})}
                                  for c, v in sorted(by_category.items())}
        return summary
