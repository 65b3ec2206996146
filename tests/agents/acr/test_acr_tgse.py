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
    small = dict(output_dir=str(tmp_path / "tgse"), iterations=3, phase2_iterations=1, seed_tasks=2,
                 tasks_per_iteration=2, val_fraction=0.0, epochs=1, lr=1e-2, router_max_new_tokens=4,
                 refactor_max_new_tokens=4)
    return TGSEConfig.cpu_demo(**{**small, **kw})


def snapshot(ctrl, name):
    return [p.detach().clone() for p in ctrl.adapter_parameters(name)]


def test_one_iteration_end_to_end_with_a_scripted_teacher(tmp_path):
    tasks = drift_tasks(2, kinds=("correction", "clean"), seed=1)
    key, new = tasks[0].query.split()[3].rstrip("?"), tasks[0].answer
    teacher = ScriptedGenerator([
        json.dumps({"analysis": "corrected", "drift_detected": True, "selected_operator": "fact_rectify"}),
        f"<summary>The {key} is {new}.</summary>",
        json.dumps({"analysis": "clean", "drift_detected": False, "selected_operator": "none"}),
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
    assert json.loads(loop.pools["regularization"][0].router_target)["selected_operator"] == "none"
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

    assert first.pools["corrective"][0].operator == "fact_rectify"  # the rule teacher rectified in place
    corrective = tmp_path / "tgse" / "pools" / "corrective.jsonl"  # with the older operator spelling
    corrective.write_text(corrective.read_text().replace('"fact_rectify', '"fact_rectification'))

    ctrl = tiny_controller()  # fresh weights: resume must load the saved adapters
    second = TGSE(cfg, ctrl, RuleTeacher(), tasks, solver=FirstFactSolver(), log=lambda *_: None)
    with pytest.warns(DeprecationWarning, match="fact_rectification"):
        assert second.load_state() and second.iteration == 1
    old = second.pools["corrective"][0]
    assert old.operator == "fact_rectify" and json.loads(old.router_target)["selected_operator"] == "fact_rectify"
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
    make = lambda n: Instance(f"t{n}", "corrective", f"t{n}", 0, "fact_rectify", [], "{}", [], "<summary>x</summary>")
    loop.pools["corrective"] = [make(0)]
    train, val = loop._mix("router", random.Random(0))
    assert len(train) == 1 and val == []
    loop.pools["corrective"] = [make(n) for n in range(6)]
    train, val = loop._mix("refactorer", random.Random(0))
    assert len(val) >= 5 and len(train) + len(val) == 6


def test_the_papers_settings_are_the_defaults_and_cpu_demo_is_small():
    paper = TGSEConfig()
    assert (paper.seed_tasks, paper.tasks_per_iteration, paper.iterations) == (400, 200, 18)  # A.1: 400 + 17 x 200
    assert (paper.lora_r, paper.lora_alpha, paper.epochs, paper.batch_size, paper.lr) == (16, 32, 3, 4, 2e-4)  # A.3
    assert (paper.patience, paper.min_delta, paper.delta, paper.temperature) == (3, 0.001, 0.001, 0.7)  # A.3
    assert paper.phase2_iterations == 1 and paper.corrective_weight > 1 and not paper.teacher_router_fallback
    demo = TGSEConfig.cpu_demo(seed_tasks=3)
    assert (demo.seed_tasks, demo.lora_r, demo.batch_size, demo.temperature) == (3, 8, 1, 0.0)
    from rhea.agents.acr import ACRConfigError

    for bad in ({"batch_size": 0}, {"temperature": -0.1}, {"corrective_weight": 0}, {"min_delta": -1}):
        with pytest.raises(ACRConfigError, match=next(iter(bad))):
            TGSEConfig(**bad)


def test_algorithm_1_unhelpful_refactoring_supervises_none(tmp_path):
    """R(H^) = R(H) without compression is neither corrective nor compressive: B_reg (Algorithm 1, line 14)."""
    tasks = drift_tasks(1, kinds=("correction",), seed=3)
    long_context = " ".join(t.user for t in tasks[0].conversation) * 3  # no shorter than the history
    teacher = ScriptedGenerator([
        json.dumps({"analysis": "stuck", "drift_detected": True, "selected_operator": "cognitive_boosting"}),
        f"<summary>{long_context}\n[Thought]: think.</summary>"])
    loop = TGSE(config(tmp_path), tiny_controller(), teacher, tasks, solver=FirstFactSolver(), log=lambda *_: None)
    [inst] = loop.run_task(tasks[0], 0, __import__("random").Random(0))
    assert inst.pool == "regularization" and json.loads(inst.router_target)["selected_operator"] == "none"
    assert inst.reward_raw == inst.reward_refactored == 0.0


def test_corrective_instances_weigh_more_and_batches_hold_batch_size_samples(tmp_path):
    import random

    from rhea.training.acr import Instance

    loop = TGSE(config(tmp_path, batch_size=3, epochs=2, corrective_weight=3.0), tiny_controller(), RuleTeacher(),
                drift_tasks(1), log=lambda *_: None)
    msgs = [{"role": "user", "content": "the city is paris"}]
    make = lambda n, pool: Instance(f"t{n}", pool, f"t{n}", 0, "fact_rectify", msgs, "{}", msgs, "<summary>x</summary>")
    plain, corr = make(0, "compressive"), make(1, "corrective")
    assert loop.weight(corr) == 3.0 and loop.weight(plain) == 1.0
    samples, weights = loop._samples("refactorer", [plain, corr], with_weights=True)
    assert weights == [1.0, 3.0]
    from rhea.training.data import collate

    pad = loop.tokenizer.pad_token_id or 0
    with torch.no_grad():
        base = float(loop._loss(collate([samples[1]], pad)))
        weighted = float(loop._loss(collate([samples[1]], pad), [3.0]))
    assert weighted == pytest.approx(3 * base, rel=1e-5)
    losses = loop.train_module("refactorer", [make(n, "compressive") for n in range(7)], random.Random(0))
    assert len(losses) == 2 * 3  # 2 epochs x ceil(7 / 3) batches


def test_phase_ii_the_students_none_stands_unless_teacher_router_fallback_is_on(tmp_path):
    """Paper: the student router decides in Phase II; the teacher override is an opt-in of ours."""
    import random

    tasks = drift_tasks(1, kinds=("correction",), seed=5)  # FirstFactSolver fails on the raw history
    student_none = json.dumps({"analysis": "fine", "drift_detected": False, "selected_operator": "none"})
    for fallback, teacher_calls in ((False, 0), (True, 2)):
        ctrl = tiny_controller()
        loop = TGSE(config(tmp_path / str(fallback), teacher_router_fallback=fallback, p_teacher_start=1.0), ctrl,
                    RuleTeacher(), tasks, solver=FirstFactSolver(), log=lambda *_: None)
        ctrl.generator = lambda name, seed=None, _s=student_none: ScriptedGenerator([_s])  # the student router says none
        [inst] = loop.run_task(tasks[0], 1, random.Random(0))
        assert loop.teacher.calls == teacher_calls  # with the fallback: teacher routes, then refactors
        assert inst.pool == ("corrective" if fallback else "regularization")
        assert json.loads(inst.router_target)["selected_operator"] == ("fact_rectify" if fallback else "none")


def test_micro_batches_accumulate_the_whole_batchs_gradient_and_the_loss_reads_only_supervised_logits(tmp_path,
                                                                                                      monkeypatch):
    """`micro_batch_size=1` (gradient accumulation) steps with the same gradient as one pass over the batch,
    and `_loss` (logits only from the first label on) equals the loss over full logits."""
    import random

    from rhea.training.acr import Instance
    from rhea.training.data import collate

    msgs = [{"role": "user", "content": "the city is paris and the colour is red"}]
    make = lambda n, pool, t: Instance(f"t{n}", pool, f"t{n}", 0, "fact_rectify", msgs, "{}", msgs, t)
    insts = [make(0, "compressive", "<summary>the city is paris</summary>"), make(1, "corrective", "<summary>x</summary>"),
             make(2, "compressive", "<summary>red, paris, and a longer tail here</summary>")]
    # plain SGD, so one step's update is the (clipped) gradient itself: AdamW's first step is only its sign
    monkeypatch.setattr(torch.optim, "AdamW", lambda params, lr: torch.optim.SGD(params, lr=lr))
    grads = {}
    for micro in (0, 1):
        ctrl = tiny_controller()
        loop = TGSE(config(tmp_path / str(micro), batch_size=3, epochs=1, micro_batch_size=micro), ctrl, RuleTeacher(),
                    drift_tasks(1), log=lambda *_: None)
        samples, weights = loop._samples("refactorer", insts, with_weights=True)
        pad = loop.tokenizer.pad_token_id or 0
        batch = collate(samples, pad)
        with torch.no_grad(), ctrl.adapter("refactorer"):
            logits = ctrl.peft_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            labels = batch["labels"][:, 1:]
            tok = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(),
                                                    labels.reshape(-1), ignore_index=-100, reduction="none")
            mask = (labels != -100).float()
            ref = ((tok.view(labels.shape) * mask).sum(1) / mask.sum(1) * torch.tensor(weights)).mean()
            assert float(loop._loss(batch, weights)) == pytest.approx(float(ref), rel=1e-5)
        before = snapshot(ctrl, "refactorer")
        losses = loop.train_module("refactorer", insts, random.Random(0))
        assert len(losses) == 1 and losses[0] == pytest.approx(float(ref), rel=1e-4)
        grads[micro] = [(a - b) for a, b in zip(snapshot(ctrl, "refactorer"), before)]
    assert any(float(g.abs().max()) > 0 for g in grads[0])
    for whole, acc in zip(grads[0], grads[1]):  # one step from the same start: the same gradient
        assert torch.allclose(whole, acc, rtol=1e-4, atol=1e-7)
    from rhea.agents.acr import ACRConfigError

    with pytest.raises(ACRConfigError, match="micro_batch_size"):
        TGSEConfig(micro_batch_size=-1)
