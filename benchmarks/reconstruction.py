"""Reconstruction of held-apart real replies from their latents: do the latents carry the reply?

For each adapter directory: the first ``--chunk-tokens`` tokens of every held-apart reply (a
fixed hash of the reply's source, `rhea.training.compressor.split_held_apart`, disjoint from what
the compressor stage of `rhea train` trains on) are compressed, then reconstructed by the generate pass
after ``<mem>×n + "Repeat the reply above word for word."``:

* teacher-forced token accuracy (argmax = next true token), with the reply's OWN latents and,
  as the control, with ANOTHER reply's latents; the gap own − control is what the latents carry
  (the control's accuracy is what the generate pass guesses from the prompt and true prefix);
* greedy decoding on the first ``--greedy-n`` replies: exact match of the whole chunk and the
  share of tokens matched before the first error, own vs control.

Means carry 95% normal intervals over the replies. With several adapter directories, each after
the first is also compared with the first reply by reply (``"paired"``: the difference of own-latent
accuracy and of the gap, with a bootstrap interval and a sign-flip p-value over the replies).
``--compress-chunk-tokens C`` compresses each text in pieces of at most C tokens (``n_mem`` latents each, the
blocks side by side before the prompt), as a model with ``RheaConfig.compress_chunk_tokens = C`` compresses a reply
(default: what each adapter's config sets). Writes JSON + PNG; ``--write-fidelity`` records the first adapter's numbers in its
``rhea_config.json`` (``"fidelity"``).

    python benchmarks/reconstruction.py --data /work/shared/data \\
        --adapters rhea/data/adapters/smollm2-135m --out benchmarks/results/reconstruction
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from rhea.storage import output_file


def held_apart_texts(tokenizer, data: str, chunk_tokens: int, n: int | None) -> list[str]:
    from rhea.training.compressor import chunk_texts, load_reply_texts, split_held_apart

    _, test = split_held_apart(load_reply_texts(data))
    chunks = chunk_texts(tokenizer, test, max_tokens=chunk_tokens, first_only=True)
    chunks.sort(key=lambda c: c.source)
    return [c.text for c in chunks][: n or None]


def measure(model, texts: list[str], greedy_n: int, batch_size: int = 8, compress_chunk_tokens: int | None = None) -> dict:
    from rhea.training.compressor import greedy_reconstruction, mean_ci, reconstruction_scores

    t0 = time.perf_counter()
    c = compress_chunk_tokens
    s = reconstruction_scores(model, texts, batch_size=batch_size, chunk_tokens=c)
    out = {
        "teacher_forced": {
            "own": mean_ci(s["own"]), "control": mean_ci(s["control"]),
            "gap": mean_ci([a - b for a, b in zip(s["own"], s["control"])]),
            "tokens_per_reply": sum(s["n_tokens"]) / len(s["n_tokens"]),
        },
        "per_reply": {"own": s["own"], "control": s["control"]},
    }
    if greedy_n:
        sub = texts[:greedy_n]
        own = greedy_reconstruction(model, sub, batch_size=batch_size, chunk_tokens=c)
        ctl = greedy_reconstruction(model, sub, batch_size=batch_size, control=True, chunk_tokens=c)
        out["greedy"] = {
            "exact_own": mean_ci([float(r["exact"]) for r in own]),
            "exact_control": mean_ci([float(r["exact"]) for r in ctl]),
            "prefix_own": mean_ci([r["prefix_share"] for r in own]),
            "prefix_control": mean_ci([r["prefix_share"] for r in ctl]),
            "examples": [{"target": t, "own": o["text"], "control": c["text"]} for t, o, c in zip(sub[:4], own, ctl)],
        }
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def paired(results: dict) -> dict:
    """Each adapter after the first minus the first, over the same replies: own accuracy and gap."""
    from rhea.eval.stats import paired_comparison

    def per_reply(result: dict) -> dict:
        r = result["per_reply"]
        return {"own": dict(enumerate(r["own"])),
                "gap": dict(enumerate(a - b for a, b in zip(r["own"], r["control"])))}

    first, *others = results
    base = per_reply(results[first])
    out = {}
    for name in others:
        mine = per_reply(results[name])
        out[f"{name} - {first}"] = {
            metric: {"diff": c.diff, "lo": c.low, "hi": c.high, "p": c.p_value, "n": c.n}
            for metric in ("own", "gap") for c in [paired_comparison(mine[metric], base[metric])]}
    return out


def bar_label(name: str, result: dict) -> str:
    """A bar's label: the directory's last part, with its latent injection and training steps when recorded.

    >>> bar_label("runs/deep/latest", {"latent_injection": "deep", "optimizer_steps": 600})
    'deep/latest\\ndeep, step 600'
    """
    short = Path(name).name or name
    if short == "latest" and len(Path(name).parts) > 1:
        short = str(Path(*Path(name).parts[-2:]))
    extra = [x for x in (result.get("latent_injection"),
                         f"step {result['optimizer_steps']}" if result.get("optimizer_steps") is not None else None) if x]
    return short + ("\n" + ", ".join(extra) if extra else "")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, ax = plt.subplots(figsize=(max(5, 2.2 * len(names)), 3.8))
    for k, (key, label) in enumerate((("own", "own latents"), ("control", "another reply's latents"))):
        vals = [results[n]["teacher_forced"][key] for n in names]
        xs = [i + (k - 0.5) * 0.38 for i in range(len(names))]
        ax.bar(xs, [v["mean"] for v in vals], width=0.38, label=label,
               yerr=[[v["mean"] - v["lo"] for v in vals], [v["hi"] - v["mean"] for v in vals]], capsize=3)
    ax.set_xticks(range(len(names)), [bar_label(n, results[n]) for n in names], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("teacher-forced token accuracy")
    ax.set_title("reconstruction of held-apart replies (95% CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def inputs_ok(adapters: list[str], data: str) -> bool:
    """Every adapter is a save_pretrained directory and `data` holds replies; otherwise an error on stderr
    (checked before any model loads)."""
    from rhea.errors import RheaError
    from rhea.training.compressor import load_reply_texts

    for d in adapters:
        if not (Path(d) / "rhea_config.json").is_file():
            print(f"error: {d} is not a save_pretrained directory (no rhea_config.json)", file=sys.stderr)
            return False
    try:
        load_reply_texts(data)
    except RheaError as e:
        print(f"error: {e}", file=sys.stderr)
        return False
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="data directory in the shared/data layout")
    p.add_argument("--adapters", nargs="+", required=True, help="save_pretrained directories to measure")
    p.add_argument("--chunk-tokens", type=int, default=48, help="measure the first N tokens of each held-apart reply")
    p.add_argument("--compress-chunk-tokens", default="config",
                   help="compress each measured text in pieces of at most N tokens, n_mem latents each (as "
                        "RheaConfig.compress_chunk_tokens makes the policy do); 'none' = the whole text into one block; "
                        "default 'config': what each adapter's rhea_config.json sets"),
    p.add_argument("--n", type=int, default=None, help="held-apart replies (default: all)")
    p.add_argument("--greedy-n", type=int, default=32)
    p.add_argument("--out", default="benchmarks/results/reconstruction")
    p.add_argument("--write-fidelity", action="store_true", help="record the first adapter's numbers in its rhea_config.json")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.compress_chunk_tokens not in ("config", "none"):
        try:
            args.compress_chunk_tokens = int(args.compress_chunk_tokens)
        except ValueError:
            p.error(f"--compress-chunk-tokens {args.compress_chunk_tokens!r} must be 'config', 'none' or an int >= 1")
        if args.compress_chunk_tokens < 1:
            p.error(f"--compress-chunk-tokens {args.compress_chunk_tokens} must be >= 1")
    if args.chunk_tokens < 1:
        p.error(f"--chunk-tokens {args.chunk_tokens} must be >= 1")

    if not inputs_ok(args.adapters, args.data):
        return 2
    torch.set_num_threads(args.threads)
    from rhea.modeling import RheaForCausalLM

    results, texts = {}, None
    for d in args.adapters:
        model = RheaForCausalLM.from_pretrained(d).eval()
        if texts is None:
            texts = held_apart_texts(model.tokenizer, args.data, args.chunk_tokens, args.n)
        chunking = {"config": model.config.compress_chunk_tokens, "none": None}.get(args.compress_chunk_tokens,
                                                                                      args.compress_chunk_tokens)
        with torch.no_grad():
            results[d] = measure(model, texts, args.greedy_n, compress_chunk_tokens=chunking)
        results[d]["compress_chunk_tokens"] = chunking
        results[d]["base_model"] = model.config.base_model
        results[d]["latent_injection"] = model.config.latent_injection
        results[d]["optimizer_steps"] = (model.config.extra.get("training") or {}).get("optimizer_steps")
        tf = results[d]["teacher_forced"]
        print(json.dumps({"adapters": d, "own": round(tf["own"]["mean"], 4), "control": round(tf["control"]["mean"], 4),
                          "gap": round(tf["gap"]["mean"], 4), "gap_ci": [round(tf["gap"]["lo"], 4), round(tf["gap"]["hi"], 4)],
                          "greedy": {k: round(v["mean"], 4) for k, v in results[d].get("greedy", {}).items() if k != "examples"}}),
              flush=True)
        del model
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"data": args.data, "split": "rhea.training.compressor.split_held_apart (share 0.2, sha256 of the source)",
            "chunk_tokens": args.chunk_tokens, "n_replies": len(texts), "greedy_n": min(args.greedy_n, len(texts)),
            "model": sorted({str(r["base_model"]) for r in results.values()})}
    report = {"meta": meta, "results": results}
    if len(results) > 1:
        report["paired"] = paired(results)
        for name, row in report["paired"].items():
            print(json.dumps({"paired": name, **{k: {x: round(y, 4) if isinstance(y, float) else y for x, y in v.items()}
                                                 for k, v in row.items()}}), flush=True)
    output_file(out, ".json").write_text(json.dumps(report, indent=2))
    plot(results, output_file(out, ".png"))
    if args.write_fidelity:
        from rhea.modeling.card import write_model_card
        from rhea.modeling.config import RheaConfig

        first = args.adapters[0]
        cfg = RheaConfig.load(first)
        tf = results[first]["teacher_forced"]
        chunking = results[first]["compress_chunk_tokens"]
        how = "whole" if chunking is None else f"compressed in pieces of {chunking} tokens"
        facts = (cfg.fidelity or {}).get("fact_recall")  # benchmarks/fact_recall.py --write-fidelity's, kept
        cfg.fidelity = {"reconstruction_token_acc": round(tf["own"]["mean"], 4), "control_gap": round(tf["gap"]["mean"], 4),
                        "measured_on": f"benchmarks/reconstruction.py: first {args.chunk_tokens} tokens of held-apart "
                                       f"real replies (shared/data), {how}, teacher-forced", "n": len(texts),
                        **({"fact_recall": facts} if facts else {})}
        cfg.compress_chunk_tokens = chunking  # the policy must compress replies as they were measured
        cfg.save(first)  # recomputes extra.active_mode (the latent tier's state) from the new fidelity
        write_model_card(first)  # the directory's README.md describes the measured model
    return 0


if __name__ == "__main__":
    sys.exit(main())
