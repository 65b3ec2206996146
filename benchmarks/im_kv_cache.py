"""Instruction-block KV cache reuse: prefill time per turn with and without it.

Two `ChatSession`s on the same model answer the same conversation in lockstep (which one goes
first alternates per turn, so machine load hits both alike): one with
``reuse_prefix_cache=True`` (the default), one with it off. The conversation sets a realistic
instructional memory over its first turns (four global instructions), then asks questions.
Per turn it records the prompt length, the tokens taken from the cache, and the prefill time
(prompt -> first new token, as `generate_from_plan` times it); it also checks that both
sessions gave the same reply (greedy decoding: they must). Because the shared CPU is noisy,
each turn's prompt is also timed in isolation: the best of `--repeats` forward passes over
the whole prompt vs copying the cached block and running only the rest (what the prefill
step does either way), after one warm-up turn that is not counted.

Policies: ``rhea`` (IM + HCR tiers; with the untrained default adapters most turns stay raw,
so the prompt grows) and ``rhea-drop-all`` (IM + the question only, Rhea's prompt when HCR
drops the history): the saving is the block's share of the prompt.

    flock /tmp/rhea-heavy.lock nice -n 10 .venv/bin/python benchmarks/im_kv_cache.py
    # -> benchmarks/results/im_kv_cache.json and .png
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from rhea.storage import output_file

INSTRUCTIONS = [
    "From now on, keep every answer to one short paragraph and refer to me as Captain.",
    "Always end each of your replies with a one-line summary that starts with 'TL;DR:'.",
    "Never use the word 'very' in your answers, and use metric units throughout.",
]
QUESTIONS = [
    "What should I pack for a week in Lisbon in April?",
    "How far is Sintra from Lisbon, and how do I get there?",
    "Recommend three traditional Portuguese dishes I should try.",
    "What is the best way to get around Lisbon without a car?",
    "Is it worth visiting Porto on the same trip?",
    "How much should I budget per day for food?",
    "What are the opening hours of most museums there?",
    "Which neighbourhood is best for a first-time visitor to stay in?",
    "Do I need to tip in restaurants in Portugal?",
    "What is the weather usually like at the coast in spring?",
    "Give me a short Portuguese phrase for thanking someone.",
    "Which day trip would you pick if I only have one free day?",
    "How early should I book the train to Porto?",
    "What souvenirs are typical of Lisbon?",
]


def isolated_prefill_ms(model, chat, repeats: int) -> tuple[float, float]:
    """Best-of-`repeats` ms to prefill the last turn's prompt: whole prompt vs cached block + rest."""
    import contextlib
    import copy

    import torch

    from rhea.context import render
    from rhea.session.generation import PrefixKVCache

    rendered = render(chat.last_plan, model.tokenizer)
    ids, n = rendered.input_ids.to(model.device), rendered.prefix_len
    latents = rendered.latent_embeds.to(model.device) if rendered.latent_embeds is not None else None
    adapter = chat._adapter_for(chat.last_plan)
    ctx = model.disable_adapters if adapter == "base" else contextlib.nullcontext
    full, rest = [], []
    with torch.no_grad(), ctx():
        embeds = model.embed_with_latents(ids, latents)
        block = None
        if PrefixKVCache.usable(model, ids, n):
            block = model(input_ids=ids[:, :n], prefix_len=torch.tensor([n]), use_cache=True).past_key_values
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(inputs_embeds=embeds, prefix_len=torch.tensor([n]), use_cache=True, logits_to_keep=1)
            full.append(time.perf_counter() - t0)
            if block is not None:
                t0 = time.perf_counter()
                model(inputs_embeds=embeds[:, n:], prefix_len=torch.tensor([n]), past_key_values=copy.deepcopy(block),
                      use_cache=True, logits_to_keep=1)
                rest.append(time.perf_counter() - t0)
    return 1000 * min(full), 1000 * min(rest or full)


