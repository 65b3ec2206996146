"""Per-turn cost of every policy at real model shapes, with random weights (timing only).

The efficiency suite of `rhea bench` (the same harness, runner and summary), run on a model
built from a real architecture's config with randomly initialised weights: what a turn costs
(context tokens, compress / score / prefill / decode seconds) does not depend on the weights,
so a GPU machine that cannot hold the real checkpoint can still time Rhea at the size it is
meant for. What the model says is noise: every reply runs to --max-new-tokens, and nothing
about quality may be read from these runs (they are labelled ``random-weights:<shape>``).

Shapes (public configs; all use the Qwen2.5 tokenizer and vocabulary):

* ``qwen2.5-coder-1.5b``: the tokenizer directory's own config.json (hidden 1536, 28 layers,
  12 heads / 2 KV heads), the model the quality runs use;
* ``qwen2.5-7b``: hidden 3584, 28 layers, 28 heads / 4 KV heads, intermediate 18944.

The tokenizer directory is a converted zoo model's cache directory (``rhea models install
qwen2.5-coder-1.5b`` makes one under ``~/.cache/rhea/models/``); only its tokenizer and
config files are read, so a copy of those small files is enough on a machine without the weights.

    python benchmarks/efficiency_shapes.py --shape qwen2.5-7b --device cuda --turns 40 \\
        --out benchmarks/results/efficiency_shapes/qwen2.5-7b_h100
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SHAPES = {
    "qwen2.5-coder-1.5b": {},  # the tokenizer directory's config.json as it is
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    # SmolLM2-135M's layers (the embedded model) with the Qwen tokenizer's vocabulary: a CPU-sized real shape
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, tie_word_embeddings=True),
    # a smoke test of the script itself (seconds on a CPU)
    "qwen2-tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2),
}
ALL_POLICIES = ("vanilla,recent-k,bm25,summary,reply-soft-compress,rhea,rhea-no-im,rhea-all-raw,rhea-drop-all")


def random_base(shape: str, tokenizer_dir: str, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """(transformers model with random weights of `shape` on `device`, its tokenizer)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = AutoConfig.from_pretrained(tokenizer_dir)
    for key, value in SHAPES[shape].items():
        setattr(config, key, value)
    if config.vocab_size < len(tokenizer):
        raise SystemExit(f"shape {shape}: vocab_size {config.vocab_size} < the tokenizer's {len(tokenizer)}")
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and len(layer_types) != config.num_hidden_layers:
        config.layer_types = [layer_types[0]] * config.num_hidden_layers
    torch.manual_seed(seed)
    with torch.device(device):
        base = AutoModelForCausalLM.from_config(config, dtype=dtype)
    base.eval()
    base.config._name_or_path = f"random-weights:{shape}"
    return base, tokenizer


def random_model(shape: str, tokenizer_dir: str, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """A `RheaForCausalLM` (fresh adapters) on a randomly initialised base of `shape`, on `device`."""
    from rhea.modeling import RheaForCausalLM

    model = RheaForCausalLM.from_base(*random_base(shape, tokenizer_dir, device, dtype, seed))
    return model.to(device).eval()


def main(argv=None) -> int:
    from rhea.eval.runner import run_suite
    from rhea.modeling.zoo import cache_dir
    from rhea.modeling.loading import resolve_device

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-coder-1.5b")
    ap.add_argument("--tokenizer", default=None,
                    help="directory with the Qwen2.5 tokenizer.json and config.json (default: the zoo cache of "
                         "qwen2.5-coder-1.5b)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    ap.add_argument("--policies", default=ALL_POLICIES)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--decode-merged", choices=["auto", "on", "off"], default="auto",
                    help="decode through a merged copy of the generate LoRA: on, off, or auto (the library's "
                         "default: on for CUDA)")
    args = ap.parse_args(argv)

    tokenizer_dir = args.tokenizer or str(cache_dir() / "models" / "qwen2.5-coder-1.5b")
    if not os.path.isfile(os.path.join(tokenizer_dir, "tokenizer.json")):
        raise SystemExit(f"no tokenizer.json in {tokenizer_dir}; run `rhea models install qwen2.5-coder-1.5b` and load "
                         "it once, or pass --tokenizer DIR (a copy of its tokenizer and config files)")
    device = resolve_device(args.device)
    t0 = time.perf_counter()
    model = random_model(args.shape, tokenizer_dir, device, getattr(torch, args.dtype), seed=args.seed)
    model.decode_merged = {"auto": None, "on": True, "off": False}[args.decode_merged]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.shape}: {n_params / 1e9:.2f} B parameters, random weights, {args.dtype} on {device} "
          f"(built in {time.perf_counter() - t0:.1f} s){', decoding merged' if model.decodes_merged else ''}",
          file=sys.stderr)
    run_suite(model, "efficiency", args.policies.split(","), n_turns=args.turns, seed=args.seed, n_episodes=1,
              max_new_tokens=args.max_new_tokens, out=Path(args.out), progress=not args.quiet,
              model_name=f"random-weights:{args.shape}")
    print((Path(args.out) / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
