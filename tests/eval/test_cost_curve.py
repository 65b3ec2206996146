"""benchmarks/cost_curve.py on a tiny random model: every local variant at two history lengths,
the split adds up, the cache saves prefill, crossings are computed, bad input is a named error."""
import json
from pathlib import Path

import pytest

from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "cost_curve.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(_PATH)


@pytest.fixture(scope="module")
def result(bench):
    model = tiny_rhea()
    pairs = bench.builtin_turns(60, seed=0)
    queries = [u for u, _ in bench.builtin_turns(2, seed=1)]
    names = ["vanilla-kv", "vanilla-nokv", "rhea-kept", "rhea-per-turn", "bm25"]
    result = bench.run_curve(model, [64, 240], names, pairs, queries, max_new_tokens=3, progress=lambda line: None)
    result["per_token_kv"] = bench.kv_bytes_per_token(model)
    return result


def test_every_variant_has_a_point_at_every_length(result):
    assert set(result["points"]) == {"vanilla-kv", "vanilla-nokv", "rhea-kept", "rhea-per-turn", "bm25"}
    for rows in result["points"].values():
        assert [r["history_tokens"] for r in rows] == [64, 240]
        for r in rows:
            assert r["history_content_tokens"] >= r["history_tokens"]
            parts = r["score_s"] + r["compress_s"] + r["prefill_s"] + r["decode_s"] + r["other_s"]
            assert parts == pytest.approx(r["latency_s"], rel=1e-6, abs=1e-9)
            assert r["prefill_s"] > 0 and r["decode_s"] > 0 and r["prefilled_tokens"] > 0
            assert r["bytes_held"] == sum(r["bytes_held_split"].values())
    json.dumps(result)  # what main writes


def test_the_history_cache_prefills_less_and_holds_the_keys_values(result):
    kv, nokv = result["points"]["vanilla-kv"][-1], result["points"]["vanilla-nokv"][-1]
    assert kv["prefilled_tokens"] < nokv["prefilled_tokens"] == nokv["context_tokens"]
    assert kv["prefix_reused_tokens"] > 0 and nokv["prefix_reused_tokens"] == 0
    assert kv["bytes_held_split"]["kv_cache"] > 0 and nokv["bytes_held"] == 0
    per_token = result["per_token_kv"]
    for r in (kv, nokv):  # the keys/values the turn's prompt and reply occupy while it runs
        assert r["turn_kv_bytes"] == (r["context_tokens"] + r["new_tokens"]) * per_token > 0
    assert nokv["warm_up"] is None and kv["warm_up"]["prefilled_tokens"] > kv["prefilled_tokens"]


def test_past_the_window_vanilla_drops_turns(bench):
    model = tiny_rhea()  # a 512-token window
    r = bench.run_curve(model, [900], ["vanilla-kv"], bench.builtin_turns(80), ["hi there", "and again"],
                        max_new_tokens=3, progress=lambda line: None)["points"]["vanilla-kv"][0]
    assert r["dropped_turns"] > 0 and r["context_tokens"] < r["full_history_tokens"]


def test_crossings_interpolate_between_lengths(bench):
    points = {"vanilla-kv": [{"history_tokens": 1000, "m": 1.0}, {"history_tokens": 3000, "m": 3.0}],
              "x": [{"history_tokens": 1000, "m": 2.0}, {"history_tokens": 3000, "m": 2.0}],
              "y": [{"history_tokens": 1000, "m": 0.5}, {"history_tokens": 3000, "m": 1.0}]}
    out = bench.crossings(points, "m")
    assert out["x"] == {"crosses_at_history_tokens": [2000], "at_shortest": "above", "at_longest": "below",
                        "lengths": [1000, 3000], "ratio": {"1000": 2.0, "3000": round(2 / 3, 4)}}
    assert out["y"]["crosses_at_history_tokens"] == [] and out["y"]["at_longest"] == "below"


def test_kvpress_is_skipped_with_a_note_when_missing(bench, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "kvpress", None)
    seen = []
    r = bench.run_curve(tiny_rhea(), [64], ["vanilla-kv", "kvpress-snapkv"], bench.builtin_turns(20),
                        ["hi there", "and again"], max_new_tokens=2, progress=lambda line: None,
                        on_point=lambda partial: seen.append(json.loads(json.dumps(partial))))
    assert "make peers" in r["skipped"]["kvpress-snapkv"] and list(r["points"]) == ["vanilla-kv"]
    assert r["complete"] and [s["complete"] for s in seen] == [False] and len(seen[0]["points"]["vanilla-kv"]) == 1


def test_bad_input_is_a_named_error(bench, tmp_path):
    from rhea.errors import RheaError

    with pytest.raises(RheaError, match="window"):
        bench.parse_lengths("1024,window", None)
    with pytest.raises(RheaError, match="token count"):
        bench.parse_lengths("many", 8192)
    assert bench.parse_lengths("4k,1024,window,1.5window", 8192) == [1024, 4096, 8192, 12288]
    bad = tmp_path / "chats.json"
    bad.write_text('{"messages": []}')
    with pytest.raises(RheaError, match="not a list"):
        bench.data_turns(bad)
    with pytest.raises(RheaError, match="no such file"):
        bench.data_turns(tmp_path / "missing.json")
    with pytest.raises(RheaError, match="unknown"):
        bench.run_curve(tiny_rhea(), [64], ["nope"], bench.builtin_turns(4), ["a", "b"], progress=lambda line: None)


def test_data_file_pairs_user_and_assistant_turns(bench, tmp_path):
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([{"messages": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
                                              {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"}]}]))
    assert bench.data_turns(path) == [("u1", "a1"), ("u2", "a2")]


def test_runs_merge_by_variant_and_length_and_redraw(bench, result, tmp_path):
    meta = {"model": "tiny", "device": "cpu", "dtype": "float32", "threads": 1, "max_new_tokens": 3,
            "measured_turns": 1, "data": "built-in generator", "window": 512, "command": "a", "not_run": None}
    short = {**result, "points": {n: rows[:1] for n, rows in result["points"].items()}, "meta": meta}
    long = {**result, "points": {n: rows[1:] for n, rows in result["points"].items() if n != "bm25"},
            "meta": {**meta, "command": "b", "not_run": "bm25 at 240: time"}}
    for name, r in (("short", short), ("long", long)):
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    out = tmp_path / "merged"
    assert bench.main(["--merge", str(tmp_path / "short.json"), str(tmp_path / "long.json"), "--out", str(out)]) == 0
    merged = json.loads(out.with_suffix(".json").read_text())
    assert [r["history_tokens"] for r in merged["points"]["vanilla-kv"]] == [64, 240]
    assert [r["history_tokens"] for r in merged["points"]["bm25"]] == [64]
    assert merged["meta"]["command"] == ["a", "b"] and merged["meta"]["not_run"] == "bm25 at 240: time"
    assert merged["crossings"]["latency_s"].keys() == result["crossings"]["latency_s"].keys()
    assert out.with_suffix(".png").stat().st_size > 0
    (tmp_path / "other.json").write_text(json.dumps({**long, "meta": {**meta, "model": "other"}}))
    from rhea.errors import RheaError

    with pytest.raises(RheaError, match="differ"):
        bench.merge([short, json.loads((tmp_path / "other.json").read_text())])
    (tmp_path / "junk.json").write_text("[]")
    with pytest.raises(RheaError, match="not a cost-curve JSON"):
        bench.read_result(tmp_path / "junk.json")
