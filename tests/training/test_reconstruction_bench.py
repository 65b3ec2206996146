"""benchmarks/reconstruction.py: its measure on a tiny model, its input checks and the fidelity record."""
import json
from pathlib import Path

import pytest

from rhea.testing import tiny_rhea
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "reconstruction.py"


@pytest.fixture(scope="module")
def bench():
    mod = load_script(_PATH)
    return mod


def test_measure_reports_own_control_gap_and_greedy(bench):
    model = tiny_rhea()
    texts = ["the cat is blue", "paris is the capital", "one two three", "a dog said no"]
    out = bench.measure(model, texts, greedy_n=2, batch_size=3)
    tf = out["teacher_forced"]
    assert tf["own"]["n"] == tf["control"]["n"] == tf["gap"]["n"] == 4
    assert tf["gap"]["mean"] == pytest.approx(tf["own"]["mean"] - tf["control"]["mean"])
    assert out["greedy"]["exact_own"]["n"] == 2 and len(out["greedy"]["examples"]) == 2


def test_paired_compares_each_adapter_with_the_first_reply_by_reply(bench):
    a = {"per_reply": {"own": [0.5, 0.6, 0.7, 0.4], "control": [0.4, 0.4, 0.4, 0.4]}}
    b = {"per_reply": {"own": [0.6, 0.7, 0.8, 0.5], "control": [0.4, 0.5, 0.4, 0.4]}}
    out = bench.paired({"first": a, "second": b})
    row = out["second - first"]
    assert row["own"]["diff"] == pytest.approx(0.1) and row["own"]["n"] == 4
    assert row["own"]["lo"] == pytest.approx(0.1) and row["own"]["hi"] == pytest.approx(0.1)
    assert row["gap"]["diff"] == pytest.approx(0.075)  # gaps .1 .2 .3 0 -> .2 .2 .4 .1
    assert 0 < row["own"]["p"] <= 0.125 + 1e-9  # every reply better: the most extreme of 2^4 patterns, both sides
    assert bench.paired({"only": a}) == {}


def test_rejects_a_directory_that_is_not_an_adapter_dir(bench, tmp_path, capsys):
    assert bench.main(["--data", str(tmp_path), "--adapters", str(tmp_path)]) == 2
    assert "not a save_pretrained directory" in capsys.readouterr().err


