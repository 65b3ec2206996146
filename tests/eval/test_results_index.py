"""The results index (`rhea.eval.results_index`), the gzipped per-turn dumps (`rhea.eval.report`) and
`rhea bench --index`: on a tiny random model."""
import gzip
import json

import pytest

from rhea.cli import main
from rhea.errors import RheaError
from rhea.eval.report import read_results, results_file, write_results
from rhea.eval.results_index import (SCHEMA, ResultsIndexError, Row, adapters_name, adapters_sha256, append_rows,
                                     default_run_id, read_index, rows_from_results, select)
from rhea.eval.runner import run_suite
from rhea.testing import tiny_rhea

RUN = dict(n_turns=3, n_episodes=2, max_new_tokens=2, progress=False)


def _row(**changes) -> Row:
    fields = dict(run_id="tiny/efficiency/fp32-ep2", suite="efficiency", model="tiny", adapters=None,
                  adapters_sha256=None, dtype="float32", device="cpu", episodes=2, turns=3, policy="rhea",
                  options={}, metric="context_tokens", mean=120.0, ci_low=110.0, ci_high=130.0, unit="episode",
                  baseline="vanilla", paired_diff=-40.0, paired_low=-50.0, paired_high=-30.0, p=0.5,
                  source="runs/x", commit="0123abc", date="2026-11-30")
    fields.update(changes)
    return Row(**fields)


@pytest.fixture(scope="module")
def model():
    return tiny_rhea()


@pytest.fixture(scope="module")
def results(model):
    return run_suite(model, "efficiency", ["vanilla", "rhea"], **RUN)


def test_index_error_is_a_named_value_error():
    assert issubclass(ResultsIndexError, RheaError) and issubclass(ResultsIndexError, ValueError)


@pytest.mark.parametrize("changes, message", [
    ({"adapters_sha256": "abc"}, "64 lowercase hex"),
    ({"adapters_sha256": "a" * 64}, "name the adapters"),
    ({"ci_low": 140.0}, "above ci_high"),
    ({"ci_high": None}, "both numbers or both null"),
    ({"baseline": None}, "needs the baseline"),
    ({"paired_diff": None}, "give the difference"),
    ({"p": 1.5}, r"\[0, 1\]"),
    ({"mean": float("nan")}, "finite number"),
    ({"episodes": 0}, "integer >= 1"),
    ({"turns": 2.5}, "turns per episode"),
    ({"unit": "turn"}, "one of"),
    ({"run_id": "tiny//x"}, "single '/'"),
    ({"run_id": " tiny"}, "surrounding spaces"),
    ({"options": {"a": {1, 2}}}, "JSON values"),
    ({"commit": "HEAD"}, "git commit"),
    ({"date": "yesterday"}, "ISO 8601"),
    ({"schema": "other/1"}, SCHEMA),
])
def test_a_row_that_breaks_the_schema_is_refused_by_name(changes, message):
    with pytest.raises(ResultsIndexError, match=message):
        _row(**changes)


def test_row_label_key_and_round_trip():
    row = _row(options={"replan_every": 8, "latent_tier": "on"})
    assert row.label == "rhea (latent_tier=on, replan_every=8)"
    assert Row.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    assert row.key != _row(options={}).key and row.key == _row(options={"latent_tier": "on", "replan_every": 8}).key


def test_from_dict_names_unknown_and_missing_fields():
    data = _row().to_dict()
    data.pop("p")
    data["when"] = "yesterday"
    with pytest.raises(ResultsIndexError, match=r"here: unknown fields \['when'\]; missing fields \['p'\]"):
        Row.from_dict(data, where="here")


def test_append_replaces_same_key_in_place_and_appends_the_rest(tmp_path):
    path = tmp_path / "sub" / "index.jsonl"
    first = [_row(metric="context_tokens"), _row(metric="latency_s", baseline=None, paired_diff=None,
                                                   paired_low=None, paired_high=None, p=None)]
    append_rows(path, first)
    assert read_index(path) == first
    changed = _row(metric="context_tokens", mean=121.0)
    other_options = _row(options={"replan_every": 1})
    written = append_rows(path, [other_options, changed])
    assert written == read_index(path) == [changed, first[1], other_options]
    assert [p.name for p in path.parent.iterdir()] == ["index.jsonl"], "no temporary file is left behind"
    assert len(path.read_text().splitlines()) == 3


