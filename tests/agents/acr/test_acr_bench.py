"""benchmarks/acr.py: the operator sweep runs the model-driven refactorer on every operator and counts it."""
from __future__ import annotations

from pathlib import Path

import pytest

from rhea.agents.acr import ACTIVE_OPERATORS, ACRPolicy
from rhea.agents.acr.tasks import drift_tasks
from rhea.backends.llm import ScriptedGenerator
from rhea.testing import tiny_tokenizer
from rhea.training.acr import exact_match, value_match

from .helpers import FirstFactSolver
from tests.repo_scripts import load_script

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "acr.py"


@pytest.fixture(scope="module")
def bench():
    mod = load_script(_PATH)
    return mod


def test_every_operator_reaches_the_refactorer_and_is_counted(bench):
    tok = tiny_tokenizer()
    tasks = drift_tasks(2, kinds=("correction",), seed=4)
    rewards = {"em": exact_match, "value": value_match}
    results = {"settings": {}, "operator_sweep": {"prompt-only": {}, "trained": {}}}
    for label in ("prompt-only", "trained"):
        for op in ACTIVE_OPERATORS:
            refactorer = ScriptedGenerator(["<summary>x</summary>", "no tags"])
            policy = lambda task, r=refactorer, o=op: ACRPolicy(router=bench.FixedRouter(o), refactorer=r, tokenizer=tok)
            summary, rows = bench.evaluate(f"sweep/{label}/{op}", tasks, policy, FirstFactSolver(), tok, rewards,
                                           [refactorer], 4, [])
            assert [r["refactor_source"] for r in rows] == ["refactorer", "fallback-raw"]
            assert summary["operators"] == {op: 2} and summary["refactor_sources"] == {op: {"refactorer": 1, "fallback-raw": 1}}
            assert summary["n"] == 2 and summary["em_ci95"][0] <= summary["em"] <= summary["em_ci95"][1]
            results["operator_sweep"][label][op] = summary
    none = bench.summarize([{**r, "operator": "none", "refactor_source": "none"} for r in rows])
    for name in ("prompt-only", "w/o-router", "w/o-refactorer", "trained"):
        results["settings"][name] = none
    counts = bench._runs_per_operator(results, ACTIVE_OPERATORS)
    for label in ("prompt-only", "trained"):
        assert counts[label] == {op: {"runs": 2, "refactorer": 1, "fallback-raw": 1} for op in ACTIVE_OPERATORS}