def run_policy(model, policy: str, turns: list[str], max_new_tokens: int, repeats: int) -> dict:
    from rhea.session import ChatSession

    warm = ChatSession(model, policy=policy, max_new_tokens=2)  # lazy imports/allocations, not counted
    warm.send(turns[0])
    warm.send(turns[-1])

    on = ChatSession(model, policy=policy, max_new_tokens=max_new_tokens)
    off = ChatSession(model, policy=policy, max_new_tokens=max_new_tokens, reuse_prefix_cache=False)
    rows = []
    for i, text in enumerate(turns):
        order = (on, off) if i % 2 == 0 else (off, on)
        replies = {id(s): s.send(text) for s in order}
        r_on, r_off = on.records[-1], off.records[-1]
        iso_full, iso_rest = isolated_prefill_ms(model, on, repeats)
        rows.append({
            "turn": i,
            "message": text,
            "instructions": list(on.last_plan.decisions.instructions),
            "prompt_tokens": r_on.prompt_tokens,
            "prefix_reused_tokens": int(r_on.timings["prefix_reused_tokens"]),
            "prefill_ms_reuse": 1000 * r_on.timings["prefill_s"],
            "prefill_ms_no_reuse": 1000 * r_off.timings["prefill_s"],
            "isolated_prefill_ms_full": iso_full,
            "isolated_prefill_ms_block_cached": iso_rest,
            "replies_identical": replies[id(on)] == replies[id(off)],
            "reply": replies[id(on)],
        })
        print(f"{policy:14s} turn {i:2d}: prompt {r_on.prompt_tokens:5d} tok, reused {rows[-1]['prefix_reused_tokens']:4d}, "
              f"prefill {rows[-1]['prefill_ms_reuse']:7.1f} ms vs {rows[-1]['prefill_ms_no_reuse']:7.1f} ms, "
              f"isolated {iso_rest:7.1f} vs {iso_full:7.1f} ms, "
              f"same reply {rows[-1]['replies_identical']}", flush=True)
    hits = [r for r in rows if r["prefix_reused_tokens"] > 0]
    summary = {
        "turns": len(rows),
        "turns_with_reuse": len(hits),
        "cache_hits": on.prefix_cache.hits,
        "cache_misses": on.prefix_cache.misses,
        "replies_identical": sum(r["replies_identical"] for r in rows),
    }
    if hits:
        a = [r["prefill_ms_reuse"] for r in hits]
        b = [r["prefill_ms_no_reuse"] for r in hits]
        ia = [r["isolated_prefill_ms_block_cached"] for r in hits]
        ib = [r["isolated_prefill_ms_full"] for r in hits]
        summary.update({
            "mean_prefix_tokens_reused": statistics.mean(r["prefix_reused_tokens"] for r in hits),
            "mean_prompt_tokens_on_reuse_turns": statistics.mean(r["prompt_tokens"] for r in hits),
            "mean_prefill_ms_reuse": statistics.mean(a),
            "mean_prefill_ms_no_reuse": statistics.mean(b),
            "median_prefill_ms_reuse": statistics.median(a),
            "median_prefill_ms_no_reuse": statistics.median(b),
            "total_prefill_ms_saved": sum(b) - sum(a),
            "mean_saving_fraction": 1 - sum(a) / sum(b),
            "isolated_mean_prefill_ms_block_cached": statistics.mean(ia),
            "isolated_mean_prefill_ms_full": statistics.mean(ib),
            "isolated_total_ms_saved": sum(ib) - sum(ia),
            "isolated_saving_fraction": 1 - sum(ia) / sum(ib),
        })
    return {"summary": summary, "turns": rows}


def plot(result: dict, path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: wrote the JSON only (pip install matplotlib for the PNG)")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(result["policies"])
    fig, axes = plt.subplots(1, len(policies), figsize=(6 * len(policies), 4), squeeze=False)
    for ax, name in zip(axes[0], policies):
        rows = result["policies"][name]["turns"]
        t = [r["turn"] for r in rows]
        ax.plot(t, [r["prefill_ms_no_reuse"] for r in rows], "o-", alpha=0.5, label="session: no reuse")
        ax.plot(t, [r["prefill_ms_reuse"] for r in rows], "s-", alpha=0.5, label="session: IM block KV reused")
        ax.plot(t, [r["isolated_prefill_ms_full"] for r in rows], "o--", label="isolated: whole prompt")
        ax.plot(t, [r["isolated_prefill_ms_block_cached"] for r in rows], "s--", label="isolated: block cached")
        for r in rows:
            if r["prefix_reused_tokens"] == 0:
                ax.axvline(r["turn"], color="grey", alpha=0.15)
        ax.set_title(f"{name}: prefill per turn (grey = no reuse that turn)")
        ax.set_xlabel("turn")
        ax.set_ylabel("prefill (ms)")
        ax.legend()
    fig.suptitle(f"{result['model']}, {result['device']}, max_new_tokens={result['max_new_tokens']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", nargs="+", default=["rhea", "rhea-drop-all"])
    p.add_argument("--turns", type=int, default=16, help="conversation length (instructions first, then questions)")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="isolated timing: best of this many forward passes")
    p.add_argument("--out", default="benchmarks/results/im_kv_cache.json")
    args = p.parse_args()
    pool = INSTRUCTIONS + QUESTIONS
    if not len(INSTRUCTIONS) < args.turns <= len(pool):
        p.error(f"--turns must be in {len(INSTRUCTIONS) + 1}..{len(pool)}")

    import torch

    torch.set_num_threads(args.threads)
    from rhea import load_default_model

    model, _ = load_default_model()
    model.eval()
    started = time.time()
    result = {
        "model": model.config.base_model or "embedded",
        "device": f"{model.device} ({torch.get_num_threads()} threads)",
        "max_new_tokens": args.max_new_tokens,
        "instructions": INSTRUCTIONS,
        "command": "flock /tmp/rhea-heavy.lock nice -n 10 .venv/bin/python benchmarks/im_kv_cache.py "
                   f"--turns {args.turns} --max-new-tokens {args.max_new_tokens} --repeats {args.repeats} --threads {args.threads} "
                   f"--policies {' '.join(args.policies)}",
        "policies": {},
    }
    for policy in args.policies:
        result["policies"][policy] = run_policy(model, policy, pool[: args.turns], args.max_new_tokens, args.repeats)
        print(json.dumps({policy: result["policies"][policy]["summary"]}, indent=1), flush=True)
    result["wall_s"] = time.time() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    png = plot(result, output_file(out, ".png"))
    print(f"wrote {out}" + (f" and {output_file(out, '.png')}" if png else ""))


if __name__ == "__main__":
    main()
