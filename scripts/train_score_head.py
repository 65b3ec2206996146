"""Train a retrieval read-out over a Rhea directory's frozen latents and write a directory that scores with it.

    python scripts/train_score_head.py rhea/data/adapters/smollm2-135m --data ../shared/data --out runs/score_head \\
        --dim 256 --layers 0 10 19 --steps 600

Step by step: the (question, reply) pairs of the public conversations under ``--data``
(`rhea.training.score_head.load_query_reply_pairs`) are split by conversation (a quarter held apart); every question
and reply is compressed once by the directory's compress adapter (cached in ``OUT/latents.pt``, so a rerun with
other head settings compresses nothing); a `ScoreHead` of ``--dim`` outputs over the latent blocks ``--layers`` is
trained contrastively on the training pairs; the held-apart pairs' R@1/R@5 (each question against every held-apart
reply) are measured before (the final states, as scored without a head) and after. ``OUT/`` is the source directory
with the head installed (``RheaConfig.score_head``, ``score_head.safetensors``, the centre cleared), and
``OUT/score_head_report.json`` holds the report and the curve. Fit the HCR thresholds for the new read-out after:
``rhea calibrate OUT``. Nothing but the head is trained: reconstruction and the recorded fidelity are unchanged.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a Rhea directory (save_pretrained), e.g. rhea/data/adapters/smollm2-135m")
    p.add_argument("--data", required=True, help="data directory in the shared/data layout (the question/reply pairs)")
    p.add_argument("--out", required=True, help="new directory (or one this script wrote) for the model with its head")
    p.add_argument("--self-replies", action="append", default=[],
                   help="JSONL of the model's own replies to the data folder's prompts (scripts/generate_replies.py): "
                        "(prompt, reply) pairs added beside the public ones; repeatable")
    p.add_argument("--dim", type=int, default=256, help="output width of the head (the vectors scored)")
    p.add_argument("--layers", type=int, nargs="+", default=[0],
                   help="latent blocks the head reads: 0 = final states; i >= 1 = the slot state at the input of decoder "
                        "layer i (latent_injection='states' only)")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=64, help="pairs per step (in-batch negatives)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--held-apart", type=float, default=0.25, help="share of conversations held apart for the R@k measure")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compress-batch", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256,
                   help="train on the first N tokens of each question and reply (0 = whole texts; documents of "
                        "thousands of tokens cost minutes each to compress on a CPU)")
    return p.parse_args(argv)


def validate(args) -> None:
    from rhea.modeling.config import CONFIG_NAME, RheaConfig

    src, out = Path(args.source), Path(args.out)
    if not (src / CONFIG_NAME).is_file():
        sys.exit(f"error: {src} is not a Rhea directory (no {CONFIG_NAME}); pass a save_pretrained folder")
    cfg = RheaConfig.load(src)
    if cfg.compress_chunk_tokens is not None:
        sys.exit(f"error: {src} compresses replies in pieces (compress_chunk_tokens={cfg.compress_chunk_tokens}); "
                 "the score head trains on one block per text")
    if args.layers != [0] and cfg.latent_injection != "states":
        sys.exit(f"error: --layers {args.layers} needs per-layer slot states, which {src} (latent_injection="
                 f"{cfg.latent_injection!r}) does not store; use --layers 0")
    if len(set(args.layers)) != len(args.layers) or min(args.layers) < 0:
        sys.exit(f"error: --layers {args.layers} must be distinct ints >= 0")
    if out.exists() and any(out.iterdir()) and not (out / "score_head_report.json").is_file() \
            and not (out / "latents.pt").is_file():
        sys.exit(f"error: {out} exists and was not written by this script; choose a new --out")
    if out.resolve() == src.resolve():
        sys.exit("error: --out must differ from the source directory")
    if args.max_tokens < 0:
        sys.exit(f"error: --max-tokens {args.max_tokens} must be >= 0 (0 = whole texts)")
    if args.dim < 1 or args.steps < 0 or args.batch < 2 or not 0 < args.held_apart < 1:
        sys.exit(f"error: --dim {args.dim} (>= 1), --steps {args.steps} (>= 0), --batch {args.batch} (>= 2) and "
                 f"--held-apart {args.held_apart} (in (0, 1)) are out of range")


def _clipper(tokenizer, max_tokens: int):
    """A text cut to its first `max_tokens` tokens (0: whole), decoded back."""
    if not max_tokens:
        return lambda t: t

    def clip(text: str) -> str:
        ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return text if len(ids) <= max_tokens else tokenizer.decode(ids[:max_tokens])
    return clip


def main(argv=None) -> dict:
    args = parse_args(argv)
    validate(args)
    import torch

    from rhea.modeling import RheaForCausalLM
    from rhea.training.score_head import latent_blocks, load_query_reply_pairs, split_pairs, train_score_head

    torch.set_num_threads(args.threads)
    pairs = load_query_reply_pairs(args.data)   # errors before the model loads
    if args.self_replies:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from generate_replies import load_prompts

        from rhea.training.score_head import self_reply_pairs

        prompts = dict(load_prompts(args.data))
        for path in args.self_replies:
            pairs += self_reply_pairs(path, prompts)
    train, test = split_pairs(pairs, args.held_apart)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = RheaForCausalLM.from_pretrained(args.source).eval()
    model.set_score_head(None)   # the source's own head (if any) is not what a new one starts from
    n_blocks = model.latent_width // model.hidden_size
    if max(args.layers) >= n_blocks:
        sys.exit(f"error: --layers {args.layers}: the latents of {args.source} hold {n_blocks} blocks (0 .. {n_blocks - 1})")
    # every block the head reads is cached per (block, text): a rerun with other blocks compresses only what is new
    cache_path = out / "latents.pt"
    cache = torch.load(cache_path) if cache_path.is_file() else {}
    key = f"{Path(args.source).resolve()}|max_tokens={args.max_tokens}"
    store: dict[int, dict[str, torch.Tensor]] = cache.get(key, {})
    clip = _clipper(model.tokenizer, args.max_tokens)
    texts = list(dict.fromkeys([p.query for p in pairs] + [p.reply for p in pairs]))
    todo = [t for t in texts if any(t not in store.get(i, {}) for i in args.layers)]
    t0 = time.perf_counter()
    print(f"{len(pairs)} pairs ({len(train)} train, {len(test)} held apart); compressing {len(todo)} of {len(texts)} "
          f"texts (blocks {args.layers})", flush=True)
    for i in range(0, len(todo), 64):
        part = todo[i:i + 64]
        lat = latent_blocks(model, [clip(t) for t in part], args.layers, batch_size=args.compress_batch)
        h = model.hidden_size
        for j, layer in enumerate(args.layers):
            store.setdefault(layer, {}).update(zip(part, lat[..., j * h:(j + 1) * h].half()))
        cache[key] = store
        torch.save(cache, cache_path)
        print(f"  compressed {min(i + 64, len(todo))}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", flush=True)

    def rows(items, attr):
        return torch.stack([torch.cat([store[i][getattr(p, attr)].float() for i in args.layers], -1) for p in items])

    head, report = train_score_head(model.hidden_size, rows(train, "query"), rows(train, "reply"), dim=args.dim,
                                    layers=args.layers, steps=args.steps, batch=args.batch, lr=args.lr,
                                    weight_decay=args.weight_decay,
                                    temperature=args.temperature, seed=args.seed, q_test=rows(test, "query"),
                                    r_test=rows(test, "reply"))
    model.set_score_head(head)
    model.config.extra = {**model.config.extra, "score_head": {
        "recipe": "scripts/train_score_head.py", "source": str(args.source), "data": str(args.data),
        "self_replies": list(args.self_replies), "pairs": {"train": len(train), "held_apart": len(test)},
        "steps": args.steps, "batch": args.batch,
        "lr": args.lr, "weight_decay": args.weight_decay, "temperature": args.temperature,
        "max_tokens": args.max_tokens, "held_apart_before": report.before,
        "held_apart_after": report.after}}
    model.save_pretrained(out)
    result = {"args": vars(args), **report.to_dict()}
    (out / "score_head_report.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"held-apart pairs ({report.held_apart_pairs}): before {report.before} -> after {report.after}; wrote {out}")
    return result


if __name__ == "__main__":
    main()
