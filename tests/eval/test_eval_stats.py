"""Statistics over episodes (bootstrap intervals, paired comparisons) and the report built on
them, on synthetic episodes of the real suites."""
import random

import pytest

from rhea.eval.stats_report import plot_bands, statistics, statistics_markdown
from rhea.eval.stats import (EXACT_PERMUTATION_MAX, StatsError, bootstrap_ci, episode_metrics,
                             paired_comparison, sign_flip_p_value)
from rhea.eval.suites import get_suite

from .test_eval_suites import run


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_episodes():
    rng = random.Random(0)
    small = bootstrap_ci([rng.gauss(5, 1) for _ in range(8)])
    large = bootstrap_ci([rng.gauss(5, 1) for _ in range(200)])
    assert small.low < small.mean < small.high and large.low < large.mean < large.high
    assert (large.high - large.low) < (small.high - small.low)
    assert 4.5 < large.low < 5.0 < large.high < 5.5
    assert bootstrap_ci([3.0, 3.0, 3.0]).to_dict()["low"] == 3.0
    one = bootstrap_ci([7.0, None])
    assert (one.mean, one.low, one.high, one.n) == (7.0, None, None, 1)
    assert bootstrap_ci([1.0, 2.0], seed=1) == bootstrap_ci([1.0, 2.0], seed=1)


def test_bad_values_are_named():
    with pytest.raises(StatsError, match="no values"):
        bootstrap_ci([None, None])
    with pytest.raises(StatsError, match="non-finite"):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(StatsError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=95)
    with pytest.raises(StatsError, match="share no episode"):
        paired_comparison({"a": 1.0}, {"b": 1.0})


def test_sign_flip_p_value_exact_and_monte_carlo():
    assert sign_flip_p_value([1.0] * 8) == pytest.approx(2 / 256)
    assert sign_flip_p_value([0.0, 0.0]) == 1.0
    assert sign_flip_p_value([1.0, -1.0, 1.0, -1.0]) == 1.0
    assert sign_flip_p_value([2.0]) == 1.0  # one episode can show nothing
    many = [1.0] * (EXACT_PERMUTATION_MAX + 4)
    assert sign_flip_p_value(many, n_perm=2000) == pytest.approx(1 / 2001, abs=2e-3)
    noise = [random.Random(i).gauss(0, 1) for i in range(30)]
    assert sign_flip_p_value(noise) > 0.05


def test_paired_comparison_uses_only_shared_episodes():
    policy = {"e0": 6.0, "e1": 7.0, "e2": 8.0, "e3": None, "e4": 9.0}
    base = {"e0": 5.0, "e1": 5.0, "e2": 6.0, "e3": 5.0}
    cmp = paired_comparison(policy, base)
    assert cmp.n == 3 and cmp.diff == pytest.approx(5 / 3) and cmp.p_value == pytest.approx(0.25)
    assert cmp.low <= cmp.diff <= cmp.high
    assert "p=0.25" in cmp.format()


def _retention_results(n_episodes=8):
    """Two policies on the same 8 episodes: 'good' follows every rule, 'vanilla' only on
    even turns and says nothing at turn 3."""
    suite = get_suite("instruction-retention", n_episodes=n_episodes, n_instructions=2, n_revoke=1,
                      instructions=["no_comma", "lowercase", "exclude_keywords"])
    episodes = suite.generate(n_turns=10, seed=0)

    def good(turn):
        return "a clear and simple answer."

    def vanilla(turn):
        if turn.meta["index"] == 3:
            return ""
        return "a clear answer." if turn.meta["index"] % 2 == 0 else "A clear, Very stuff answer."

    policies = {}
    for name, reply in (("vanilla", vanilla), ("good", good)):
        rows = run(episodes, reply)
        turns = [turn for episode in episodes for turn in episode.turns]  # run's order
        for row, turn in zip(rows, turns, strict=True):
            row.update({"context_tokens": 100 + row["turn_index"], "latency_s": 0.5, "reply": reply(turn)})
        policies[name] = {"aggregate": suite.aggregate(rows), "turns": rows, "cost": {}}
    return {"config": {"suite": "instruction-retention", "model": "tiny", "n_episodes": n_episodes},
            "policies": policies}


