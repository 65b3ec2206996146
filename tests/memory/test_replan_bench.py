"""benchmarks/replan.py: the walk follows the policy's re-planning rule, and the reuse share counts what a cache keeps."""
from pathlib import Path

import pytest
import torch

from rhea.memory.scoring import TierRule
from tests.repo_scripts import load_script

RP = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "replan.py")
RULE = TierRule("budget", 0.5, 0.8, -1.0, 1.0, max_raw=1, max_latent=0, latents=False)  # one raw turn, the rest dropped


def _scores(best):
    """Step t's query prefers turn best[t] (earlier turns), as a fused score with one component."""
    def at(t):
        s = torch.zeros(t, dtype=torch.float64)
        s[best[t]] = 1.0
        return s, {"dense": s}
    return at


def test_walk_keeps_plans_for_every_steps_and_re_plans_when_the_best_turn_is_hidden():
    texts, queries = ["a", "b", "c", "d", "e", "f"], ["q0", "q1", "q2", "q3", "q4", "q5"]
    best = {1: 0, 2: 0, 3: 1, 4: 0, 5: 0}
    every = RP.walk(texts, queries, _scores(best), RULE, 1, 0)
    assert all(s["fresh"] for s in every) and [s["tiers"].index("raw") for s in every] == [0, 0, 1, 0, 0]
    kept = RP.walk(texts, queries, _scores(best), RULE, 3, 0)
    assert [s["fresh"] for s in kept] == [True, False, False, True, False]
    # steps 2-3 keep the plan of step 1 (turn 0) with turns 1-2 appended raw; step 4 plans afresh (turn 0 raw, the
    # rest dropped) and step 5 keeps that plan with turn 4 appended
    assert kept[2]["tiers"] == ["raw", "raw", "raw"] and kept[4]["tiers"] == ["raw", "drop", "drop", "drop", "raw"]
    # step 5's query wants turn 2, dropped under step 4's plan: kept without the check, re-planned with it
    wants_2 = {1: 0, 2: 0, 3: 0, 4: 0, 5: 2}
    assert [s["fresh"] for s in RP.walk(texts, queries, _scores(wants_2), RULE, 3, 0)] == [True, False, False, True, False]
    checked = RP.walk(texts, queries, _scores(wants_2), RULE, 3, 1, "replan")
    assert [s["fresh"] for s in checked] == [True, False, False, True, True]
    assert checked[4]["tiers"] == ["drop", "drop", "raw", "drop", "drop"] and checked[4]["recalled"] == []
    # recalled instead: the kept plan stays in place and turn 2 is shown again after the newest turn
    recalled = RP.walk(texts, queries, _scores(wants_2), RULE, 3, 1, "recall")
    assert [s["fresh"] for s in recalled] == [True, False, False, True, False]
    assert recalled[4]["tiers"] == ["raw", "drop", "drop", "drop", "raw"] and recalled[4]["recalled"] == [2]
    assert recalled[4]["copies"] == [[2, 4]]  # after the newest turn of step 5
    assert all(s["recalled"] == [] for s in recalled[:4])
    # a copy stays where it was first recalled until the next fresh plan
    sticky = RP.walk(texts + ["g", "h"], queries + ["q6", "q7"], _scores({**wants_2, 6: 0, 7: 0}), RULE, 4, 1, "recall")
    assert [s["fresh"] for s in sticky] == [True, False, False, False, True, False, False]
    # step 5 plans afresh around turn 2; steps 6 and 7 want turn 0, dropped by it: one copy, after turn 5
    assert sticky[4]["copies"] == [] and sticky[5]["copies"] == [[0, 5]] and sticky[6]["copies"] == [[0, 5]]
    sizes = [1] * 8
    assert RP.reuse_share(sticky[5]["tiers"], sticky[6]["tiers"], sizes, sticky[5]["copies"], sticky[6]["copies"]) == 1.0
    # a best turn appended raw after the plan never forces a fresh one
    assert [s["fresh"] for s in RP.walk(texts, queries, _scores({1: 0, 2: 1, 3: 2, 4: 3, 5: 4}), RULE, 8, 1)] == \
        [True, False, False, False, False]


def test_reuse_share_counts_history_before_the_first_changed_tier():
    sizes = [10, 20, 30, 40]
    assert RP.reuse_share(None, ["raw"], sizes) is None
    assert RP.reuse_share(["raw", "drop", "raw"], ["raw", "drop", "raw", "raw"], sizes) == 1.0  # appended only
    assert RP.reuse_share(["raw", "raw", "drop"], ["raw", "drop", "raw", "raw"], sizes) == pytest.approx(10 / 80)
    assert RP.reuse_share(["raw", "latent"], ["raw", "latent", "raw"], sizes) == 1.0
    assert RP.reuse_share(["drop", "drop"], ["drop", "drop", "drop"], sizes) == 1.0  # nothing in the prompt
    # recalled copies count in the prompt, after the turn they follow; a copy the next prompt keeps in its place
    # is reused with everything before it, one it leaves out ends the reuse there
    assert RP.reuse_share(["raw", "drop"], ["raw", "drop", "raw"], sizes, now_copies=[[1, 2]]) == pytest.approx(40 / 60)
    assert RP.reuse_share(["raw", "drop"], ["raw", "drop", "raw"], sizes, prev_copies=[[1, 1]]) == pytest.approx(10 / 40)
    assert RP.reuse_share(["raw", "drop"], ["raw", "drop", "raw"], sizes, [[1, 1]], [[1, 1]]) == 1.0
    assert RP.prompt_items(["raw", "drop", "raw"], [[1, 0]]) == [(0, "raw"), (1, "copy"), (2, "raw")]


def test_arguments_are_checked():
    with pytest.raises(SystemExit):
        RP.parse_args(["--data", "x", "--every", "2", "4"])  # no baseline
    with pytest.raises(SystemExit):
        RP.parse_args(["--data", "x", "--top", "-1"])
    with pytest.raises(SystemExit, match="not found"):
        RP.main(["--data", "/nonexistent-folder"])



def test_the_walk_makes_a_fresh_plan_when_the_copies_would_pass_recall_max():
    """As `RheaPolicy(replan_recall_max=c)`: a kept plan recalls until one more copy would pass c, then plans afresh."""
    texts, queries = ["a", "b", "c", "d", "e", "f"], ["q0", "q1", "q2", "q3", "q4", "q5"]
    wants_2 = _scores({1: 0, 2: 0, 3: 0, 4: 0, 5: 2})  # step 5 wants turn 2, dropped under step 4's plan
    free = RP.walk(texts, queries, wants_2, RULE, 3, 1, "recall")
    assert [s["fresh"] for s in free] == [True, False, False, True, False] and free[4]["recalled"] == [2]
    assert RP.walk(texts, queries, wants_2, RULE, 3, 1, "recall", recall_max=1) == free  # one copy is within 1
    bounded = RP.walk(texts, queries, wants_2, RULE, 3, 1, "recall", recall_max=0)
    assert [s["fresh"] for s in bounded] == [True, False, False, True, True] and bounded[4]["recalled"] == []
    assert bounded[4]["tiers"] == ["drop", "drop", "raw", "drop", "drop"]
