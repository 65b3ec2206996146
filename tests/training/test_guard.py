"""rhea.training.guard: a step with a non-finite loss or gradient leaves weights and optimizer state untouched;
too many in a row stop the run with a named error."""
import math

import pytest
import torch

from rhea.training.errors import NonFiniteTrainingError
from rhea.training.guard import SkipCounter, UpdateOutcome, guarded_update


def _setup():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(4))
    opt = torch.optim.AdamW([p], lr=0.1)
    return p, opt


def test_a_finite_step_updates_and_reports_the_unclipped_norm():
    p, opt = _setup()
    before = p.detach().clone()
    out = guarded_update((p * 3.0).sum(), [p], opt, max_norm=1.0)
    assert out.applied and math.isclose(out.grad_norm, 6.0, rel_tol=1e-6)  # |(3,3,3,3)| before clipping
    assert not torch.equal(p.detach(), before) and p.grad is None
    assert opt.state[p]["step"] == 1


def test_a_nan_loss_skips_without_a_backward():
    p, opt = _setup()
    before = p.detach().clone()
    out = guarded_update(p.sum() * float("nan"), [p], opt)
    assert not out.applied and math.isnan(out.loss)
    assert torch.equal(p.detach(), before) and p.grad is None and not opt.state


def test_an_infinite_gradient_skips_and_keeps_the_adamw_moments():
    p, opt = _setup()
    guarded_update(p.sum(), [p], opt)
    moments = {k: v.clone() for k, v in opt.state[p].items()}
    before = p.detach().clone()
    h = p.register_hook(lambda g: g * float("inf"))
    out = guarded_update(p.sum(), [p], opt)
    h.remove()
    assert not out.applied and math.isfinite(out.loss) and not math.isfinite(out.grad_norm)
    assert torch.equal(p.detach(), before) and p.grad is None
    assert all(torch.equal(opt.state[p][k], v) for k, v in moments.items())


def test_skip_counter_stops_at_the_limit_in_a_row_only():
    ok, bad = UpdateOutcome(True, 1.0, 1.0), UpdateOutcome(False, float("nan"), float("nan"))
    c = SkipCounter(3)
    for step, o in enumerate([bad, bad, ok, bad, bad], 1):
        c.record(o, step)
    assert c.total == 4 and c.in_a_row == 2
    with pytest.raises(NonFiniteTrainingError, match="3 steps in a row up to step 6.*lower it"):
        c.record(bad, 6, hint="lower it")
    never = SkipCounter(0)
    for step in range(50):
        never.record(bad, step)
    assert never.total == 50
    with pytest.raises(ValueError, match=">= 0"):
        SkipCounter(-1)
