"""TGSE end to end on the tiny model: one iteration with a scripted teacher, then resume."""
from __future__ import annotations

import json

import pytest
import torch

from rhea.agents.acr import TGSEStateError
from rhea.agents.acr.tasks import drift_tasks
from rhea.agents.acr.teacher import RuleTeacher
from rhea.backends.llm import ScriptedGenerator
from rhea.training.acr import TGSE, TGSEConfig

from .helpers import FirstFactSolver, tiny_controller


def config(tmp_path, **kw) -> TGSEConfig:
    return TGSEConfig(output_dir=str(tmp_path / "tgse"), iterations=3, phase2_iterations=1, seed_tasks=2,
                      tasks_per_iteration=2, val_fraction=0.0, epochs=1, lr=1e-2, router_max_new_tokens=4,
                      refactor_max_new_tokens=4, **kw)


def snapshot(ctrl, name):
    return [p.detach().clone() for p in ctrl.adapter_parameters(name)]


def test_one_iteration_end_to_end_with_a_scripted_teacher(tmp_path):
    tasks = drift_tasks(2, kinds=("correction", "clean"), seed=1)
    key, new = tasks[0].query.split()[3].rstrip("?"), tasks[0].answer
    teacher = ScriptedGenerator([
        json.dumps({"analysis": "corrected", "drift_detected": True, "selected_operator": "fact_rectification"}),
        f"<summary>The {key} is {new}.</summary>",
        json.dumps({"analysis": "clean", "drift_detected": False, "selected_operator": "NONE"}),
    ])
    ctrl = tiny_controller()
    before = {name: snapshot(ctrl, name) for name in ("router", "refactorer")}
    loop = TGSE(config(tmp_path), ctrl, teacher, tasks, solver=FirstFactSolver(), log=lambda *_: None)
    result = loop.run(max_iterations=1)

    assert result.iterations_run == 1 and result.pools == {"corrective": 1, "compressive": 0, "regularization": 1}
    assert teacher.replies == []  # Phase I: the teacher routed both tasks and refactored the drifted one
    corrective = loop.pools["corrective"][0]
    assert (corrective.reward_raw, corrective.reward_refactored) == (0.0, 1.0)
    assert corrective.refactor_target == f"<summary>The {key} is {new}.</summary>" and corrective.refactored_by == "teacher"
    assert json.loads(loop.pools["regularization"][0].router_target)["selected_operator"] == "NONE"
    record = result.history[0]
    assert record["phase"] == "I" and record["router"]["train_instances"] == 2 and record["refactorer"]["steps"] == 1
    for name in ("router", "refactorer"):  # both adapters were updated
        assert any(not torch.equal(a, b) for a, b in zip(before[name], snapshot(ctrl, name)))
    out = tmp_path / "tgse"
    assert (out / "state.json").is_file() and (out / "adapters" / "router" / "adapter_model.safetensors").is_file()
    assert len((out / "pools" / "corrective.jsonl").read_text().splitlines()) == 1


def test_resume_continues_with_the_saved_adapters_pools_and_unused_tasks(tmp_path):
    tasks = drift_tasks(4, kinds=("correction", "clean"), seed=2)
    cfg = config(tmp_path)
    first = TGSE(cfg, tiny_controller(), RuleTeacher(), tasks, solver=FirstFactSolver(), log=lambda *_: None)
    first.run(max_iterations=1)
    saved = snapshot(first.controller, "router")

    ctrl = tiny_controller()  # fresh weights: resume must load the saved adapters
    second = TGSE(cfg, ctrl, RuleTeacher(), tasks, solver=FirstFactSolver(), log=lambda *_: None)
    assert second.load_state() and second.iteration == 1
    assert all(torch.equal(a, b) for a, b in zip(saved, snapshot(ctrl, "router")))
    assert second.used == [t.task_id for t in tasks[:2]] and sum(map(len, second.pools.values())) == 2
    result = second.run(max_iterations=1)
    assert result.history[-1]["iteration"] == 1 and result.history[-1]["phase"] == "II"
    assert second.used == [t.task_id for t in tasks]
    state = json.loads((tmp_path / "tgse" / "state.json").read_text())
    assert state["iteration"] == 2 and len(state["history"]) == 2

    with pytest.raises(TGSEStateError, match="already holds a TGSE run"):
        TGSE(cfg, tiny_controller(), RuleTeacher(), tasks, log=lambda *_: None).run(resume=False)
    with pytest.raises(TGSEStateError, match="not in the task list"):
        TGSE(cfg, tiny_controller(), RuleTeacher(), drift_tasks(1, seed=9, kinds=("clean",)), log=lambda *_: None).load_state()


def test_config_validation_and_annealing():
    cfg = TGSEConfig(iterations=6, phase2_iterations=3, p_teacher_start=0.8, p_teacher_decay=0.5, p_teacher_min=0.3)
    assert [cfg.phase(i) for i in range(6)] == ["I", "II", "II", "II", "III", "III"]
    assert [cfg.p_teacher(i) for i in range(6)] == [1.0, 0.8, 0.4, 0.3, 0.0, 0.0]
    from rhea.agents.acr import ACRConfigError

    with pytest.raises(ACRConfigError, match="delta=0"):
        TGSEConfig(delta=0)
    with pytest.raises(ACRConfigError, match="pool_ratios"):
        TGSEConfig(pool_ratios={"corrective": 1, "useless": 1})
    with pytest.raises(ACRConfigError, match="unknown TGSE key"):
        TGSEConfig.from_dict({"learning_rate": 1})


def test_small_pools_are_not_held_out_for_validation(tmp_path):
    import random

    from rhea.training.acr import Instance

    loop = TGSE(TGSEConfig(output_dir=str(tmp_path / "v"), val_fraction=0.99), tiny_controller(),
                RuleTeacher(), drift_tasks(1), log=lambda *_: None)
    make = lambda n: Instance(f"t{n}", "corrective", f"t{n}", 0, "fact_rectification", [], "{}", [], "<summary>x</summary>")
    loop.pools["corrective"] = [make(0)]
    train, val = loop._mix("router", random.Random(0))
    assert len(train) == 1 and val == []
    loop.pools["corrective"] = [make(n) for n in range(6)]
    train, val = loop._mix("refactorer", random.Random(0))
    assert len(val) >= 5 and len(train) + len(val) == 6
