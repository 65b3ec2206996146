"""Estimated GPU memory per device of the joint Rhea step under DDP, ZeRO-2 and FSDP2 / ZeRO-3.

An arithmetic estimate from the architectures (no GPU was used; numbers are ±30 %): it counts

* base weights (frozen, bf16): full on every GPU under DDP / ZeRO-2, 1/N under FSDP2 / ZeRO-3,
  plus one decoder layer gathered at a time (FSDP2 prefetches the next: 2 layers);
* trainable weights: both LoRA adapters (rank r on all linear layers) and the ``<mem>`` slots,
  as fp32 master + fp32 gradient + AdamW's two fp32 moments (16 B/param), sharded 1/N for the
  gradient and optimizer state under ZeRO-2, everything 1/N under FSDP2 / ZeRO-3;
* activations with gradient checkpointing on (``run.gradient_checkpointing``): every layer's
  input for the generate pass (``max_length`` tokens) and the compress pass (``compress_tokens``
  history tokens), one layer's recomputed internals, and the LM head's logits (bf16 + fp32 for
  the loss + its gradient), which dominate at Qwen's 152k vocabulary;
* a fixed 1.5 GiB for the CUDA context, allocator fragmentation and communication buffers.

    python benchmarks/train_memory_estimate.py --out benchmarks/results/train_memory_estimate
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from rhea.storage import output_file

# Public Hugging Face config.json values (hidden, layers, kv width = kv_heads × head_dim,
# intermediate, vocabulary, tied embeddings).
ARCHS = {
    "smollm2-135m": dict(hidden=576, layers=30, kv=192, inter=1536, vocab=49152, tied=True),
    "qwen2.5-1.5b": dict(hidden=1536, layers=28, kv=256, inter=8960, vocab=151936, tied=True),
    "qwen2.5-7b": dict(hidden=3584, layers=28, kv=512, inter=18944, vocab=152064, tied=False),
}
GIB = 2 ** 30
OVERHEAD_GIB = 1.5


def base_params(a: dict) -> int:
    h, kv, i = a["hidden"], a["kv"], a["inter"]
    layer = 2 * h * h + 2 * h * kv + h + 2 * kv + 3 * h * i + 2 * h  # q,o + k,v (+ qkv bias) + MLP + 2 norms
    return a["vocab"] * h * (1 if a["tied"] else 2) + a["layers"] * layer + h


def layer_params(a: dict) -> int:
    return (base_params(a) - a["vocab"] * a["hidden"] * (1 if a["tied"] else 2)) // a["layers"]


def lora_params(a: dict, r: int, adapters: int = 2) -> int:
    h, kv, i = a["hidden"], a["kv"], a["inter"]
    per_layer = r * ((h + h) * 2 + (h + kv) * 2 + (h + i) * 2 + (i + h))  # q,o; k,v; gate,up; down
    return adapters * a["layers"] * per_layer


def estimate(a: dict, *, strategy: str, n: int, r: int, n_mem: int, max_length: int, compress_tokens: int) -> dict:
    h = a["hidden"]
    base = base_params(a) * 2  # bf16
    trainable = lora_params(a, r) + n_mem * h
    if strategy == "ddp":
        weights, train_state = base, trainable * 16
    elif strategy == "zero2":
        weights, train_state = base, trainable * 4 + trainable * 12 / n
    else:  # fsdp2 / zero3: everything sharded, two layers gathered at a time (current + prefetch)
        weights, train_state = base / n + 2 * layer_params(a) * 2, trainable * 16 / n
    tokens = max_length + compress_tokens
    saved_inputs = a["layers"] * tokens * h * 2
    one_layer = max_length * (10 * h + 3 * a["inter"]) * 2
    logits = max_length * a["vocab"] * (2 + 4 + 4)
    acts = saved_inputs + one_layer + logits
    total = weights + train_state + acts + OVERHEAD_GIB * GIB
    return {"weights_gib": weights / GIB, "trainable_state_gib": train_state / GIB, "activations_gib": acts / GIB,
            "total_gib": total / GIB}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/train_memory_estimate")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--n-mem", type=int, default=8)
    p.add_argument("--max-length", type=int, default=2048)
    p.add_argument("--compress-tokens", type=int, default=2048, help="history tokens compressed per micro-batch")
    args = p.parse_args()
    rows = []
    for name, a in ARCHS.items():
        for strategy in ("ddp", "zero2", "fsdp2"):
            for n in (1, 2, 4, 8):
                if strategy != "ddp" and n == 1:
                    continue
                est = estimate(a, strategy=strategy, n=n, r=args.lora_r, n_mem=args.n_mem,
                               max_length=args.max_length, compress_tokens=args.compress_tokens)
                rows.append({"model": name, "strategy": strategy, "gpus": n, "base_params": base_params(a),
                             "trainable_params": lora_params(a, args.lora_r) + args.n_mem * a["hidden"],
                             **{k: round(v, 2) for k, v in est.items()}})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"kind": "arithmetic estimate, not a measurement (±30 %)", "lora_r": args.lora_r, "lora_targets": "all-linear",
            "adapters": 2, "n_mem": args.n_mem, "max_length": args.max_length, "compress_tokens": args.compress_tokens,
            "batch_size": 1, "precision": "bf16 compute, fp32 trainable master + AdamW", "gradient_checkpointing": True,
            "overhead_gib": OVERHEAD_GIB}
    output_file(out, ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ARCHS), figsize=(5 * len(ARCHS), 4))
    for ax, name in zip(axes, ARCHS):
        for strategy in ("ddp", "zero2", "fsdp2"):
            pts = [(r["gpus"], r["total_gib"]) for r in rows if r["model"] == name and r["strategy"] == strategy]
            ax.plot(*zip(*pts), marker="o", label=strategy)
        ax.set_title(name)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("estimated GiB per GPU")
        ax.set_xticks([1, 2, 4, 8])
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Joint Rhea step, estimated memory per GPU (LoRA r=16 all-linear ×2, bf16, grad ckpt, 2k+2k tokens)")
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=110)
    for r in rows:
        print(f"{r['model']:13s} {r['strategy']:6s} {r['gpus']} GPU  weights {r['weights_gib']:6.2f}  trainable "
              f"{r['trainable_state_gib']:5.2f}  acts {r['activations_gib']:5.2f}  total {r['total_gib']:6.2f} GiB")


if __name__ == "__main__":
    main()