def test_rejects_a_data_directory_without_replies(bench, tmp_path, capsys):
    tiny_rhea().save_pretrained(tmp_path / "a")
    assert bench.main(["--data", str(tmp_path / "empty"), "--adapters", str(tmp_path / "a")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_plot_writes_a_png(bench, tmp_path):
    ci = {"mean": 0.5, "lo": 0.4, "hi": 0.6, "n": 3}
    bench.plot({"a": {"teacher_forced": {"own": ci, "control": ci}}}, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 0
    json.dumps(ci)


def test_compressor_curve_reads_a_run_and_keeps_the_last_record_per_step(tmp_path):
    mod = load_script(_PATH.parent / "compressor_curve.py")
    run = tmp_path / "run"
    run.mkdir()
    assert mod.main(["--run", str(run), "--out", str(tmp_path / "c")]) == 2  # no curve yet
    (run / "log.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0 - s / 10, "s": 1.0}) + "\n" for s in (1, 2, 2, 3)))
    rows = [{"step": s, "loss": 3.0, "own": 0.4 + s / 100, "control": 0.4, "gap": s / 100, "gap_lo": 0.0,
             "gap_hi": s / 50, "n": 4} for s in (0, 50, 50)]
    (run / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert mod.main(["--run", str(run), "--out", str(tmp_path / "c")]) == 0
    out = json.loads((tmp_path / "c.json").read_text())
    assert [r["step"] for r in out["curve"]] == [0, 50] and [r["step"] for r in out["loss"]] == [1, 2, 3]
    assert (tmp_path / "c.png").stat().st_size > 0


def test_compressor_curve_draws_the_fact_qa_panel_when_the_run_has_one(tmp_path, monkeypatch):
    mod = load_script(_PATH.parent / "compressor_curve.py")
    run = tmp_path / "run"
    run.mkdir()
    qa = {"qa_own": 0.3, "qa_control": 0.1, "qa_gap": 0.2, "qa_gap_lo": 0.1, "qa_gap_hi": 0.3, "qa_n": 8}
    rows = [{"step": s, "loss": 3.0, "own": 0.5, "control": 0.4, "gap": 0.1, "gap_lo": 0.0, "gap_hi": 0.2, "n": 4, **qa}
            for s in (0, 25)]
    rows[0]["qa_raw"] = 0.25
    (run / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "curve.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if not k.startswith("qa_")}) + "\n"
                                               for r in rows))
    import matplotlib.pyplot as plt
    widths = []
    real = plt.subplots

    def spy(*a, **k):
        widths.append(a[1] if len(a) > 1 else k.get("ncols"))
        return real(*a, **k)

    monkeypatch.setattr(plt, "subplots", spy)
    assert mod.main(["--run", str(run), "--out", str(tmp_path / "q")]) == 0
    assert mod.main(["--run", str(plain), "--out", str(tmp_path / "p")]) == 0
    assert widths == [3, 2]
    assert json.loads((tmp_path / "q.json").read_text())["curve"][0]["qa_raw"] == 0.25


def test_compressor_curve_compares_runs_shifted_to_their_start(tmp_path):
    """--compare LABEL=DIR@STEP adds another run's curve (last record per step) to the JSON and a last panel;
    a missing run or a malformed spec is refused by name before anything is written."""
    mod = load_script(_PATH.parent / "compressor_curve.py")
    runs = {}
    for name, n_mem in (("base", 8), ("wide", 16)):
        runs[name] = tmp_path / name
        runs[name].mkdir()
        (runs[name] / "args.json").write_text(json.dumps({"n_mem": n_mem}))
        rows = [{"step": s, "loss": 1.0, "own": 0.5 + s / 1000, "control": 0.3, "gap": 0.2, "gap_lo": 0.1, "gap_hi": 0.3,
                 "n": 4} for s in (0, 50, 50, 100)]
        (runs[name] / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "cap"
    argv = ["--run", str(runs["base"]), "--out", str(out), "--compare", f"n_mem 16={runs['wide']}@100"]
    assert mod.main(argv) == 0
    rec = json.loads(out.with_suffix(".json").read_text())
    (other,) = rec["compare"]
    assert other["label"] == "n_mem 16" and other["offset"] == 100 and other["run_args"]["n_mem"] == 16
    assert [r["step"] for r in other["curve"]] == [0, 50, 100]
    for bad in ("no-label-or-dir", f"x={tmp_path / 'missing'}", f"x={runs['wide']}@soon"):
        with pytest.raises(SystemExit):
            mod.main(["--run", str(runs["base"]), "--out", str(tmp_path / "bad"), "--compare", bad])
    assert not (tmp_path / "bad.json").exists()


def test_write_fidelity_records_it_recomputes_the_mode_and_rewrites_the_card(bench, tmp_path):
    from rhea.testing import save_tiny_base
    from tests.training.test_compressor import _write_data

    data = tmp_path / "data"
    _write_data(data, extra_replies=30)
    model = tiny_rhea()
    model.config.base_model = save_tiny_base(tmp_path / "base")
    model.save_pretrained(tmp_path / "a")
    assert "No compressor fidelity is recorded" in (tmp_path / "a" / "README.md").read_text()
    assert bench.main(["--data", str(data), "--adapters", str(tmp_path / "a"), "--write-fidelity", "--greedy-n", "0",
                       "--out", str(tmp_path / "r")]) == 0
    cfg = json.loads((tmp_path / "a" / "rhea_config.json").read_text())
    measured = json.loads((tmp_path / "r.json").read_text())["results"][str(tmp_path / "a")]["teacher_forced"]
    assert cfg["fidelity"]["reconstruction_token_acc"] == round(measured["own"]["mean"], 4)
    assert cfg["fidelity"]["n"] == measured["own"]["n"] >= 1
    assert "no measured compressor fidelity" not in cfg["extra"]["active_mode"]["reason"]  # recomputed, not stale
    assert "No compressor fidelity is recorded" not in (tmp_path / "a" / "README.md").read_text()