def test_append_refuses_bad_rows_and_leaves_the_index_as_it_was(tmp_path):
    path = tmp_path / "index.jsonl"
    append_rows(path, [_row()])
    before = path.read_bytes()
    with pytest.raises(ResultsIndexError, match="twice"):
        append_rows(path, [_row(mean=1.0), _row(mean=2.0)])
    with pytest.raises(ResultsIndexError, match=r"rows\[0\] is a dict"):
        append_rows(path, [_row().to_dict()])
    assert path.read_bytes() == before


def test_read_index_names_the_line(tmp_path):
    path = tmp_path / "index.jsonl"
    good = json.dumps(_row().to_dict())
    path.write_text(good + "\n\n{oops\n")
    with pytest.raises(ResultsIndexError, match=r"index.jsonl:3: not a JSON object"):
        read_index(path)
    path.write_text(good + "\n" + good + "\n")
    with pytest.raises(ResultsIndexError, match=r"index.jsonl:2: the same run, policy, options and metric as line 1"):
        read_index(path)
    bad = {**_row().to_dict(), "episodes": -1}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(ResultsIndexError, match=r"index.jsonl:1: episodes=-1"):
        read_index(path)
    with pytest.raises(ResultsIndexError, match="no results index there"):
        read_index(tmp_path / "missing.jsonl")


def test_rows_from_results_pair_each_policy_with_vanilla(results, tmp_path):
    adapters = tmp_path / "my-adapters"
    (adapters / "compress").mkdir(parents=True)
    (adapters / "compress" / "w.bin").write_bytes(b"\x00\x01")
    (adapters / "rhea_config.json").write_text(json.dumps({"extra": {"training": {"optimizer_steps": 12}}}))
    rows = rows_from_results(results, date="2026-11-30T10:00:00+00:00", adapters=adapters, commit="a" * 40)
    from rhea.eval.stats_report import statistics

    stats = statistics(results)["policies"]
    assert {(r.policy, r.metric) for r in rows} == {(p, m) for p in ("vanilla", "rhea")
                                                    for m in ("context_tokens", "latency_s", "held_mb")}
    held, = select(rows, policy="rhea", metric="held_mb")  # the KV cache and latents the conversation holds, in MB
    assert held.mean == stats["rhea"]["intervals"]["held_mb"]["mean"] > 0
    rhea_tokens, = select(rows, policy="rhea", metric="context_tokens")
    assert rhea_tokens.run_id == default_run_id(results["config"]) and rhea_tokens.run_id.endswith("/efficiency/fp32-ep2")
    assert rhea_tokens.episodes == 2 and rhea_tokens.turns == 3 and rhea_tokens.baseline == "vanilla"
    assert rhea_tokens.mean == stats["rhea"]["intervals"]["context_tokens"]["mean"]
    assert rhea_tokens.paired_diff == stats["rhea"]["vs_baseline"]["context_tokens"]["diff"]
    assert rhea_tokens.adapters == "my-adapters@step-12" and len(rhea_tokens.adapters_sha256) == 64
    vanilla_tokens, = select(rows, policy="vanilla", metric="context_tokens")
    assert vanilla_tokens.baseline is None and vanilla_tokens.paired_diff is None
    with pytest.raises(ResultsIndexError, match="no field"):
        select(rows, colour="red")
    assert rows_from_results({**results, "statistics": statistics(results)}, date="2026-11-30T10:00:00+00:00",
                             adapters=adapters, commit="a" * 40) == rows


def test_adapters_digest_follows_the_files_not_the_place(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "x.safetensors").write_bytes(b"weights")
    assert adapters_sha256(tmp_path / "a") == adapters_sha256(tmp_path / "b")
    (tmp_path / "b" / "sub" / "x.safetensors").write_bytes(b"other weights")
    assert adapters_sha256(tmp_path / "a") != adapters_sha256(tmp_path / "b")
    assert adapters_name(tmp_path / "a") == "a"
    with pytest.raises(ResultsIndexError, match="no adapter directory"):
        adapters_sha256(tmp_path / "none")


def test_default_run_id_says_what_varies():
    assert default_run_id({"model": "qwen2.5-coder-1.5b", "suite": "long-horizon", "dtype": "float32",
                           "n_episodes": 1}) == "qwen2.5-coder-1.5b/long-horizon/fp32-ep1"


