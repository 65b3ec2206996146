"""instruction-retention: do global instructions keep holding N turns later?

An episode gives `n_instructions` mutually compatible global instructions ("From now on,
...") between unrelated questions: the first at turn 0, the others at random turns of the
first half (``schedule="staggered"``, the default; ``"upfront"`` gives all at turn 0 as the
first design did); `n_revoke` of them are taken back at random later turns. Every query reply
is checked against the instructions active at that turn: IAR (0–10) per turn, per
instruction, and by distance (turns since *that* instruction was given, so distance is not
the turn index). Each rule is read strictly and loosely (`rhea.eval.checkers.answer`): the
strict IAR is the headline, IFEval's loose reading is reported beside it, and a non-answer
(empty, an echo of the question, degenerate repetition) fails every rule and is counted.
Replies after a revocation are also checked against the revoked instruction
("revoked_still_followed"), which shows a model that cannot let go; it is informational,
since some instructions hold by accident.

Queries and instructions come from the built-in lists, or from a public file via `load`:
MT-Bench ``question.jsonl`` (first turns as queries), MT-Eval ``global_inst.jsonl``
(queries, each paired only with the instructions MT-Eval lists for it), or IFEval
``input_data.jsonl`` (its real instruction parameters as the pool to draw from).

>>> suite = InstructionRetentionSuite(n_episodes=1, n_instructions=2, n_revoke=1)
>>> ep = suite.generate(n_turns=8, seed=4)[0]
>>> [t.kind for t in ep.turns]
['instruction', 'query', 'instruction', 'query', 'query', 'revoke', 'query', 'query']
>>> list(ep.turns[-1].meta["distance"].values())  # given at turn 2, asked at turn 7
[5]
"""
from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rhea.eval import loaders
from rhea.eval.checkers import (SAMPLEABLE, InstructionSpec, UnsupportedInstructionError,
                                from_ifeval, get_instruction, mt_eval_id_map, sample_compatible)
from rhea.eval.checkers.answer import judge_reply
from rhea.eval.suites.base import (Suite, SuiteConfigError, SuiteTurn, fill_turns, mean,
                                   require_int)
from rhea.eval.suites.builtin import ORDINARY_QUESTIONS


#: When instructions are given and revoked: "staggered" (the default) gives them at varied
#: turns and revokes at random later turns, so distance (turns since the instruction) is not the
#: turn index; "upfront" is the first design (all at turn 0, revocations evenly spaced).
SCHEDULES = ("staggered", "upfront")


@dataclass(frozen=True)
class RetentionQuery:
    """A query, and the instruction ids it may carry (None: any)."""

    text: str
    allowed: frozenset[str] | None = None


@dataclass(frozen=True)
class RetentionData:
    """What the suite draws from; `instruction_pool` None means the built-in sampleable set."""

    queries: tuple[RetentionQuery, ...]
    instruction_pool: tuple[InstructionSpec, ...] | None = None
    source: str = "builtin"
    unsupported: tuple[str, ...] = ()


def builtin_data() -> RetentionData:
    return RetentionData(tuple(RetentionQuery(q) for q in ORDINARY_QUESTIONS))


def _sniff(path: Path) -> dict:
    """The first record of a JSON / JSON-lines file, to tell which benchmark it is."""
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        return data[0] if isinstance(data, list) and data else {}
    for _, record in loaders.read_jsonl(path):
        return record
    return {}


def load_retention_data(path: str | Path) -> RetentionData:
    """Read MT-Bench, MT-Eval global-instruction or IFEval files into `RetentionData`."""
    path = Path(path)
    first = _sniff(path)
    if "instruction_id_list" in first:
        pool, unsupported = [], set()
        for record in loaders.load_ifeval(path):
            for inst_id, kwargs in zip(record.instruction_id_list, record.kwargs):
                try:
                    pool.append(from_ifeval(inst_id, kwargs))
                except UnsupportedInstructionError:
                    unsupported.add(inst_id)
        # Task-bound instructions (repeat this prompt, first word of paragraph n) make no
        # sense as global directives over unrelated questions.
        pool = [s for s in dict.fromkeys(pool) if s.id in SAMPLEABLE]
        return RetentionData(builtin_data().queries, tuple(pool), "ifeval",
                             tuple(sorted(unsupported)))
    if "instructions" in first and "query" in first:
        mapping = mt_eval_id_map()
        rows = loaders.load_mt_eval_global_inst(path)
        queries = tuple(
            RetentionQuery(q.query, frozenset(mapping[i] for i in q.instructions if i in mapping))
            for q in rows)
        unsupported = sorted({i for q in rows for i in q.instructions if i not in mapping})
        return RetentionData(queries, None, "mt_eval", tuple(unsupported))
    if "turns" in first or "prompt" in first:
        questions = loaders.load_mt_bench_questions(path)
        return RetentionData(tuple(RetentionQuery(q.turns[0]) for q in questions), None,
                             "mt_bench")
    raise loaders.DataFormatError(
        f"{path}: not an MT-Bench, MT-Eval global_inst or IFEval file (first record keys "
        f"{sorted(first)}); pass one of those formats")


