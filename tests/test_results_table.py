"""The README's results table is the one `benchmarks/results_table.py` renders from the committed results index,
and the index itself reads, follows the schema and points at dumps that are committed."""
from pathlib import Path

import pytest

from rhea.eval.report import results_file
from rhea.eval.results_index import read_index
from tests.repo_scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
table = load_script(ROOT / "benchmarks" / "results_table.py")


def test_readme_results_table_equals_the_generated_one():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = table.readme_block(text)  # fails, naming the markers, when they are missing
    expected = table.block(table.render(read_index(table.INDEX)))
    assert text[start:end] == expected, "README.md's results table is stale: run python benchmarks/results_table.py " \
                                        "--write-readme"
    assert table.main(["--check", str(ROOT / "README.md")]) == 0


def test_committed_index_covers_the_headline_runs_and_its_sources_exist():
    rows = read_index(table.INDEX)
    for run_id in table.HEADLINE_RUNS:
        run = [r for r in rows if r.run_id == run_id]
        assert {"vanilla", "rhea"} <= {r.policy for r in run}, run_id
        assert all(r.baseline == "vanilla" for r in run if r.policy != "vanilla" and r.paired_diff is not None)
    for source in {r.source for r in rows}:
        assert results_file(ROOT / source).is_file(), f"{source}: the index points at a dump that is not committed"


def test_replace_block_keeps_the_rest_and_refuses_missing_markers():
    text = f"intro\n{table.START}\nold\n{table.END}\nafter\n"
    assert table.replace_block(text, "| new |\n") == f"intro\n{table.START}\n| new |\n{table.END}\nafter\n"
    for broken in ("no markers", f"{table.END}\n{table.START}\n", f"{table.START}\n{table.START}\n{table.END}"):
        with pytest.raises(table.TableError, match="results-table:start"):
            table.replace_block(broken, "| new |\n")


def test_write_readme_and_check(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{table.START}\nstale\n{table.END}\n")
    assert table.main(["--check", str(readme)]) == 1
    assert "differs from the index" in capsys.readouterr().err
    assert table.main(["--write-readme", str(readme)]) == 0
    assert table.main(["--check", str(readme)]) == 0
    assert readme.read_text().startswith("# x\n\n" + table.START + "\n| suite | policy |")
    readme.write_text("# no markers\n")
    assert table.main(["--write-readme", str(readme)]) == 1
    assert "needs one line" in capsys.readouterr().err and readme.read_text() == "# no markers\n"


def test_an_unknown_run_is_a_named_error(capsys):
    assert table.main(["--run", "nope/none/fp32-ep1"]) == 1
    assert "no rows of run 'nope/none/fp32-ep1'" in capsys.readouterr().err


def test_build_index_rebuilds_the_committed_rows_of_a_run_from_its_dumps():
    """The efficiency runs (two 40-turn dumps) rebuilt from their gzipped dumps and git history equal the rows
    committed in the index. Needs the repository's history (who added each dump); a shallow clone skips."""
    import subprocess

    build = load_script(ROOT / "benchmarks" / "build_index.py")
    dump = "benchmarks/results/bench_qwen_step1181/efficiency/results.json.gz"
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True,
                             text=True)
    history = subprocess.run(["git", "-C", str(ROOT), "log", "--follow", "--format=%H", "--", dump],
                             capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() != "false" or not history.stdout.strip():
        pytest.skip("no git history of the committed dumps here (a shallow clone or an unpacked archive)")
    runs = [r for r in build.RUNS if r.suite == "efficiency"]
    assert runs, "the index declares the efficiency runs"
    rebuilt = build.build(ROOT / "benchmarks" / "results", runs)
    committed = [r for r in read_index(table.INDEX) if r.run_id in {run.run_id for run in runs}]
    assert rebuilt == committed


def test_build_index_refuses_a_policy_declared_with_other_options():
    build = load_script(ROOT / "benchmarks" / "build_index.py")
    wrong = build.Run("qwen2.5-coder-1.5b/efficiency/fp32-ep1", "efficiency", "float32", (
        build.Source("vanilla", "bench_qwen_step1181/efficiency"),
        build.Source("rhea", "bench_qwen_step1181/efficiency-replan8", {"replan_every": 4})))
    with pytest.raises(build.BuildError, match=r"ran with options \{'replan_every': 8\}, declared \{'replan_every': 4\}"):
        build.build(ROOT / "benchmarks" / "results", [wrong])
    other_dtype = build.Run("x/efficiency/bf16-ep1", "efficiency", "bfloat16", (
        build.Source("vanilla", "bench_qwen_step1181/efficiency"),))
    with pytest.raises(build.BuildError, match="not bfloat16 alone"):
        build.build(ROOT / "benchmarks" / "results", [other_dtype])
    other_setting = build.Run("x/instruction-retention/bf16-ep8-anchor-bias-4", "instruction-retention", "bfloat16", (
        build.Source("rhea", "anchor_bias_qwen2.5-coder-1.5b/instruction-retention_beta1", settings={"anchor_bias": 4.0}),))
    with pytest.raises(build.BuildError, match=r"ran with anchor_bias=1\.0, declared 4\.0"):
        build.build(ROOT / "benchmarks" / "results", [other_setting])
