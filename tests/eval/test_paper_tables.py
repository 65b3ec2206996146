"""The papers' transcribed result tables (benchmarks/paper_tables.json): every cell carries its
table reference, and spot checks against the numbers the papers' prose repeats."""
import json
from pathlib import Path

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "paper_tables.json"


def _cell(data, paper, table, row, column):
    t = data["papers"][paper]["tables"][table]
    (r,) = [r for r in t["rows"] if r["name"] == row]
    (c,) = [c for c in r["cells"] if c["column"] == column]
    return c


def test_every_cell_has_its_table_reference():
    data = json.loads(PATH.read_text())
    n = 0
    for paper in data["papers"].values():
        for name, table in paper["tables"].items():
            assert table["ref"] == f"{paper['short']} {name}" and table["caption"].startswith(name)
            for row in table["rows"]:
                assert row["name"] and len(row["cells"]) == len(table["columns"])
                for cell in row["cells"]:
                    n += 1
                    assert cell["ref"] == table["ref"] and cell["text"]
                    assert cell["value"] is not None or cell["text"] in ("-", "–")
    assert n > 400
    assert {"Table 1", "Table 2", "Table 3", "Table 4", "Table 5"} <= set(data["papers"]["rhea"]["tables"])


def test_cells_match_what_the_papers_prose_repeats():
    data = json.loads(PATH.read_text())
    # Rhea §4.2-4.4: vanilla 8.54 -> 6.32, Rhea 7.36 / 8.28, latency 27.29 -> 29.08, IAR 8.18 vs 1.95,
    # preserve 6.63, abandon 7.89, JGA 0.63 -> 0.05 and 0.51, recognizer 0.62 / 0.89
    assert _cell(data, "rhea", "Table 1", "Vanilla", "MT-Bench Acc")["value"] == 8.54
    assert _cell(data, "rhea", "Table 1", "Vanilla", "Long-MT-Bench+ Acc")["value"] == 6.32
    assert _cell(data, "rhea", "Table 1", "Rhea (ours)", "Long-MT-Bench+ Acc")["value"] == 7.36
    assert _cell(data, "rhea", "Table 1", "Rhea (ours)", "MT-Eval Acc")["style"] == ["bold"]
    assert _cell(data, "rhea", "Table 1", "Rhea (ours)", "Long-MT-Bench+ Latency (s)")["value"] == 29.08
    assert _cell(data, "rhea", "Table 1", "MemGAS", "Long-MT-Bench+ Latency (s)")["footnotes"] == ["b"]
    assert _cell(data, "rhea", "Table 3", "+ EM + HCR + IM (full Rhea)", "IAR")["value"] == 8.18
    assert _cell(data, "rhea", "Table 3", "+ EM + HCR (no IM)", "IAR")["value"] == 1.95
    assert _cell(data, "rhea", "Table 4", "Rhea-preserve (Retains all model replies)",
                 "Avg. Score (IAR)")["value"] == 6.63
    assert _cell(data, "rhea", "Table 2", "Actions", "Shared")["value"] == 0.05
    assert _cell(data, "rhea", "Table 5", "Qwen3-0.6B", "Recall")["value"] == 0.8947
    # Sculptor §4.2: Sculptor-M3-RL 99.4 on PI-LLM; ACR §5.2.1: SFT 31.80 -> ACR 36.41 on NQ
    assert _cell(data, "sculptor", "Table 2", "Sculptor-M3-RL", "PI-LLM (Acc %)")["value"] == 99.4
    assert _cell(data, "acr", "Table 1", "SFT", "NQ†")["value"] == 31.80
    assert _cell(data, "acr", "Table 1", "ACR (Ours)", "NQ†")["value"] == 36.41
    assert _cell(data, "ace", "Table 1", "ACE (Ours)", "MultiHop-RAG Avg. Tokens")["value"] == 10653
    assert "no_tables" in data["papers"]["context-agent"]


