"""Scorer fusion and tier rules (rhea.memory.scoring): pure functions, no model."""
import pytest
import torch

from rhea.errors import RheaConfigError
from rhea.memory.scoring import (TierRule, assign_tiers, floor_mask, fuse, latent_tier_active, rank_order, ranks)


def test_rank_order_breaks_ties_towards_the_later_turn():
    assert rank_order(torch.tensor([1.0, 3.0, 1.0, 3.0])).tolist() == [3, 1, 2, 0]
    assert ranks(torch.tensor([0.5, 0.9, 0.1, 0.5])).tolist() == [2.5, 1.0, 4.0, 2.5]
    assert rank_order(torch.zeros(0)).tolist() == []


def test_rrf_is_the_weighted_sum_of_reciprocal_ranks():
    comps = {"bm25": torch.tensor([3.0, 0.0, 1.0]), "dense": torch.tensor([0.1, 0.9, 0.5])}
    got = fuse(comps, "rrf", rrf_k=10)
    # bm25 ranks 1,3,2 ; dense ranks 3,1,2
    want = torch.tensor([1 / 11 + 1 / 13, 1 / 13 + 1 / 11, 1 / 12 + 1 / 12], dtype=torch.float64)
    assert torch.allclose(got, want)
    weighted = fuse(comps, "rrf", rrf_k=10, weights={"bm25": 2.0, "dense": 0.0})
    assert rank_order(weighted).tolist()[0] == 0  # only bm25 counts


def test_zsum_standardises_each_component():
    comps = {"bm25": torch.tensor([10.0, 0.0, 5.0]), "dense": torch.tensor([0.2, 0.4, 0.3])}
    got = fuse(comps, "zsum")
    assert abs(float(got.sum())) < 1e-9  # each standardised component sums to zero
    # a constant component adds nothing instead of dividing by zero
    flat = fuse({"bm25": torch.zeros(3), "dense": comps["dense"]}, "zsum")
    assert torch.allclose(flat, fuse({"dense": comps["dense"]}, "zsum"))
    with pytest.raises(RheaConfigError, match="fusion="):
        fuse(comps, "max")


def _comps(n=12):
    # turn i shares words with the query when i % 3 == 0; dense similarity grows with i
    return {"bm25": torch.tensor([1.0 + i if i % 3 == 0 else 0.0 for i in range(n)]),
            "dense": torch.linspace(0.0, 0.15, n)}


@pytest.mark.parametrize("max_raw,max_latent,latents", [(2, 1, True), (0, 3, True), (3, 5, False), (10, 10, True)])
def test_budget_holds(max_raw, max_latent, latents):
    comps = _comps()
    score = fuse(comps, "rrf")
    tiers = assign_tiers(score, comps, TierRule("budget", max_raw=max_raw, max_latent=max_latent, latents=latents))
    assert tiers.count("raw") <= max_raw
    assert tiers.count("latent") <= (max_latent if latents else 0)
    eligible = floor_mask(comps, TierRule())
    # floors still drop unrelated turns (no shared word, dense below its floor), whatever room the budget leaves
    assert all(t == "drop" for t, e in zip(tiers, eligible.tolist()) if not e)
    kept = [i for i, t in enumerate(tiers) if t != "drop"]
    # the kept turns are the best-ranked eligible ones
    best = [i for i in rank_order(score).tolist() if eligible[i]][: len(kept)]
    assert sorted(best) == kept


def test_floors_drop_unrelated_turns_in_both_modes():
    comps = {"latent": torch.tensor([0.1, 0.6, 0.9]), "dense": torch.tensor([0.01, 0.1, 0.7])}
    rule = TierRule("threshold", tau_low=0.5, tau_high=0.8, dense_floor=0.2, dense_high=0.6)
    assert assign_tiers(fuse(comps), comps, rule) == ["drop", "latent", "raw"]
    # latent tier off: what would be a latent is raw text under thresholds ...
    off = TierRule("threshold", tau_low=0.5, tau_high=0.8, dense_floor=0.2, dense_high=0.6, latents=False)
    assert assign_tiers(fuse(comps), comps, off) == ["drop", "raw", "raw"]
    # ... and under a budget only the best max_raw stay, the unrelated turn is dropped despite the room
    budget = TierRule("budget", tau_low=0.5, tau_high=0.8, max_raw=5, max_latent=5, latents=False)
    assert assign_tiers(fuse(comps), comps, budget) == ["drop", "raw", "raw"]