BABI = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Mary picked up the football.
4 Where is Mary?\tbathroom\t1
5 Mary went to the garden.
6 Where is the football?\tgarden\t3 5
1 Sandra journeyed to the kitchen.
2 Where is Sandra?\tkitchen\t1
"""


def test_babi_tasks_turn_each_fact_into_a_user_turn(tmp_path):
    from rhea.agents.acr import ACRConfigError
    from rhea.agents.acr.tasks import BABI_REPLY, babi_tasks

    path = tmp_path / "qa2_two-supporting-facts_test.txt"
    path.write_text(BABI)
    tasks = {t.task_id: t for t in babi_tasks(path, 3, seed=0)}
    assert sorted(tasks) == ["qa2-0-4", "qa2-0-6", "qa2-1-2"]
    football = tasks["qa2-0-6"]
    assert [t.user for t in football.conversation] == ["Mary moved to the bathroom.", "John went to the hallway.",
                                                        "Mary picked up the football.", "Mary went to the garden."]
    assert all(t.assistant == BABI_REPLY for t in football.conversation)
    assert football.query == "Where is the football? Answer with one word." and football.answer == "garden"
    assert football.kind == "qa2" and football.candidates == ["bathroom", "garden", "kitchen"]
    assert value_match("The football is in the garden.", football) == 1.0
    assert value_match("garden or bathroom", football) == 0.0
    assert [t.task_id for t in babi_tasks(path, 1, seed=0, max_facts=1)] == ["qa2-1-2"]  # longer stories skipped
    with pytest.raises(ACRConfigError, match="only 1 questions have <= 1 facts"):
        babi_tasks(path, 2, max_facts=1)
    with pytest.raises(ACRConfigError, match="at least one bAbI file"):
        babi_tasks([], 1)


def test_rows_resume_and_paired_comparison_with_none(bench, tmp_path):
    tok = tiny_tokenizer()
    tasks = drift_tasks(3, kinds=("correction",), seed=4)
    rewards = {"em": exact_match, "value": value_match}
    rows_path = tmp_path / bench.ROWS_FILE
    sunk = []

    def sink(row, entry):
        sunk.append(row)
        with rows_path.open("a") as f:
            f.write(bench.json.dumps({"setting": "none", "row": row, "trace": entry}) + "\n")

    solver = FirstFactSolver()
    _, first = bench.evaluate("none", tasks[:2], None, solver, tok, rewards, [], 4, [], sink=sink)
    assert len(solver.calls) == 2 and sunk == first
    done = bench.load_rows(rows_path)
    assert sorted(done["none"]) == sorted(t.task_id for t in tasks[:2])
    _, rows = bench.evaluate("none", tasks, None, solver, tok, rewards, [], 4, [], done=done["none"])
    assert len(solver.calls) == 3  # the two finished tasks are reused, only the third runs
    assert [r["task_id"] for r in rows] == [t.task_id for t in tasks] and rows[:2] == first
    # the raw history answers with the corrected-away first value; a refactored one would not
    better = [{**r, "em": 1.0, "value": 1.0} for r in rows]
    cmp = bench.compare_with_none({"none": rows, "prompt-only": better, "sweep/prompt-only/noise_filter": better})
    assert set(cmp) == {"prompt-only"}
    assert cmp["prompt-only"]["value"]["diff"] == pytest.approx(1.0 - sum(r["value"] for r in rows) / 3)
    assert cmp["prompt-only"]["value"]["n"] == 3
    # an ACR setting's decisions go to the trace, and come back with the rows on a resume
    router = bench.FixedRouter("fact_rectify")
    refactorer = ScriptedGenerator(["<summary>the key is new</summary>"])
    policy = lambda task: ACRPolicy(router=router, refactorer=refactorer, tokenizer=tok)
    records, trace = [], []
    bench.evaluate("prompt-only", tasks[:1], policy, FirstFactSolver(), tok, rewards, [refactorer], 4, trace,
                   sink=lambda row, entry: records.append({"setting": "prompt-only", "row": row, "trace": entry}))
    assert len(trace) == 1 and records[0]["trace"] == trace[0] and trace[0]["route"]["selected_operator"] == "fact_rectify"
    rows_path.write_text("".join(bench.json.dumps(r) + "\n" for r in records))
    restored = []
    assert list(bench.load_rows(rows_path, None, restored)["prompt-only"]) == [tasks[0].task_id]
    assert restored == trace
    key = {"model": "m", "router_tokens": 48}
    rows_path.write_text(bench.json.dumps({"setting": "none", "run": key, "row": first[0]}) + "\n")
    assert list(bench.load_rows(rows_path, key)["none"]) == [first[0]["task_id"]]
    with pytest.raises(SystemExit, match="router_tokens.*--no-resume"):
        bench.load_rows(rows_path, {**key, "router_tokens": 128})
    assert bench.parse_settings("trained,none") == ["none", "trained"]
    with pytest.raises(SystemExit, match="unknown"):
        bench.parse_settings("none,oracle")


def test_trained_adapters_give_their_lora_shape_and_the_tgse_run_beside_them(bench, tmp_path):
    """`--adapters DIR` builds the controller with the adapters' own rank (a paper-setting r16 run evaluated
    by the CPU setting, whose TGSE default is r8) and records the TGSE run; a wrong folder fails by name."""
    import json

    from .helpers import tiny_controller

    ctrl = tiny_controller()  # r4 / alpha 8
    ctrl.save_adapters(tmp_path / "run" / "adapters")
    (tmp_path / "run" / "pools").mkdir()
    (tmp_path / "run" / "pools" / "corrective.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    (tmp_path / "run" / "state.json").write_text(json.dumps({"iteration": 1, "used_tasks": ["t0", "t1"],
                                                             "history": [{"iteration": 0}], "config": {"lora_r": 4}}))
    lora, prov = bench.trained_adapters(str(tmp_path / "run" / "adapters"))
    assert lora == {"lora_r": 4, "lora_alpha": 8}
    assert prov["pools"] == {"corrective": 2} and prov["used_tasks"] == 2 and prov["history"] == [{"iteration": 0}]
    with pytest.raises(SystemExit, match="router/adapter_config.json"):
        bench.trained_adapters(str(tmp_path / "run"))


def test_sweep_only_needs_tasks_per_operator(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--sweep-only", "--sweep-n", "0"])
    assert "--sweep-only needs --sweep-n >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["2/2", "1", "a/b", "-1/2"])
def test_shard_must_be_i_of_n(bench, capsys, bad):
    with pytest.raises(SystemExit):
        bench.main([f"--shard={bad}"])
    assert "must be I/N with 0 <= I < N" in capsys.readouterr().err
