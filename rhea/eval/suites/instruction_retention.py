"""instruction-retention: do global instructions keep holding N turns later?

An episode opens with one turn giving `n_instructions` mutually compatible global
instructions ("From now on, ..."), then asks unrelated questions; `n_revoke` of the
instructions are taken back at evenly spaced turns. Every query reply is checked against
the instructions active at that turn: IAR (0–10) per turn, per instruction, and by
distance (turns since the instruction was given). Replies after a revocation are also
checked against the revoked instruction ("revoked_still_followed"), which shows a model
that cannot let go; it is informational, since some instructions hold by accident.

Queries and instructions come from the built-in lists, or from a public file via `load`:
MT-Bench ``question.jsonl`` (first turns as queries), MT-Eval ``global_inst.jsonl``
(queries, each paired only with the instructions MT-Eval lists for it), or IFEval
``input_data.jsonl`` (its real instruction parameters as the pool to draw from).

>>> suite = InstructionRetentionSuite(n_episodes=1, n_instructions=2, n_revoke=1)
>>> ep = suite.generate(n_turns=6, seed=3)[0]
>>> [t.kind for t in ep.turns]
['instruction', 'query', 'query', 'revoke', 'query', 'query']
"""
from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rhea.eval import loaders
from rhea.eval.checkers import (SAMPLEABLE, InstructionSpec, UnsupportedInstructionError,
                                adherence, from_ifeval, get_instruction, iar,
                                mt_eval_id_map, sample_compatible)
from rhea.eval.suites.base import (Suite, SuiteConfigError, SuiteTurn, fill_turns, mean,
                                   require_int)
from rhea.eval.suites.builtin import ORDINARY_QUESTIONS


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

    def __init__(self, *, data: RetentionData | None = None, n_episodes: int = 4,
                 n_instructions: int = 1, n_revoke: int = 0,
                 instructions: Sequence[str] | None = None):
        super().__init__(data=data or builtin_data(), n_episodes=n_episodes)
        require_int("n_instructions", n_instructions, 1)
        require_int("n_revoke", n_revoke, 0)
        if n_revoke > n_instructions:
            raise SuiteConfigError(f"n_revoke={n_revoke} must be <= n_instructions="
                                   f"{n_instructions}: only given instructions can be revoked")
        for inst_id in instructions or ():
            get_instruction(inst_id)  # unknown ids fail here, with the list of known ones
        self.n_instructions = n_instructions
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
        revoked_order = rng.sample(specs, self.n_revoke)
        slots = n_turns - 1  # turn 0 gives the instructions
        revoke_at = {1 + (j + 1) * slots // (self.n_revoke + 1): spec
                     for j, spec in enumerate(revoked_order)}
        active, revoked = list(specs), []
        turns = [SuiteTurn(" ".join(s.phrase() for s in specs), "instruction", specs)]
        query_stream = iter(fill_turns(rng, queries, n_turns))
        for index in range(1, n_turns):
            if index in revoke_at:
                spec = revoke_at[index]
                active.remove(spec)
                revoked.append(spec)
                turns.append(SuiteTurn(spec.revoke_phrase(), "revoke", active,
                                       meta={"revoked": (spec,)}))
                continue
            turns.append(SuiteTurn(next(query_stream), "query", active,
                                   meta={"distance": {s.key: index for s in active},
                                         "revoked": tuple(revoked)}))
        return turns, {"instructions": [s.to_dict() for s in specs],
                       "source": self.data.source}

    def score_turn(self, turn: SuiteTurn, reply: str, *, history=()) -> dict:
        if turn.kind != "query":
            return {"iar": None}
        return {"iar": iar(turn.active_instructions, reply),
                "adherence": adherence(turn.active_instructions, reply),
                "distance": dict(turn.meta.get("distance", {})),
                "revoked_followed": adherence(turn.meta.get("revoked", ()), reply)}

    def _aggregate(self, turn_scores: Sequence[dict]) -> dict:
        queries = [s for s in turn_scores if s.get("kind") == "query"]
        by_turn, by_distance, by_instruction = (defaultdict(list) for _ in range(3))
        stale = []
        for score in queries:
            by_turn[score["turn_index"]].append(score["iar"])
            for key, ok in score["adherence"].items():
                by_distance[score["distance"][key]].append(10.0 * ok)
                by_instruction[key.split("(")[0]].append(10.0 * ok)
            stale.extend(score["revoked_followed"].values())
        return {
            "iar": mean(s["iar"] for s in queries),
            "iar_by_turn": {t: mean(v) for t, v in sorted(by_turn.items())},
            "iar_by_distance": {d: mean(v) for d, v in sorted(by_distance.items())},
            "iar_by_instruction": {i: mean(v) for i, v in sorted(by_instruction.items())},
            "revoked_still_followed": (sum(stale) / len(stale)) if stale else None,
        }
