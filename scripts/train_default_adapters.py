"""Train the default adapters shipped for the embedded SmolLM2-135M-Instruct.

Data recipe: `rhea.training.synthetic` recall dialogues (a profile reply, 0-2 unrelated
turns, then a question answered only by the profile), seed 0, 3000 dialogues, OpenAI
`messages` JSONL. Samples are every turn with history (data.min_turn=1); past replies are
latents 75% and raw text 25% of the time. Adapters: LoRA r=8, alpha=16 on q/k/v/o
projections of both adapters (~0.92 M parameters each; ~3.7 MB in fp16 with the <mem> rows).

Steps (the exact commands used are in benchmarks/results/training_default_adapters.json):

    python scripts/train_default_adapters.py data  --out runs/default/recall.jsonl
    python scripts/train_default_adapters.py train --data runs/default/recall.jsonl --out runs/default [--minutes 35]
    python scripts/train_default_adapters.py plot  --out runs/default
    python scripts/train_default_adapters.py ship  --out runs/default      # newest checkpoint → fp16 adapters

`train` resumes from the newest checkpoint in --out, so a later session continues the run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIP_DIR = ROOT / "rhea" / "data" / "adapters" / "smollm2-135m"


def config_for(data: str, out: str, max_steps: int | None, stage: str = "lm", init_from: str | None = None):
    """Stage "lm": LM + auto-encoding from fresh adapters. Stage "contrastive": continue `init_from`
    (stage 1's final directory) with LM + the contrastive retrieval loss."""
    from rhea.training import TrainConfig

    run = {"output_dir": out, "save_every": 10, "keep_checkpoints": 2, "log_with": "tensorboard",
           "resume_from": "latest", "autoencode_weight": 0.5, "num_threads": 1, "seed": 0}
    if stage == "contrastive":
        run.update(autoencode_weight=0.0, contrastive_weight=1.0, contrastive_temperature=0.05, contrastive_per_step=8,
                   contrastive_center=True)
    return TrainConfig.from_dict({
        "model": {"base_model": "smollm2-135m", "n_mem": 8, "lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0,
                  "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "init_from": init_from},
        "data": {"path": data, "tier_raw": 0.25, "tier_drop": 0.0, "min_turn": 1, "max_length": 512,
                 "seed": 0 if stage == "lm" else 1},
        # A CPU-hours budget, not the paper's GPU one: larger lr, smaller accumulation.
        "optim": {"lr": 1e-3, "grad_accum": 4, "epochs": 1, "warmup_ratio": 0.02, "max_steps": max_steps},
        "run": run,
    })


def cmd_data(args) -> None:
    from rhea.training.synthetic import write_recall_jsonl

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    print(f"wrote {write_recall_jsonl(args.out, args.n, args.seed)} dialogues to {args.out}")


def cmd_train(args) -> None:
    import threading

    import torch

    torch.set_num_threads(1)
    from rhea.training import Trainer

    trainer = Trainer(config_for(args.data, args.out, args.max_steps, args.stage, args.init_from))
    if args.minutes:
        # Wall-clock budget: checkpoint and stop cleanly (a later `train` resumes from here).
        deadline = time.time() + args.minutes * 60
        original = trainer.save_checkpoint

        def save_and_maybe_stop(epoch, batch, step):
            path = original(epoch, batch, step)
            if time.time() > deadline:
                print(f"time budget of {args.minutes} min reached at step {step}; resume with the same command")
                sys.exit(0)
            return path

        trainer.save_checkpoint = save_and_maybe_stop
    result = trainer.train()
    print(json.dumps({"steps": result.global_step, "seconds": round(result.seconds, 1), "final": result.final_dir}))


def cmd_plot(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(x) for x in Path(args.out, "metrics.jsonl").read_text().splitlines() if x.strip()]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in sorted({k for r in rows for k in r if k.startswith("loss/")}):
        ax.plot([r["step"] for r in rows if key in r], [r[key] for r in rows if key in r], label=key)
    ax.set_xlabel("optimizer step (4 micro-batches)")
    ax.set_ylabel("loss")
    ax.set_title(f"default adapters ({args.stage} stage), SmolLM2-135M, CPU 1 thread", fontsize=9)
    ax.legend()
    fig.tight_layout()
    suffix = "" if args.stage == "lm" else f"_{args.stage}"
    target = ROOT / "benchmarks" / "results" / f"training_default_adapters{suffix}_loss.png"
    fig.savefig(target, dpi=120)
    print(f"wrote {target}")


def cmd_ship(args) -> None:
    import torch

    from rhea.training.trainer import export_checkpoint, latest_checkpoint

    ckpt = Path(args.checkpoint) if args.checkpoint else latest_checkpoint(args.out)
    if ckpt is None:
        raise SystemExit(f"no checkpoint in {args.out}")
    data = args.data or str(Path(args.out) / "recall.jsonl")
    config = config_for(data, args.out, None, args.stage, args.init_from)
    print("shipping", export_checkpoint(ckpt, config, SHIP_DIR, dtype=torch.float16), "from", ckpt)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("--out", required=True)
    d.add_argument("--n", type=int, default=3000)
    d.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    t.add_argument("--data", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--minutes", type=float, default=None, help="stop at the first checkpoint after this many minutes")
    t.add_argument("--max-steps", type=int, default=None)
    pl = sub.add_parser("plot")
    pl.add_argument("--out", required=True)
    s = sub.add_parser("ship")
    s.add_argument("--out", required=True)
    s.add_argument("--checkpoint", default=None)
    s.add_argument("--data", default=None)
    pl.add_argument("--stage", choices=["lm", "contrastive"], default="lm", help="names the PNG")
    for q in (t, s):
        q.add_argument("--stage", choices=["lm", "contrastive"], default="lm", help="lm: LM + auto-encoding; contrastive: + retrieval loss")
        q.add_argument("--init-from", default=None, help="save_pretrained directory to continue (stage contrastive: stage lm's final)")
    args = p.parse_args()
    {"data": cmd_data, "train": cmd_train, "plot": cmd_plot, "ship": cmd_ship}[args.cmd](args)


if __name__ == "__main__":
    main()