def test_table5_shows_each_recognizer_variant_held_out_with_its_intervals():
    from tests.repo_scripts import load_script

    paper_tables = load_script(PATH.parent / "paper_tables.py")
    pooled = {"precision": 0.9, "recall": 0.75, "precision_ci95": [0.8, 0.95], "recall_ci95": [0.6, 0.85],
              "tp": 9, "fp": 1, "fn": 3, "tn": 87}
    rows = paper_tables._recognizer_rows({"variants": {"rules+minilm": {"pooled_all_sources": pooled},
                                                       "rules-only": {"pooled_real_sources": pooled}}})
    assert rows == ["| ours: rules+minilm (shipped), all sources, held out (n=100, 12 global) | 0.96 | "
                    "0.90 [0.80, 0.95] | 0.75 [0.60, 0.85] |",
                    "| ours: rules-only, real sources only, held out (n=100, 12 global) | 0.96 | "
                    "0.90 [0.80, 0.95] | 0.75 [0.60, 0.85] |"]
    # the older single-split form still renders; nothing at all gives no rows
    old = paper_tables._recognizer_rows({"test_rules_only": {"n": 10, "tp": 2, "tn": 7, "precision": 1.0, "recall": 0.5}})
    assert old == ["| ours: rules only (test split, n=10) | 0.90 | 1.00 | 0.50 |"]
    assert paper_tables._recognizer_rows({}) == []


def test_variant_rows_are_paired_with_the_main_runs_vanilla_on_the_same_episodes():
    from tests.repo_scripts import load_script

    from .test_eval_stats import _retention_results

    paper_tables = load_script(PATH.parent / "paper_tables.py")
    main = _retention_results()
    main["config"]["episodes_sha256"] = "same"
    rerun = {"config": dict(main["config"]), "policies": {"good": main["policies"]["good"]}}
    paired = paper_tables.pair_with_main_baseline({"instruction-retention": main}, {"instruction-retention": rerun})
    stats = paired["instruction-retention"]["statistics"]
    assert set(stats["policies"]) == {"good"} and stats["baseline"] == "vanilla"
    cell = paper_tables.versus(paired, "instruction-retention", "good", "iar")
    assert cell.startswith("+") and "p=0.0078" in cell
    # other episodes (or no digest): nothing is paired, the row keeps its "–"
    rerun["config"]["episodes_sha256"] = "other"
    other = paper_tables.pair_with_main_baseline({"instruction-retention": main}, {"instruction-retention": rerun})
    assert "statistics" not in other["instruction-retention"]
    assert paper_tables.versus(other, "instruction-retention", "good", "iar") == "–"


def test_a_variants_recorded_policy_options_are_named():
    from tests.repo_scripts import load_script

    paper_tables = load_script(PATH.parent / "paper_tables.py")
    runs = {"state-tracking": {"config": {"policy_kwargs": {}}},
            "instruction-retention": {"config": {"policy_kwargs": {"rhea-no-im": {"latent_tier": "on", "recent_raw": 0},
                                                                   "rhea": {}}}}}
    assert paper_tables._options_note(runs) == "; options: rhea-no-im latent_tier=on recent_raw=0 (instruction-retention)"
    assert paper_tables._options_note({"x": {"config": {}}}) == ""


def test_a_variant_row_appears_only_in_the_tables_its_suites_fill():
    from tests.repo_scripts import load_script

    from .test_eval_stats import _retention_results

    paper_tables = load_script(PATH.parent / "paper_tables.py")
    main = _retention_results()
    main["config"]["n_turns"] = 10
    other_suite = {"config": {**main["config"], "suite": "long-horizon"},
                   "policies": {"vanilla": {"aggregate": {}, "turns": [], "cost": {}}}}
    text = paper_tables.render({"instruction-retention": main}, json.loads(PATH.read_text()),
                               {"lh": {"long-horizon": other_suite}})
    table1 = text.split("## Rhea Table 1")[1].split("## Rhea Table 2")[0]
    table3 = text.split("## Rhea Table 3")[1].split("## Rhea Table 4")[0]
    assert "| vanilla (lh) |" in table1 and "| vanilla |" in table3 and "vanilla (lh)" not in table3
    assert "pair them with the vanilla (lh) of the same runs (long-horizon)" in text


def test_a_variant_in_another_dtype_is_not_paired_with_the_main_vanilla():
    from tests.repo_scripts import load_script

    from .test_eval_stats import _retention_results

    paper_tables = load_script(PATH.parent / "paper_tables.py")
    main = _retention_results()
    main["config"].update(episodes_sha256="same", n_turns=10)
    main["policies"]["vanilla"]["environments"] = [{"dtype": "float32"}]
    rerun = {"config": {**main["config"], "dtype": "bfloat16"}, "policies": {"good": main["policies"]["good"]}}
    paired = paper_tables.pair_with_main_baseline({"instruction-retention": main}, {"instruction-retention": rerun})
    assert "statistics" not in paired["instruction-retention"]
    text = paper_tables.render({"instruction-retention": main}, json.loads(PATH.read_text()), {"bf16": paired})
    assert "instruction-retention ran in bfloat16, not paired with the main runs' vanilla of another dtype" in text
    rerun["config"]["dtype"] = "float32"
    paired = paper_tables.pair_with_main_baseline({"instruction-retention": main}, {"instruction-retention": rerun})
    assert paired["instruction-retention"]["statistics"]["baseline"] == "vanilla"


