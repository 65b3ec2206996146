"""benchmarks/pair_runs.py: policies of runs on the same episodes merge under labels; other episodes are refused."""
import json
from pathlib import Path

import pytest

from tests.repo_scripts import load_script

PR = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "pair_runs.py")


def _run(folder: Path, sha: str, policies: dict, trained=False, kwargs=None) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "format": "rhea-bench/1", "episodes": [{"id": 0}],
        "config": {"suite": "instruction-retention", "episodes_sha256": sha, "adapters_trained": trained,
                   "policies": list(policies), "policy_kwargs": kwargs or {}},
        "policies": {p: {"turns": rows} for p, rows in policies.items()}}))
    return folder


def test_merge_labels_policies_of_runs_on_the_same_episodes(tmp_path):
    a = _run(tmp_path / "a", "s1", {"vanilla": [{"x": 1}], "rhea": [{"x": 2}]})
    b = _run(tmp_path / "b", "s1", {"rhea": [{"x": 3}]}, trained=True, kwargs={"rhea": {"replan_every": 8}})
    results = json.loads((b / "results.json").read_text())
    results["policies"]["rhea"]["environments"] = [{"dtype": "float32"}, {"dtype": "bfloat16"}]
    (b / "results.json").write_text(json.dumps(results))
    merged = PR.merge([PR.parse_policy(f"vanilla={a}:vanilla"), PR.parse_policy(f"old={a}:rhea"),
                       PR.parse_policy(f"new={b}:rhea")])
    assert list(merged["policies"]) == merged["config"]["policies"] == ["vanilla", "old", "new"]
    assert merged["policies"]["new"]["turns"] == [{"x": 3}] and merged["policies"]["old"]["turns"] == [{"x": 2}]
    assert merged["sources"]["new"] == {"run": str(b), "policy": "rhea", "adapters_trained": True,
                                        "policy_kwargs": {"replan_every": 8}, "dtype": "float32, bfloat16"}
    assert merged["sources"]["old"]["dtype"] == ""  # not recorded


def test_bad_specs_and_other_episodes_are_refused(tmp_path):
    a = _run(tmp_path / "a", "s1", {"vanilla": []})
    c = _run(tmp_path / "c", "s2", {"rhea": []})
    with pytest.raises(SystemExit, match="LABEL=RUN_DIR:POLICY"):
        PR.parse_policy("vanilla")
    with pytest.raises(SystemExit, match="episodes_sha256 differs"):
        PR.merge([PR.parse_policy(f"v={a}:vanilla"), PR.parse_policy(f"r={c}:rhea")])
    with pytest.raises(SystemExit, match="no policy 'rhea'"):
        PR.merge([PR.parse_policy(f"v={a}:rhea")])
    with pytest.raises(SystemExit, match="given twice"):
        PR.merge([PR.parse_policy(f"v={a}:vanilla"), PR.parse_policy(f"v={a}:vanilla")])
    with pytest.raises(SystemExit, match="no such file"):
        PR.merge([PR.parse_policy(f"v={tmp_path / 'none'}:vanilla")])
    with pytest.raises(SystemExit, match="--baseline 'vanilla' is none of the labels"):
        PR.main(["--policy", f"r={a}:vanilla", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="--pair 'v=x'"):
        PR.parse_pair("v=x", ["v", "r"])


def test_further_pairs_compare_two_labels_on_the_same_episodes(tmp_path):
    from .test_eval_stats import _retention_results

    results = _retention_results()
    results.update({"format": "rhea-bench/1", "episodes": []})
    results["config"]["episodes_sha256"] = "s1"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(results))
    a = tmp_path / "a"
    assert PR.main(["--policy", f"vanilla={a}:vanilla", "--policy", f"good={a}:good", "--policy", f"again={a}:good",
                    "--pair", "good=again", "--pair", "again=vanilla", "--out", str(tmp_path / "p")]) == 0
    report = json.loads((tmp_path / "p.json").read_text())
    (same, versus) = report["statistics"]["pairs"]
    assert (same["label"], same["other"]) == ("good", "again") and same["vs"]["iar"]["diff"] == 0.0
    # a pair with the baseline gives what the baseline table gives
    assert versus["vs"]["iar"] == report["statistics"]["policies"]["again"]["vs_baseline"]["iar"]
    text = (tmp_path / "p.md").read_text()
    assert "| good − again | +0.00" in text and "| again − vanilla |" in text and "--pair good=again" in text


def test_by_turn_pairs_each_scored_question(tmp_path):
    """Two episodes of three questions: paired per question (n = 6) and per episode (n = 2) in one report."""
    def rows(f1s):
        return [{"episode_id": f"msqa/0/{e}", "turn_index": t, "kind": "question", "reply": "same", "category": "single", "f1": f, "contains": float(f > 0.5),
                 "evidence_in_context": 1.0, "context_tokens": 100 + t, "latency_s": 1.0}
                for e, episode in enumerate(f1s) for t, f in enumerate(episode)]
    results = {"format": "rhea-bench/1", "episodes": [],
               "config": {"suite": "multi-session-qa", "episodes_sha256": "s1", "policies": ["vanilla", "rhea"]},
               "policies": {"vanilla": {"turns": rows([[0.2, 0.4, 0.6], [0.1, 0.3, 0.5]])},
                            "rhea": {"turns": rows([[0.3, 0.5, 0.9], [0.2, 0.3, 0.8]])}}}
    merged = PR.by_turn(results)
    assert {r["episode_id"] for r in merged["policies"]["rhea"]["turns"]} == {f"msqa/0/{e}#{t}" for e in (0, 1)
                                                                             for t in (0, 1, 2)}
    a = tmp_path / "a"
    a.mkdir()
    (a / "results.json").write_text(json.dumps(results))
    assert PR.main(["--policy", f"vanilla={a}:vanilla", "--policy", f"rhea={a}:rhea", "--by-turn",
                    "--out", str(tmp_path / "p")]) == 0
    stats = json.loads((tmp_path / "p.json").read_text())["statistics"]
    f1 = stats["policies"]["rhea"]["vs_baseline"]["f1"]
    assert stats["unit"] == "turn" and stats["n_episodes"] == 6 and f1["n"] == 6
    assert f1["diff"] == pytest.approx((0.1 + 0.1 + 0.3 + 0.1 + 0.0 + 0.3) / 6)
    assert stats["by_episode"]["policies"]["rhea"]["vs_baseline"]["f1"]["n"] == 2
    # a reply repeated within a conversation is counted over the conversation, not per question
    assert stats["repeated_replies"] == stats["by_episode"]["repeated_replies"]
    text = (tmp_path / "p.md").read_text()
    assert "Unit: the scored turn (n = 6)" in text and "Unit: the episode (n = 2)" in text
