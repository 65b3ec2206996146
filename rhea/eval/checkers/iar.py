"""Scoring: per-instruction adherence and the instruction adherence rate (IAR)."""
from __future__ import annotations

from typing import Iterable

from rhea.eval.checkers.registry import InstructionSpec


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
