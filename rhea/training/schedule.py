"""Learning-rate schedules of `rhea train` (``optim.schedule``), as multipliers of ``optim.lr`` per optimizer step.

* ``cosine`` (the paper's): linear warm-up from 0, then a cosine decay to 0 at the last step
  (``transformers.get_cosine_schedule_with_warmup``).
* ``constant`` (the compressor recipe's): a linear warm-up that reaches the full rate at step
  ``warmup_steps`` (the first step already trains at ``1 / warmup_steps`` of it), then constant; with
  ``cooldown_steps`` N the rate falls linearly to 0 over the last N steps before ``max_steps``.

>>> [round(constant_factor(s, warmup=10, cooldown=100, max_steps=1000), 3) for s in (0, 9, 500, 900, 950, 999)]
[0.1, 1.0, 1.0, 1.0, 0.5, 0.01]
"""
from __future__ import annotations

import math

import torch


def constant_factor(step: int, *, warmup: int, cooldown: int = 0, max_steps: int | None = None) -> float:
    """The ``constant`` schedule's multiplier at optimizer step `step` (0-based): ``min(1, (step + 1) / warmup)``,
    times ``(max_steps - step) / cooldown`` (clipped to [0, 1]) when `cooldown` is set."""
    factor = min(1.0, (step + 1) / max(1, warmup))
    if cooldown:
        if max_steps is None:
            raise ValueError("a cooldown needs max_steps (the step at which the rate reaches 0)")
        factor *= min(1.0, max(0.0, (max_steps - step) / cooldown))
    return factor


def build_scheduler(optimizer: torch.optim.Optimizer, optim, total_steps: int):
    """The scheduler ``optim`` (an `OptimSection`) asks for over `total_steps` optimizer steps.

    The warm-up is ``optim.warmup_steps`` when set, else ``ceil(optim.warmup_ratio * total_steps)``; a
    cooldown ends at `total_steps` (``optim.max_steps``, or the epochs' steps when fewer)."""
    warmup = optim.warmup_steps if optim.warmup_steps is not None else math.ceil(optim.warmup_ratio * total_steps)
    if optim.schedule == "cosine":
        from transformers import get_cosine_schedule_with_warmup

        return get_cosine_schedule_with_warmup(optimizer, warmup, total_steps)
    cooldown = min(optim.cooldown_steps, total_steps)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: constant_factor(s, warmup=warmup, cooldown=cooldown, max_steps=total_steps))