def test_statistics_are_over_episodes_with_a_paired_test(tmp_path):
    results = _retention_results()
    stats = statistics(results)
    assert stats["unit"] == "episode" and stats["n_episodes"] == 8 and stats["baseline"] == "vanilla"
    good = stats["policies"]["good"]
    assert good["intervals"]["iar"]["mean"] == 10.0 and good["intervals"]["iar"]["n"] == 8
    versus = good["vs_baseline"]["iar"]
    assert versus["diff"] > 0 and versus["low"] > 0 and versus["p_value"] == pytest.approx(2 / 256)
    assert stats["policies"]["vanilla"]["vs_baseline"] == {}
    assert set(stats["rules"]) <= {"no_comma", "lowercase", "exclude_keywords"} and stats["rules"]
    for rule in stats["rules"].values():
        assert rule["good"]["strict"]["mean"] == 10.0 and rule["good"]["checks"] > 0
    assert stats["non_answers"]["vanilla"]["count"] > 0 and stats["non_answers"]["good"]["count"] == 0
    text = statistics_markdown(stats)
    assert "n = 8" in text and "| good |" in text and "p=0.0078" in text
    assert "Pass rate of each rule" in text and "Non-answers" in text
    # 'good' gives one reply to every turn: all but each episode's first repeat it
    repeats = stats["repeated_replies"]["good"]
    assert repeats["repeats"] == repeats["replies"] - 8 and repeats["episodes_with_repeats"] == 8
    assert f"good {repeats['repeats']}/{repeats['replies']}" in text and "repeat an earlier reply" in text
    paths = plot_bands(results, tmp_path)
    assert {p.name for p in paths} == {"iar_by_turn_bands.png", "iar_by_distance_bands.png"}
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_one_episode_says_no_interval_is_possible():
    stats = statistics(_retention_results(n_episodes=1))
    assert stats["policies"]["good"]["intervals"]["iar"]["low"] is None
    assert "no interval and no test is possible" in statistics_markdown(stats)


def test_episode_metrics_per_episode_for_state_tracking():
    suite = get_suite("state-tracking", n_episodes=3, n_keys=2, n_probes=2)
    episodes = suite.generate(n_turns=8, seed=0)
    rows = run(episodes, lambda t: "\n".join(f"{k}: {v}" for k, v in t.meta["answers"].items())
               if t.kind == "probe" else "Noted.")
    per = episode_metrics(suite, rows)
    assert len(per) == 3 and all(m["accuracy"] == 1.0 and m["jga"] == 1.0 for m in per.values())


def test_a_metric_that_cannot_be_paired_with_the_baseline_says_why():
    results = _retention_results()
    for row in results["policies"]["good"]["turns"]:  # episodes the baseline never ran
        row["episode_id"] = f"other-{row['episode_id']}"
    stats = statistics(results)
    good = stats["policies"]["good"]
    assert good["vs_baseline"] == {} and good["intervals"]["iar"]["n"] == 8
    assert "share no episode" in good["not_compared"]["iar"]
    assert "not_compared" not in stats["policies"]["vanilla"]


def test_latency_of_batched_episodes_is_one_measurement_per_batch():
    """Episodes that ran as one batch share each turn's time: no interval over them, no paired test."""
    results = _retention_results()
    ids = sorted({str(r["episode_id"]) for r in results["policies"]["good"]["turns"]})
    first_half = set(ids[:4])
    for row in results["policies"]["good"]["turns"]:  # two batches of 4, each timed once per turn
        in_first = str(row["episode_id"]) in first_half
        row.update({"batch_rows": 4.0, "prefill_s": 1.0 if in_first else 2.0, "decode_s": 3.0,
                    "latency_s": 4.0 if in_first else 5.0})
    stats = statistics(results)
    good = stats["policies"]["good"]
    latency = good["intervals"]["latency_s"]
    assert latency["unit"] == "batch" and latency["n"] == 2 and latency["episodes"] == 8
    assert latency["mean"] == pytest.approx(4.5) and latency["low"] == pytest.approx(4.0)
    assert "latency_s" not in good["vs_baseline"] and "1 batch" not in good["not_compared"]["latency_s"]
    assert "8 episodes ran in 2 batch(es)" in good["not_compared"]["latency_s"]
    assert "iar" in good["vs_baseline"]  # the other metrics are still paired by episode
    vanilla = stats["policies"]["vanilla"]  # one by one: the episode is its unit
    assert vanilla["intervals"]["latency_s"]["n"] == 8 and "unit" not in vanilla["intervals"]["latency_s"]
    text = statistics_markdown(stats)
    assert "Latency of good (2 batches of 8 episodes)" in text and "not paired" in text

    # a batched baseline: the one-by-one policy's latency is not paired with it either
    results["policies"]["good"], results["policies"]["vanilla"] = (results["policies"]["vanilla"],
                                                                    results["policies"]["good"])
    stats = statistics(results)
    assert "vanilla's episodes ran in batches" in stats["policies"]["good"]["not_compared"]["latency_s"]
    assert "not_compared" not in stats["policies"]["vanilla"]


def test_summed_turn_time_counts_a_batch_once():
    from rhea.eval.runner import turn_share

    rows = [{"latency_s": 10.0, "prefill_s": 2.0, "decode_s": 6.0, "observe_s": 0.0, "plan_s": 1.0,
             "render_s": 1.0, "batch_rows": 8.0}] * 8
    assert sum(turn_share(r) for r in rows) == pytest.approx(8.0 + 16.0)  # shared 8 s once, per-row 2 s each
