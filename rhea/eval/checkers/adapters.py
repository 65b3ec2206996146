"""IFEval and MT-Eval adapters: their instruction ids and records, scored by our checkers."""
from __future__ import annotations

import random
from typing import Any, Mapping

from rhea.eval.checkers.errors import InstructionArgumentError, UnsupportedInstructionError
from rhea.eval.checkers.registry import _IFEVAL_IDS, _MT_EVAL_IDS, InstructionSpec, get_instruction


def ifeval_id_map() -> dict[str, str]:
    """IFEval instruction id → our instruction id, for every IFEval id we can check."""
    return dict(_IFEVAL_IDS)


def mt_eval_id_map() -> dict[str, str]:
    """MT-Eval global-instruction id → our instruction id (parameters are ours to draw)."""
    return dict(_MT_EVAL_IDS)


def from_ifeval(instruction_id: str, kwargs: Mapping[str, Any] | None = None
                ) -> InstructionSpec:
    """The spec for one IFEval (``input_data.jsonl``) instruction id and its kwargs.

    Keys whose value is None are dropped (the Hugging Face copy of IFEval pads every
    kwargs dict with them).

    >>> from_ifeval("length_constraints:number_words", {"relation": "at least", "num_words": 300}).key
    "word_count(num_words=300, relation='at least')"
    """
    if instruction_id not in _IFEVAL_IDS:
        raise UnsupportedInstructionError(
            f"IFEval instruction {instruction_id!r} has no checker here; supported: "
            f"{sorted(_IFEVAL_IDS)}")
    clean = {k: v for k, v in (kwargs or {}).items() if v is not None}
    return InstructionSpec(_IFEVAL_IDS[instruction_id], clean)


def from_mt_eval(instruction_id: str, rng: random.Random) -> InstructionSpec:
    """A spec for an MT-Eval global-instruction id, parameters drawn from `rng`."""
    if instruction_id not in _MT_EVAL_IDS:
        raise UnsupportedInstructionError(
            f"MT-Eval instruction {instruction_id!r} has no checker here; supported: "
            f"{sorted(_MT_EVAL_IDS)}")
    inst = get_instruction(_MT_EVAL_IDS[instruction_id])
    return inst.spec(**inst.sample_kwargs(rng))


def check_ifeval(record: Mapping[str, Any], response: str, *,
                 on_unsupported: str = "raise") -> dict:
    """Score one IFEval record (``instruction_id_list`` + ``kwargs``) against `response`.

    Returns ``{"results": {ifeval_id: bool}, "unsupported": [ids], "follow_all": bool|None}``;
    ``follow_all`` is None when nothing could be checked. With ``on_unsupported="report"``
    unknown ids are listed instead of raising; they never count as followed.

    >>> rec = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    >>> check_ifeval(rec, "Fine.")["follow_all"]
    True
    """
    if on_unsupported not in ("raise", "report"):
        raise ValueError(f"on_unsupported={on_unsupported!r} must be 'raise' or 'report'")
    ids = record["instruction_id_list"]
    all_kwargs = record.get("kwargs") or [{}] * len(ids)
    if len(all_kwargs) != len(ids):
        raise InstructionArgumentError(
            f"IFEval record has {len(ids)} instruction ids but {len(all_kwargs)} kwargs "
            "dicts; they must be parallel lists")
    results, unsupported = {}, []
    for inst_id, kwargs in zip(ids, all_kwargs):
        try:
            spec = from_ifeval(inst_id, kwargs)
        except UnsupportedInstructionError:
            if on_unsupported == "raise":
                raise
            unsupported.append(inst_id)
            continue
        results[inst_id] = spec.check(response)
    follow_all = all(results.values()) if results else None
    return {"results": results, "unsupported": unsupported, "follow_all": follow_all}