def test_threshold_on_latent_alone_is_the_papers_rule():
    s = torch.tensor([0.1, 0.5, 0.6, 0.8, 0.9])
    rule = TierRule("threshold", tau_low=0.5, tau_high=0.8)
    assert assign_tiers(s, {"latent": s}, rule) == ["drop", "latent", "latent", "latent", "raw"]


def test_bad_rules():
    with pytest.raises(RheaConfigError, match="tier_mode"):
        TierRule("sometimes")
    with pytest.raises(RheaConfigError, match="max_raw"):
        TierRule(max_raw=-1)
    with pytest.raises(RheaConfigError, match="dense_floor"):
        TierRule(dense_floor=0.7, dense_high=0.6)
    with pytest.raises(RheaConfigError, match="tau_low=0.9 must be <= tau_high=0.2"):  # RheaConfig's own check
        TierRule(tau_low=0.9, tau_high=0.2)


def test_tier_names_are_indexed_by_the_kernels_tier_codes():
    """rhea_kernels cannot import rhea, so its codes (0 drop, 1 latent, 2 raw) and rhea.constants.TIERS
    are written twice; this holds them together."""
    from rhea.constants import TIERS
    from rhea_kernels.reference import DROP, LATENT, RAW, score_tiers

    assert (TIERS[DROP], TIERS[LATENT], TIERS[RAW]) == ("drop", "latent", "raw")
    s = torch.tensor([0.1, 0.6, 0.9])
    codes = score_tiers(s, 0.5, 0.8).tolist()
    assert [TIERS[c] for c in codes] == assign_tiers(s, {"latent": s}, TierRule("threshold", tau_low=0.5, tau_high=0.8))


def test_latent_tier_follows_fidelity_unless_forced():
    good = {"reconstruction_token_acc": 0.93, "control_gap": 0.4, "measured_on": "held-out chunks", "n": 200}
    poor = {"reconstruction_token_acc": 0.40, "control_gap": 0.0, "measured_on": "held-out chunks", "n": 24}
    no_gap = {**good, "control_gap": -0.01}
    assert latent_tier_active("auto", good)[0] is True
    for fid in (poor, no_gap, None):
        on, why = latent_tier_active("auto", fid)
        assert on is False and "latent tier off" in why
    assert "0.4" in latent_tier_active("auto", poor)[1]
    assert latent_tier_active("on", poor) == (True, "latent tier on: asked for explicitly (latent_tier='on')")
    assert latent_tier_active("off", good)[0] is False
    with pytest.raises(RheaConfigError, match="latent_tier"):
        latent_tier_active("maybe", None)


def test_recorded_fact_recall_must_also_pass():
    """Reconstruction alone can pass while the latents' answers are invented: a recorded fact recall must meet
    the fact-recall rule too (latent >= 0.6 x raw and >= dropped + 0.25); without one, reconstruction decides."""
    good = {"reconstruction_token_acc": 0.96, "control_gap": 0.6, "measured_on": "held-out chunks", "n": 144}
    facts = {"raw": 0.80, "dropped": 0.02, "n": 60, "measured_on": "benchmarks/fact_recall.py"}
    on, why = latent_tier_active("auto", {**good, "fact_recall": {**facts, "latent": 0.42}})
    assert on is False and "fact recall latent 0.42, raw 0.80, dropped 0.02 (n = 60)" in why
    assert "latent >= 0.6 x raw and >= dropped + 0.25" in why
    on, why = latent_tier_active("auto", {**good, "fact_recall": {**facts, "latent": 0.48}})  # 0.6 x 0.80 exactly
    assert on is True and "meets the target" in why and "fact recall latent 0.48" in why
    low_margin = {**good, "fact_recall": {**facts, "raw": 0.30, "dropped": 0.10, "latent": 0.30}}  # ratio 1, margin 0.2
    assert latent_tier_active("auto", low_margin)[0] is False
    assert latent_tier_active("on", {**good, "fact_recall": {**facts, "latent": 0.0}})[0] is True
