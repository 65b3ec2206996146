"""benchmarks/side_by_side.py: every family of each suite from the results index, the best of each, peer versions."""
import json
from pathlib import Path

import pytest

from rhea.eval.results_index import Row, read_index
from tests.repo_scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
sbs = load_script(ROOT / "benchmarks" / "side_by_side.py")


def _row(policy, metric, mean, *, run="tiny/multi-session-qa/fp32-ep4", options=None, diff=None, source=None):
    return Row(run_id=run, suite="multi-session-qa", model="tiny", adapters=None, adapters_sha256=None,
               dtype="float32", device="cpu", episodes=4, turns=10, policy=policy, options=options or {},
               metric=metric, mean=mean, ci_low=mean - 0.1, ci_high=mean + 0.1, unit="episode",
               baseline=None if policy == "vanilla" else "vanilla", paired_diff=diff,
               paired_low=None if diff is None else diff - 0.05, paired_high=None if diff is None else diff + 0.05,
               p=None if diff is None else 0.5, source=source, commit=None, date="2026-12-03")


def test_families_best_rows_and_recorded_peer_versions(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"policies": {"kvpress-snapkv": {
        "environments": [{"dtype": "float32", "kvpress": "0.5.5"}]}}}))
    rows = [_row("vanilla", "f1", 0.30), _row("vanilla", "context_tokens", 11000),
            _row("rhea", "f1", 0.50, diff=0.20), _row("rhea", "held_mb", 12.5, diff=12.5),
            _row("rhea", "f1", 0.40, options={"replan_every": 1}, diff=0.10),
            _row("kvpress-snapkv", "f1", 0.35, diff=0.05, source="run"),
            _row("bm25", "f1", 0.33, diff=0.03), _row("mine", "f1", 0.1, diff=-0.2)]
    table = sbs.render_suite(rows, "multi-session-qa", root=tmp_path)
    lines = [line for line in table.splitlines() if line.startswith("| ") and "family" not in line]
    assert [line.split(" | ")[0][2:] for line in lines] == [
        "full history", "Rhea", "Rhea", "KV-cache compression (kvpress)", "retrieval", "other"]
    assert "| kvpress 0.5.5 |" in table and "+0.200 [+0.150, +0.250] p=0.5" in table
    assert "| 11,000 |" in table and "| 12.5 |" in table  # context tokens and MB held, dashes where absent
    best = sbs.render_suite(rows, "multi-session-qa", best=True, root=tmp_path)
    assert "rhea (replan_every=1)" not in best and "| Rhea | rhea | 0.500" in best
    # a peer whose run did not record its version says so
    assert "kvpress not recorded" in sbs.render_suite([_row("kvpress-knorm", "f1", 0.2, diff=0.0)], "multi-session-qa",
                                                      root=tmp_path)


def test_the_committed_index_renders_and_missing_rows_are_named_errors(capsys):
    text = sbs.render(read_index(sbs.INDEX), model="qwen2.5-coder-1.5b")
    assert "### instruction-retention" in text and "| full history | vanilla |" in text
    with pytest.raises(sbs.SideBySideError, match="no rows of model 'nope'"):
        sbs.render(read_index(sbs.INDEX), model="nope")
    assert sbs.main(["--suite", "no-such-suite"]) == 1
    assert "no rows of suite 'no-such-suite'" in capsys.readouterr().err