def test_a_suite_found_twice_is_an_error_naming_both_runs(tmp_path, capsys):
    import pytest

    from tests.repo_scripts import load_script

    paper_tables = load_script(PATH.parent / "paper_tables.py")

    def write(folder, suite):
        (tmp_path / folder).mkdir(parents=True)
        data = {"format": "rhea-bench/1", "config": {"suite": suite}, "policies": {}}
        (tmp_path / folder / "results.json").write_text(json.dumps(data))

    write("run/instruction-retention", "instruction-retention")
    write("run/long-horizon", "long-horizon")
    assert set(paper_tables.load_results(tmp_path / "run")) == {"instruction-retention", "long-horizon"}
    write("run/instruction-retention-latent-off", "instruction-retention")
    with pytest.raises(SystemExit, match=r"two instruction-retention runs: .*instruction-retention/results.json and "
                                         r".*instruction-retention-latent-off/results.json"):
        paper_tables.load_results(tmp_path / "run")
    # the folders of the runs meant, several at once (what --variant LABEL=DIR,DIR passes)
    picked = paper_tables.load_results(tmp_path / "run/instruction-retention-latent-off", tmp_path / "run/long-horizon")
    assert set(picked) == {"instruction-retention", "long-horizon"}
    for spec, why in (("x=", "--variant takes LABEL=DIR[,DIR...], got 'x='"),
                      (f"x={tmp_path / 'run/long-horizon'},{tmp_path / 'nowhere'}", "--variant x: no such folder")):
        with pytest.raises(SystemExit):
            paper_tables.main(["--results", str(tmp_path / "run/long-horizon"), "--out", str(tmp_path / "t"),
                               "--variant", spec])
        assert why in capsys.readouterr().err
    assert not (tmp_path / "t.md").exists()


def test_tables_from_the_results_index_equal_the_tables_from_the_dumps(tmp_path):
    """The same run, rendered from its results.json.gz and from its index rows: every cell of ours agrees."""
    import gzip

    import pytest

    from rhea.eval.results_index import read_index, rows_from_results
    from tests.repo_scripts import load_script

    from .test_eval_stats import _retention_results

    paper_tables = load_script(PATH.parent / "paper_tables.py")
    results = _retention_results()
    from rhea.eval.stats_report import statistics

    results["statistics"] = statistics(results)
    results["format"] = "rhea-bench/1"
    results["config"].update(model="tiny", dtype="float32")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json.gz").write_bytes(gzip.compress(json.dumps(results).encode()))
    from_dumps = paper_tables.load_results(tmp_path / "run")
    assert set(from_dumps) == {"instruction-retention"}, "a gzipped dump is found like a plain one"

    from rhea.eval.results_index import write_index

    write_index(tmp_path / "index.jsonl", rows_from_results(results, run_id="tiny/ir/fp32", date="2026-11-30"))
    from_index = paper_tables.results_from_index(read_index(tmp_path / "index.jsonl"), ["tiny/ir/fp32"])
    for policy in results["policies"]:
        for key in ("iar", "context_tokens"):
            assert paper_tables.ours(from_index, "instruction-retention", policy, key) == \
                paper_tables.ours(from_dumps, "instruction-retention", policy, key)
            assert paper_tables.versus(from_index, "instruction-retention", policy, key) == \
                paper_tables.versus(from_dumps, "instruction-retention", policy, key)
    with pytest.raises(SystemExit, match="no rows of that run"):
        paper_tables.results_from_index(read_index(tmp_path / "index.jsonl"), ["other/run"])
    with pytest.raises(SystemExit):
        paper_tables.main(["--index", str(tmp_path / "index.jsonl"), "--out", str(tmp_path / "t")])  # no --run
    assert paper_tables.main(["--index", str(tmp_path / "index.jsonl"), "--run", "tiny/ir/fp32",
                              "--out", str(tmp_path / "t")]) == 0
    assert "| vanilla |" in (tmp_path / "t.md").read_text()