def test_results_read_and_write_gzipped_or_plain(tmp_path):
    data = {"format": "rhea-bench/1", "reply": "¿qué?"}
    assert results_file(tmp_path) == tmp_path / "results.json"
    write_results(tmp_path / "results.json.gz", data)
    assert results_file(tmp_path) == tmp_path / "results.json.gz"
    assert read_results(tmp_path) == read_results(tmp_path / "results.json.gz") == data
    first = (tmp_path / "results.json.gz").read_bytes()
    write_results(tmp_path / "results.json.gz", data)
    assert (tmp_path / "results.json.gz").read_bytes() == first, "no timestamp: equal results, equal bytes"
    write_results(tmp_path / "results.json", data)
    assert results_file(tmp_path) == tmp_path / "results.json", "the plain file wins when both are there"


def test_a_gzipped_committed_run_is_resumed_and_stays_gzipped(model, tmp_path):
    import shutil

    out = tmp_path / "run"
    first = run_suite(model, "efficiency", ["vanilla"], out=out, **RUN)
    shutil.rmtree(out / "state")  # a committed run: the checkpoints are not committed
    (out / "results.json.gz").write_bytes(gzip.compress((out / "results.json").read_bytes()))
    (out / "results.json").unlink()
    again = run_suite(model, "efficiency", ["vanilla"], out=out, **RUN)
    assert not (out / "state" / "vanilla").exists(), "vanilla was taken from results.json.gz, not rerun"
    assert again["policies"]["vanilla"]["turns"] == first["policies"]["vanilla"]["turns"]
    assert not (out / "results.json").exists() and read_results(out)["config"] == first["config"]


def test_cli_bench_writes_index_rows(model, tmp_path, monkeypatch):
    import rhea.modeling.loading as loading

    monkeypatch.setattr(loading, "load_rhea_model", lambda name, **kw: model)
    index = tmp_path / "all" / "index.jsonl"
    argv = ["bench", "--suite", "efficiency", "--policies", "vanilla,rhea", "--turns", "2", "--episodes", "2",
            "--max-new-tokens", "2", "--model", "tiny", "--out", str(tmp_path / "out"), "--quiet",
            "--index", str(index), "--run-id", "tiny/efficiency/test"]
    assert main(argv) == 0
    rows = read_index(index)
    assert rows == read_index(tmp_path / "out" / "index.jsonl")
    assert {r.run_id for r in rows} == {"tiny/efficiency/test"} and {r.policy for r in rows} == {"vanilla", "rhea"}
    assert all(r.source == str(tmp_path / "out") and r.episodes == 2 and r.turns == 2 for r in rows)
    assert main(argv) == 0, "a rerun into the same index replaces its rows"
    assert len(read_index(index)) == len(rows)


@pytest.mark.parametrize("setup, flags, message", [
    (lambda p: p.mkdir(), ["--index", "{p}"], "is a folder"),
    (lambda p: p.write_text("{oops\n"), ["--index", "{p}"], "not a JSON object"),
    (lambda p: None, ["--suite", "efficiency,state-tracking", "--run-id", "x/y"], "names one run"),
])
def test_cli_bad_index_arguments_fail_before_loading_a_model(tmp_path, capsys, setup, flags, message):
    path = tmp_path / "index.jsonl"
    setup(path)
    flags = [f.format(p=path) for f in flags]
    suite = [] if "--suite" in flags else ["--suite", "efficiency"]
    code = main(["bench", *suite, *flags, "--out", str(tmp_path / "out"), "--model", str(tmp_path / "missing")])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_run_without_matplotlib_writes_results_and_summary(tmp_path, monkeypatch):
    """Plots are optional: a library install without matplotlib still writes every result."""
    import sys

    from rhea.eval.report import write_outputs
    from rhea.eval.runner import run_suite
    from rhea.testing import tiny_rhea

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = run_suite(tiny_rhea(), "efficiency", ["vanilla"], n_turns=2, max_new_tokens=2, progress=False)
    with pytest.warns(RuntimeWarning, match="matplotlib"):
        written = write_outputs(result, tmp_path)
    assert (tmp_path / "summary.md").is_file() and not list(tmp_path.glob("*.png"))
    assert all(p.suffix != ".png" for p in written)