class InstructionRetentionSuite(Suite):
    """Global instructions, then unrelated queries; IAR by turn and by distance."""

    name = "instruction-retention"
    default_turns = 11
    score_fields = ("iar",)

    def __init__(self, *, data: RetentionData | None = None, n_episodes: int = 8,
                 n_instructions: int = 1, n_revoke: int = 0,
                 instructions: Sequence[str] | None = None, schedule: str = "staggered"):
        super().__init__(data=data or builtin_data(), n_episodes=n_episodes)
        require_int("n_instructions", n_instructions, 1)
        require_int("n_revoke", n_revoke, 0)
        if n_revoke > n_instructions:
            raise SuiteConfigError(f"n_revoke={n_revoke} must be <= n_instructions="
                                   f"{n_instructions}: only given instructions can be revoked")
        for inst_id in instructions or ():
            get_instruction(inst_id)  # unknown ids fail here, with the list of known ones
        if schedule not in SCHEDULES:
            raise SuiteConfigError(f"schedule={schedule!r} must be one of {SCHEDULES}")
        self.n_instructions = n_instructions
        self.schedule = schedule
        self.n_revoke = n_revoke
        self.instructions = tuple(instructions) if instructions else None

    load = staticmethod(load_retention_data)

    def min_turns(self) -> int:
        # The instruction turn, then every revocation with a query before and after it.
        return 2 + 2 * self.n_revoke

    def _pool(self) -> list:
        if self.data.instruction_pool is not None:
            pool = list(self.data.instruction_pool)
            if self.instructions:
                pool = [s for s in pool if s.id in self.instructions]
            return pool
        allowed = set().union(*(q.allowed for q in self.data.queries if q.allowed is not None))
        ids = self.instructions or SAMPLEABLE
        return [i for i in ids if not allowed or i in allowed]

    def _episode(self, n_turns: int, rng: random.Random):
        specs = sample_compatible(rng, self.n_instructions, self._pool())
        ids = {s.id for s in specs}
        queries = [q.text for q in self.data.queries if q.allowed is None or ids <= q.allowed]
        if not queries:
            raise SuiteConfigError(f"no query in the data may carry instructions {sorted(ids)}; "
                                   "lower n_instructions or use other data")
        if self.schedule == "upfront":
            given_at = {s.key: 0 for s in specs}
            revoked_order = rng.sample(specs, self.n_revoke)
            slots = n_turns - 1  # turn 0 gives the instructions
            revoke_at = {1 + (j + 1) * slots // (self.n_revoke + 1): spec
                         for j, spec in enumerate(revoked_order)}
        else:
            given_at, revoke_at = self._staggered(specs, n_turns, rng)
        gives: dict[int, list[InstructionSpec]] = defaultdict(list)
        for spec in specs:
            gives[given_at[spec.key]].append(spec)
        active, revoked, turns = [], [], []
        query_stream = iter(fill_turns(rng, queries, n_turns))
        for index in range(n_turns):
            if index in gives:
                active.extend(gives[index])
                turns.append(SuiteTurn(" ".join(s.phrase() for s in gives[index]), "instruction",
                                       list(active), meta=({"given": tuple(gives[index])}
                                                           if self.schedule == "staggered" else {})))
                continue
            if index in revoke_at:
                spec = revoke_at[index]
                active.remove(spec)
                revoked.append(spec)
                turns.append(SuiteTurn(spec.revoke_phrase(), "revoke", list(active),
                                       meta={"revoked": (spec,)}))
                continue
            turns.append(SuiteTurn(next(query_stream), "query", list(active),
                                   meta={"distance": {s.key: index - given_at[s.key]
                                                      for s in active},
                                         "revoked": tuple(revoked)}))
        meta = {"instructions": [s.to_dict() for s in specs], "source": self.data.source}
        if self.schedule == "staggered":  # (the upfront episodes stay byte-identical to before)
            meta.update({"given_at": dict(given_at), "schedule": self.schedule,
                         "revoked_at": {spec.key: i for i, spec in revoke_at.items()}})
        return turns, meta

    def _staggered(self, specs: Sequence[InstructionSpec], n_turns: int, rng: random.Random):
        """Give the first instruction at turn 0 and the others at random turns of the first
        half; revoke `n_revoke` of them at random later turns, each with a query between its
        giving and its revocation and after the revocation."""
        window = max(1, (n_turns - 2 * self.n_revoke) // 2)
        given_at = {specs[0].key: 0}
        for spec in specs[1:]:
            given_at[spec.key] = rng.randrange(window)
        events = set(given_at.values())
        revoke_at: dict[int, InstructionSpec] = {}
        for spec in rng.sample(list(specs), self.n_revoke):
            free = [t for t in range(given_at[spec.key] + 2, n_turns - 1)
                    if t not in events and t - 1 not in events]
            if not free:
                raise SuiteConfigError(
                    f"n_turns={n_turns} leaves no turn to revoke an instruction given at turn "
                    f"{given_at[spec.key]} with a query before and after it; raise n_turns or "
                    "lower n_revoke")
            turn = rng.choice(free)
            revoke_at[turn] = spec
            events.add(turn)
        return given_at, revoke_at

    def score_turn(self, turn: SuiteTurn, reply: str, *, history=()) -> dict:
        if turn.kind != "query":
            return {"iar": None}
        judged = judge_reply(turn.active_instructions, reply, turn.user)
        stale = judge_reply(turn.meta.get("revoked", ()), reply, turn.user)
        strict, loose = judged["strict"], judged["loose"]
        return {"iar": 10.0 * sum(strict.values()) / len(strict) if strict else None,
                "iar_loose": 10.0 * sum(loose.values()) / len(loose) if loose else None,
                "adherence": strict, "adherence_loose": loose,
                "non_answer": judged["non_answer"],
                "distance": dict(turn.meta.get("distance", {})),
                "revoked_followed": stale["strict"]}

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        queries = [s for s in turn_scores if s.get("kind") == "query"]
        by_turn, by_distance, by_instruction, by_instruction_loose = (
            defaultdict(list) for _ in range(4))
        stale, reasons = [], Counter()
        for score in queries:
            by_turn[score["turn_index"]].append(score["iar"])
            loose = score.get("adherence_loose", score["adherence"])
            for key, ok in score["adherence"].items():
                by_distance[score["distance"][key]].append(10.0 * ok)
                by_instruction[key.split("(")[0]].append(10.0 * ok)
                by_instruction_loose[key.split("(")[0]].append(10.0 * loose[key])
            stale.extend(score["revoked_followed"].values())
            if score.get("non_answer"):
                reasons[score["non_answer"]] += 1
        scored = [s for s in queries if s["iar"] is not None]
        return {
            "iar": mean(s["iar"] for s in queries),
            "iar_loose": mean(s.get("iar_loose", s["iar"]) for s in queries),
            "iar_by_turn": {t: mean(v) for t, v in sorted(by_turn.items())},
            "iar_by_distance": {d: mean(v) for d, v in sorted(by_distance.items())},
            "iar_by_instruction": {i: mean(v) for i, v in sorted(by_instruction.items())},
            "iar_loose_by_instruction": {i: mean(v)
                                         for i, v in sorted(by_instruction_loose.items())},
            "checks_by_instruction": {i: len(v) for i, v in sorted(by_instruction.items())},
            "non_answers": sum(reasons.values()),
            "non_answer_rate": (sum(reasons.values()) / len(scored)) if scored else None,
            "non_answers_by_reason": dict(sorted(reasons.items())),
            "revoked_still_followed": (sum(stale) / len(stale)) if stale else None,
        }
