"""The instruction model (`Instruction`, `InstructionSpec`), parameter validation and the
registry every checker family registers into."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rhea.eval.checkers.errors import (InstructionArgumentError, InstructionError,
                                       UnknownInstructionError, UnsupportedInstructionError)
from rhea.eval.checkers.language import LANGUAGE_NAMES
from rhea.eval.checkers.text import RELATIONS


# ---------------------------------------------------------------------- parameter validation

def _int_at_least(minimum: int) -> Callable[[str, Any], None]:
    def validate(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    return validate


def _text(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}={value!r} must be a non-empty string")


def _text_list(name: str, value: Any) -> None:
    if (isinstance(value, str) or not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, str) and v.strip() for v in value)):
        raise ValueError(f"{name}={value!r} must be a non-empty list of non-empty strings")


def _relation(name: str, value: Any) -> None:
    if value not in RELATIONS:
        raise ValueError(f"{name}={value!r} must be one of {RELATIONS}")


def _language(name: str, value: Any) -> None:
    if value not in LANGUAGE_NAMES:
        raise UnsupportedInstructionError(
            f"{name}={value!r} is not a language detect_language supports; "
            f"use one of {sorted(LANGUAGE_NAMES)}")


def _letter(name: str, value: Any) -> None:
    if not (isinstance(value, str) and len(value) == 1 and value.isalpha()):
        raise ValueError(f"{name}={value!r} must be a single letter such as 'A'")


def _char(name: str, value: Any) -> None:
    if not (isinstance(value, str) and len(value) == 1 and not value.isspace()):
        raise ValueError(f"{name}={value!r} must be a single visible character such as 'e'")


_POS = _int_at_least(1)
_NONNEG = _int_at_least(0)


# ------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class Instruction:
    """One kind of verifiable instruction; parameters are passed as keyword arguments.

    >>> inst = get_instruction("word_count")
    >>> inst.phrase(relation="at most", num_words=50)
    'From now on, keep every response to at most 50 words.'
    >>> inst.check("Short answer.", relation="at most", num_words=50)
    True
    """

    id: str
    slot: str
    params: Mapping[str, Callable[[str, Any], None]]
    checker: Callable[..., bool] = field(repr=False)
    phrase_template: str | Callable[..., str] = field(repr=False)
    revoke_template: str | Callable[..., str] = field(repr=False)
    sampler: Callable[[random.Random], dict] = field(repr=False)

    def validate(self, kwargs: Mapping[str, Any]) -> None:
        """Raise `InstructionArgumentError` naming any missing, extra or bad parameter."""
        missing = set(self.params) - set(kwargs)
        extra = set(kwargs) - set(self.params)
        if missing or extra:
            raise InstructionArgumentError(
                f"instruction {self.id!r} takes parameters {sorted(self.params)}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}")
        for name, validate in self.params.items():
            try:
                validate(name, kwargs[name])
            except InstructionError:
                raise
            except ValueError as err:
                raise InstructionArgumentError(f"instruction {self.id!r}: {err}") from None

    def check(self, text: str, **kwargs: Any) -> bool:
        """True when `text` follows this instruction with these parameters."""
        self.validate(kwargs)
        return bool(self.checker(text, **kwargs))

    def phrase(self, **kwargs: Any) -> str:
        """How a user gives this instruction, e.g. "From now on, ..."."""
        self.validate(kwargs)
        return _render(self.phrase_template, kwargs)

    def revoke_phrase(self, **kwargs: Any) -> str:
        """How a user takes this instruction back."""
        self.validate(kwargs)
        return _render(self.revoke_template, kwargs)

    def sample_kwargs(self, rng: random.Random) -> dict:
        """Draw parameters from `rng` (same rng state → same parameters)."""
        kwargs = self.sampler(rng)
        self.validate(kwargs)
        return kwargs

    def spec(self, **kwargs: Any) -> "InstructionSpec":
        return InstructionSpec(self.id, kwargs)


def _render(template: str | Callable[..., str], kwargs: Mapping[str, Any]) -> str:
    if callable(template):
        return template(**kwargs)
    shown = {k: ", ".join(f"'{x}'" for x in v) if isinstance(v, (list, tuple)) else v
             for k, v in kwargs.items()}
    return template.format(**shown)


@dataclass(frozen=True)
class InstructionSpec:
    """An instruction id with its parameters: what a conversation turn makes active.

    >>> s = InstructionSpec("no_comma")
    >>> s.check("No commas here."), s.slot
    (True, 'punctuation')
    """

    id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kwargs", dict(self.kwargs))
        self.instruction.validate(self.kwargs)

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def instruction(self) -> Instruction:
        return get_instruction(self.id)

    @property
    def slot(self) -> str:
        return self.instruction.slot

    @property
    def key(self) -> str:
        """A stable string naming id and parameters, e.g. ``start_word(word='Indeed')``."""
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.kwargs.items()))
        return f"{self.id}({args})"

    def check(self, text: str) -> bool:
        return self.instruction.check(text, **self.kwargs)

    def phrase(self) -> str:
        return self.instruction.phrase(**self.kwargs)

    def revoke_phrase(self) -> str:
        return self.instruction.revoke_phrase(**self.kwargs)

    def to_dict(self) -> dict:
        return {"id": self.id, "kwargs": dict(self.kwargs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "InstructionSpec":
        return cls(data["id"], data.get("kwargs") or {})


_REGISTRY: dict[str, Instruction] = {}
_IFEVAL_IDS: dict[str, str] = {}
_MT_EVAL_IDS: dict[str, str] = {}


def _register(id: str, *, slot: str, params: Mapping[str, Callable] | None = None,
              phrase: str | Callable, revoke: str | Callable,
              sample: Callable[[random.Random], dict] | None = None,
              ifeval: str | None = None, mt_eval: str | None = None):
    def decorate(check: Callable[..., bool]) -> Callable[..., bool]:
        sampler = sample or _needs_task_parameters(id, params or {})
        _REGISTRY[id] = Instruction(id, slot, dict(params or {}), check, phrase, revoke, sampler)
        if ifeval:
            _IFEVAL_IDS[ifeval] = id
        if mt_eval:
            _MT_EVAL_IDS[mt_eval] = id
        return check
    return decorate


def _needs_task_parameters(id: str, params: Mapping) -> Callable[[random.Random], dict]:
    def sample(rng: random.Random) -> dict:
        if params:
            raise InstructionArgumentError(
                f"instruction {id!r} takes task-specific parameters {sorted(params)} that "
                "cannot be drawn at random; build it with get_instruction(id).spec(...)")
        return {}
    return sample


def get_instruction(id: str) -> Instruction:
    """The registered instruction named `id` (see `list_instructions()`)."""
    try:
        return _REGISTRY[id]
    except KeyError:
        raise UnknownInstructionError(
            f"unknown instruction id {id!r}; choose one of {list_instructions()}") from None


def list_instructions() -> list[str]:
    """Ids of every registered instruction, sorted."""
    return sorted(_REGISTRY)
