"""Cost of one compressor pre-training step on this CPU (the step of `rhea train` with ``run.stage: compressor``).

One step = compress a batch of real-text chunks (compress adapter, with grad) → reconstruct them
from the latents (generate pass) → backward → AdamW. Varies one factor at a time around the
base setting (48-token chunks, batch 4, bf16 autocast, no gradient checkpointing, frozen
generate adapter): chunk length, fp32 vs bf16, gradient checkpointing, batch size, training the
generate adapter too. Reports process CPU seconds (robust to other jobs on a shared machine) and
wall seconds per step and per chunk token. Writes JSON + PNG.

    python benchmarks/train_step_cost.py --data /work/shared/data --out benchmarks/results/train_step_cost
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from rhea.storage import output_file

BASE = {"chunk_tokens": 48, "batch": 4, "bf16": True, "grad_ckpt": False, "train_generate": False}
VARIANTS = [
    {},
    {"bf16": False},
    {"grad_ckpt": True},
    {"chunk_tokens": 32},
    {"chunk_tokens": 96},
    {"batch": 1},
    {"batch": 8},
    {"train_generate": True},
]


def set_grad_ckpt(model, on: bool) -> None:
    """Activation checkpointing as the trainer runs it: each layer recomputes under the adapter its
    forward ran (rhea.training.recompute), so compress + reconstruct in one graph is correct."""
    from rhea.training.recompute import enable_activation_checkpointing

    if on:
        enable_activation_checkpointing(model)
        return
    base = model.base_model
    (base.activation_checkpointing_disable if hasattr(base, "activation_checkpointing_disable")
     else base.gradient_checkpointing_disable)()


def run_steps(model, opt, chunks, cfg, steps, cpu, wall, losses) -> None:
    """One warm-up step, then `steps` timed steps (CPU and wall seconds appended to the lists)."""
    from rhea.training.compressor import autoencode_batch

    for s in range(steps + 1):
        batch_texts = chunks[s * cfg["batch"]:(s + 1) * cfg["batch"]]
        c0, w0 = time.process_time(), time.perf_counter()
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if cfg["bf16"] else torch.autocast("cpu", enabled=False)
        with ctx:
            lat = model.compress(batch_texts)
            b = autoencode_batch(model, batch_texts)
            loss = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"],
                         labels=b["labels"]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s:  # the first step warms up
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            losses.append(float(loss.detach()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=3, help="measured steps per setting (after one warm-up step)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="benchmarks/results/train_step_cost")
    args = p.parse_args(argv)
    from rhea.errors import RheaError
    from rhea.training.compressor import chunk_texts, load_reply_texts, split_held_apart

    try:
        texts = load_reply_texts(args.data)
    except RheaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    from rhea.modeling import RheaConfig, RheaForCausalLM, load_base_model

    base, tok = load_base_model("smollm2-135m")
    model = RheaForCausalLM.from_base(base, tok, RheaConfig(lora_r=16, lora_alpha=32, lora_dropout=0.0,
                                                            latent_injection="projector"))
    model.train()
    train, _ = split_held_apart(texts)
    rows = []
    for variant in VARIANTS:
        cfg = {**BASE, **variant}
        chunks = [c.text for c in chunk_texts(tok, train, max_tokens=cfg["chunk_tokens"])
                  if len(tok(c.text, add_special_tokens=False)["input_ids"]) >= cfg["chunk_tokens"] - 2]
        for name, prm in model.peft_model.named_parameters():
            if "lora_" in name and ".generate." in name:
                prm.requires_grad_(cfg["train_generate"])
        params = [q for q in model.parameters() if q.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-6)
        set_grad_ckpt(model, cfg["grad_ckpt"])
        cpu, wall, losses = [], [], []
        try:
            run_steps(model, opt, chunks, cfg, args.steps, cpu, wall, losses)
        except Exception as e:  # a variant that cannot run here is recorded, not fatal
            row = {**cfg, "changed": ",".join(f"{k}={v}" for k, v in variant.items()) or "base",
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
            opt.zero_grad(set_to_none=True)
            set_grad_ckpt(model, False)
            continue
        tokens = cfg["batch"] * cfg["chunk_tokens"]
        tokens = cfg["batch"] * cfg["chunk_tokens"]
        row = {**cfg, "changed": ",".join(f"{k}={v}" for k, v in variant.items()) or "base",
               "cpu_s_per_step": sum(cpu) / len(cpu), "wall_s_per_step": sum(wall) / len(wall),
               "cpu_ms_per_chunk_token": 1000 * sum(cpu) / len(cpu) / tokens, "loss": sum(losses) / len(losses),
               "steps": len(cpu)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    set_grad_ckpt(model, False)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"threads": args.threads, "model": "SmolLM2-135M-Instruct", "lora": "r16 all-linear, latent_injection=projector",
            "cpu": "shared 2-core AMD EPYC (avx512_bf16); wall times include other jobs, CPU seconds do not",
            "torch": torch.__version__}
    output_file(out, ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar(range(len(rows)), [r.get("cpu_ms_per_chunk_token", 0.0) for r in rows])
    ax.set_xticks(range(len(rows)), [r["changed"] + (" (fails)" if "error" in r else "") for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("CPU ms per reconstructed token")
    ax.set_title(f"compressor pre-training step cost ({args.threads} thread, SmolLM2-135M)")
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
