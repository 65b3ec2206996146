"""`rhea train-acr` is a rhea command (the module docstrings' examples run through --doctest-modules)."""
from __future__ import annotations


def test_train_acr_is_a_rhea_command():
    from rhea.cli import build_parser

    args = build_parser().parse_args(["train-acr", "--tasks", "4", "--set", "iterations=1", "--max-iterations", "1"])
    assert args.command == "train-acr" and args.tasks == 4 and args.set == ["iterations=1"] and not args.cpu_demo
    assert build_parser().parse_args(["train-acr", "--cpu-demo"]).cpu_demo
    assert build_parser().parse_args(["train-acr", "--device", "cpu"]).device == "cpu"


def test_task_count_defaults_to_what_the_config_draws():
    from rhea.cli import build_parser
    from rhea.training.acr import TGSEConfig
    from rhea.training.acr.cli import load_tasks

    args = build_parser().parse_args(["train-acr"])
    assert len(load_tasks(args, TGSEConfig.cpu_demo(iterations=2, seed_tasks=3, tasks_per_iteration=2))) == 5
    assert TGSEConfig().seed_tasks + 17 * TGSEConfig().tasks_per_iteration == 3800  # the paper's budget (A.1)


def test_bad_tasks_file_and_teacher_fail_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import rhea.modeling
    from rhea.cli import main

    def no_load(*a, **k):
        raise AssertionError("the model loaded before the arguments were checked")

    monkeypatch.setattr(rhea.modeling, "load_base_model", no_load)
    bad = tmp_path / "tasks.jsonl"
    bad.write_text("not json\n")
    out = f"output_dir={tmp_path / 'run'}"
    assert main(["train-acr", "--tasks-file", str(bad), "--set", out]) == 1
    assert "--tasks-file" in capsys.readouterr().err
    assert main(["train-acr", "--teacher", "gpt", "--set", out]) == 1
    assert "teacher='gpt'" in capsys.readouterr().err
