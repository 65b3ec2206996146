"""Where a reply compressed in pieces is lost: reconstruction accuracy per segment, and what block order does.

A reply of ``--text-tokens`` tokens compressed in pieces of ``--piece-tokens`` (``RheaConfig.compress_chunk_tokens``)
becomes one block of ``n_mem`` latents per piece, the blocks side by side before the reconstruction prompt
(`benchmarks/reconstruction.py`). This measures the teacher-forced token accuracy of each piece's span of the reply
(tokens 0-47, 48-95, ... for pieces of 48) under four layouts of the same latents:

* ``whole``: the reply compressed as one block of ``n_mem`` (what the policy does by default);
* ``pieces``: one block per piece, in reading order (the block of piece 0 farthest from the reply);
* ``pieces reversed``: the same blocks in reverse order (piece 0's block next to the prompt);
* ``control``: another reply's pieces (`control_order`), what the decoder guesses without the reply's latents.

If the decoder found each piece's block by content, reversing the blocks would change nothing; a segment that is
reconstructed better when its block moves next to the prompt says the block's distance from the reply, not its
content, limits it. Means carry 95% normal intervals over the replies (held-apart replies of at least
``--text-tokens`` − 8 tokens, their first ``--text-tokens``). Writes JSON + PNG.

    python benchmarks/reconstruction_segments.py --data ../shared/data --adapters runs/n16_1200 \\
        --out benchmarks/results/reconstruction_segments
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.reconstruction import inputs_ok  # noqa: E402
from rhea.storage import output_file  # noqa: E402

LAYOUTS = ("whole", "pieces", "pieces reversed", "control")


def long_held_apart_texts(tokenizer, data: str, text_tokens: int, n: int | None) -> list[str]:
    """The first `text_tokens` tokens of held-apart replies that have at least `text_tokens` - 8 (sorted by source)."""
    from rhea.training.compressor import chunk_texts, load_reply_texts, split_held_apart

    _, test = split_held_apart(load_reply_texts(data))
    chunks = chunk_texts(tokenizer, test, max_tokens=text_tokens, min_tokens=max(1, text_tokens - 8), first_only=True)
    chunks.sort(key=lambda c: c.source)
    return [c.text for c in chunks][: n or None]


def layouts(model, texts: list[str], piece_tokens: int, batch_size: int) -> dict[str, list[torch.Tensor]]:
    """Each layout's latents, one ``[rows, width]`` per text."""
    from rhea.training.compressor import control_order

    n = model.n_mem
    whole = model.compress_replies(texts, chunk_tokens=None, batch_size=batch_size)
    pieces = model.compress_replies(texts, chunk_tokens=piece_tokens, batch_size=batch_size)
    reverse = [p.reshape(-1, n, p.shape[-1]).flip(0).reshape(p.shape) for p in pieces]
    return {"whole": whole, "pieces": pieces, "pieces reversed": reverse,
            "control": [pieces[j] for j in control_order(len(texts))]}


