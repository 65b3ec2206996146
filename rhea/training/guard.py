"""One optimizer update that refuses to write NaN or inf into the weights.

A single step whose loss or gradient overflows (bf16 autocast on a GPU, a learning rate too high) would turn
every trained weight into NaN through AdamW, and every later step with it: a Qwen2.5-Coder-1.5B compressor
run on an H200 (bf16 autocast, lr 5e-4, batch 32) reached NaN before its step 150 and spent the rest of
its run training NaN weights. `guarded_update` skips such a step instead (the gradients are
dropped, the weights and optimizer moments stay as they were), the way `torch.amp.GradScaler` skips an
overflowing fp16 step, and `SkipCounter` stops the run with a named error once too many come in a row,
since then the run has diverged rather than met one bad batch.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from rhea.training.errors import NonFiniteTrainingError


@dataclass(frozen=True)
class UpdateOutcome:
    """What one guarded step did: whether the weights moved, the loss and the gradient norm before clipping."""

    applied: bool
    loss: float
    grad_norm: float


def guarded_update(loss: torch.Tensor, params: list[torch.Tensor], optimizer: torch.optim.Optimizer,
                   max_norm: float = 1.0) -> UpdateOutcome:
    """Backward `loss`, clip the gradients of `params` to `max_norm` and step `optimizer`, unless the loss or the
    gradient norm is not finite: then the gradients are cleared and nothing is updated.

    The caller steps its learning-rate schedule and counts the step either way (the data moves on)."""
    value = float(loss.detach())
    if not math.isfinite(value):
        optimizer.zero_grad(set_to_none=True)
        return UpdateOutcome(applied=False, loss=value, grad_norm=float("nan"))
    loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    if not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        return UpdateOutcome(applied=False, loss=value, grad_norm=norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return UpdateOutcome(applied=True, loss=value, grad_norm=norm)


class SkipCounter:
    """Counts skipped updates; raises `NonFiniteTrainingError` at `limit` in a row (0: never)."""

    def __init__(self, limit: int = 10):
        if limit < 0:
            raise ValueError(f"the limit of skipped steps in a row must be >= 0, not {limit}")
        self.limit = limit
        self.total = 0
        self.in_a_row = 0

    def record(self, outcome: UpdateOutcome, step: int, hint: str = "") -> None:
        if outcome.applied:
            self.in_a_row = 0
            return
        self.total += 1
        self.in_a_row += 1
        if self.limit and self.in_a_row >= self.limit:
            raise NonFiniteTrainingError(
                f"{self.in_a_row} steps in a row up to step {step} gave a non-finite loss or gradient norm "
                f"(last: loss {outcome.loss}, gradient norm {outcome.grad_norm}); the weights were left as they "
                f"were before the first of them. {hint or 'Lower the learning rate or train in fp32.'}")


def advance_schedule(scheduler) -> None:
    """Step a learning-rate schedule also after a skipped update (it follows the step count, not the updates),
    without torch's warning that the optimizer has not stepped yet (true when the first update was skipped)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
        scheduler.step()
