"""`rhea train-acr`: the TGSE loop for ACR's router and refactorer adapters (resumable)."""
from __future__ import annotations

import argparse
import json


def load_tasks(args, config=None):
    """Tasks from ``--tasks-file`` (JSONL of `DriftTask.to_dict`) or ``--tasks N`` generated drift tasks
    (default: as many as the config draws, seed_tasks + (iterations - 1) * tasks_per_iteration)."""
    from rhea.agents.acr.tasks import DriftTask, drift_tasks

    if args.tasks_file:
        from rhea.agents.acr.errors import ACRConfigError

        try:
            with open(args.tasks_file, encoding="utf-8") as f:
                tasks = [DriftTask.from_dict(json.loads(line)) for line in f if line.strip()]
        except (OSError, KeyError, TypeError, AttributeError, ValueError, RecursionError) as e:  # ValueError: not UTF-8 / JSON
            raise ACRConfigError(f"--tasks-file {args.tasks_file}: cannot read tasks ({type(e).__name__}: {e}); "
                                 "one JSON object per line as written by DriftTask.to_dict()") from e
        if not tasks:
            raise ACRConfigError(f"--tasks-file {args.tasks_file} holds no tasks; write one DriftTask.to_dict() object "
                                 "per line")
        return tasks
    n = args.tasks
    if n is None:
        n = config.seed_tasks + (config.iterations - 1) * config.tasks_per_iteration if config is not None else 48
    return drift_tasks(n, seed=args.task_seed)


def _cmd_train_acr(args) -> int:
    import yaml

    from rhea.agents.acr.controller import ACRController
    from rhea.modeling import load_base_model
    from rhea.training.acr import TGSE, TGSEConfig, clear_output, teacher_from_spec

    data = TGSEConfig.cpu_demo().to_dict() if args.cpu_demo else {}
    if args.config:
        data.update({k: v for k, v in TGSEConfig.from_yaml(args.config).to_dict().items()
                     if k in TGSEConfig.keys_in_yaml(args.config)})
    for override in args.set or []:
        key, _, value = override.partition("=")
        data[key] = yaml.safe_load(value)
    config = TGSEConfig.from_dict(data)
    tasks, teacher = load_tasks(args, config), teacher_from_spec(args.teacher)  # bad input fails before the model loads
    from rhea.storage import check_writable_directory

    check_writable_directory(config.output_dir, "output_dir")  # a run never trains for hours, then fails to save
    if args.fresh:
        clear_output(config)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if not (device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        from rhea.agents.acr.errors import ACRConfigError

        raise ACRConfigError(f"--device {device!r} must be cpu, cuda or cuda:N")
    from rhea.modeling.zoo import native_bf16

    bf16 = device == "cuda" and native_bf16(device)  # an older GPU emulates bf16: fp32 there
    base, tokenizer = load_base_model(config.base_model, dtype=torch.bfloat16 if bf16 else None)
    base.to(device)
    controller = ACRController(base, tokenizer, lora_r=config.lora_r, lora_alpha=config.lora_alpha)
    loop = TGSE(config, controller, teacher, tasks)
    result = loop.run(resume=True, max_iterations=args.max_iterations)
    print(json.dumps({"iterations_run": result.iterations_run, "pools": result.pools, "stopped": result.stopped,
                      "seconds": round(result.seconds, 1), "adapters": f"{result.output_dir}/adapters"}))
    return 0


def register(sub) -> None:
    from rhea.training.acr.config import TGSEConfig
    from rhea.training.config import field_lines

    cmd = sub.add_parser(
        "train-acr",
        help="train ACR's router and refactorer LoRA adapters with the TGSE loop (resumes from --set output_dir)",
        description="Teacher-guided self-evolving training of ACR (Phase I cold start, Phase II student router + "
        "teacher refactorer, Phase III local refactorer). Rerunning the same command resumes the run.",
        epilog="config keys (YAML, or --set KEY=VALUE):\n" + field_lines(TGSEConfig),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("--config", help="YAML file of TGSE keys")
    cmd.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one key (repeatable)")
    cmd.add_argument("--teacher", default="rules", help="'rules' (offline RuleTeacher) or 'http://host:port/v1#model'")
    from rhea.modeling.loading import int_at_least

    cmd.add_argument("--tasks", type=int_at_least(1, "generated drift QA tasks", 10_000_000), default=None, help="number of generated drift QA tasks (default: what the "
                     "config draws, seed_tasks + (iterations - 1) * tasks_per_iteration: 3800 for the paper's setting)")
    cmd.add_argument("--cpu-demo", action="store_true", help="start from TGSEConfig.cpu_demo() (12 seed tasks, r8, "
                     "greedy, ...) instead of the paper's defaults; --config and --set apply on top")
    cmd.add_argument("--task-seed", type=int, default=0, help="seed of the generated tasks")
    cmd.add_argument("--tasks-file", help="JSONL of tasks (DriftTask.to_dict per line) instead of generated ones")
    cmd.add_argument("--max-iterations", type=int_at_least(1, "iterations to run now"), help="run at most this many iterations now (resume later)")
    cmd.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available; bf16 on cuda)")
    cmd.add_argument("--fresh", action="store_true", help="delete output_dir first instead of resuming")
    cmd.set_defaults(func=_cmd_train_acr)