def segment_accuracy(model, texts: list[str], latents: list[torch.Tensor], piece_tokens: int,
                     batch_size: int) -> list[list[float]]:
    """Per text, the accuracy over each piece's span of its tokens (the end-of-turn tokens left out)."""
    from rhea.training.compressor import token_hits

    out = []
    for i in range(0, len(texts), batch_size):
        batch = texts[i:i + batch_size]
        for text, hits in zip(batch, token_hits(model, batch, latents[i:i + batch_size])):
            n_tok = len(model.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
            hits = hits[:n_tok]
            out.append([sum(hits[a:a + piece_tokens]) / len(hits[a:a + piece_tokens])
                        for a in range(0, len(hits), piece_tokens)])
    return out


def measure(model, texts: list[str], piece_tokens: int, batch_size: int = 8) -> dict:
    from rhea.training.compressor import mean_ci

    result = {}
    with torch.no_grad():
        for name, lat in layouts(model, texts, piece_tokens, batch_size).items():
            per_text = segment_accuracy(model, texts, lat, piece_tokens, batch_size)
            n_seg = max(len(s) for s in per_text)
            result[name] = [{"tokens": [k * piece_tokens, (k + 1) * piece_tokens],
                             **mean_ci([s[k] for s in per_text if len(s) > k])} for k in range(n_seg)]
    return result


def plot(results: dict, path: Path, piece_tokens: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = results[name]["segments"]
        n_seg = max(len(v) for v in rows.values())
        width = 0.8 / len(rows)
        for k, (layout, segs) in enumerate(rows.items()):
            xs = [j + (k - (len(rows) - 1) / 2) * width for j in range(len(segs))]
            ax.bar(xs, [s["mean"] for s in segs], width=width, label=layout,
                   yerr=[[s["mean"] - s["lo"] for s in segs], [s["hi"] - s["mean"] for s in segs]], capsize=2)
        ax.set_xticks(range(n_seg), [f"tokens {j * piece_tokens}-{(j + 1) * piece_tokens - 1}" for j in range(n_seg)],
                      fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_ylabel("teacher-forced token accuracy")
        short = Path(name).name if Path(name).name != "latest" else str(Path(*Path(name).parts[-2:]))
        ax.set_title(f"{short}\n(n = {results[name]['n_texts']}, 95% CI)", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="data directory in the shared/data layout")
    p.add_argument("--adapters", nargs="+", required=True, help="save_pretrained directories to measure")
    p.add_argument("--text-tokens", type=int, default=128, help="measure the first N tokens of each held-apart reply")
    p.add_argument("--piece-tokens", type=int, default=48, help="compress in pieces of at most N tokens")
    p.add_argument("--n", type=int, default=None, help="held-apart replies (default: all long enough)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out", default="benchmarks/results/reconstruction_segments")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.piece_tokens < 1 or args.text_tokens <= args.piece_tokens:
        p.error(f"--piece-tokens {args.piece_tokens} must be >= 1 and below --text-tokens {args.text_tokens} "
                "(at least two pieces per reply)")
    if args.batch_size < 1 or (args.n is not None and args.n < 2):
        p.error("--batch-size must be >= 1 and --n >= 2 (the control reads another reply's latents)")

    if not inputs_ok(args.adapters, args.data):
        return 2
    torch.set_num_threads(args.threads)
    from rhea.modeling import RheaForCausalLM

    results, texts = {}, None
    for d in args.adapters:
        model = RheaForCausalLM.from_pretrained(d).eval()
        if texts is None:
            texts = long_held_apart_texts(model.tokenizer, args.data, args.text_tokens, args.n)
            if len(texts) < 2:
                print(f"error: {args.data} has {len(texts)} held-apart replies of >= {args.text_tokens - 8} tokens; "
                      "lower --text-tokens", file=sys.stderr)
                return 2
        results[d] = {"segments": measure(model, texts, args.piece_tokens, args.batch_size), "n_texts": len(texts),
                      "n_mem": model.n_mem, "latent_injection": model.config.latent_injection,
                      "compress_piece_embeddings": model.config.compress_piece_embeddings,
                      "optimizer_steps": (model.config.extra.get("training") or {}).get("optimizer_steps")}
        print(json.dumps({"adapters": d, **{k: [round(s["mean"], 3) for s in v]
                                            for k, v in results[d]["segments"].items()}}), flush=True)
        del model
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"data": args.data, "split": "rhea.training.compressor.split_held_apart (share 0.2, sha256 of the source)",
            "text_tokens": args.text_tokens, "piece_tokens": args.piece_tokens, "n_replies": len(texts),
            "layouts": list(LAYOUTS)}
    output_file(out, ".json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    plot(results, output_file(out, ".png"), args.piece_tokens)
    print(f"wrote {output_file(out, '.json')} and {output_file(out, '.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
