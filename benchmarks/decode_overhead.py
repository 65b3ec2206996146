"""Where a reply's time goes: plain transformers vs Rhea's generate path, same weights, one run.

One randomly initialised model of a real shape (see `efficiency_shapes.py`), a random prompt
of --prompt tokens, greedy decoding forced to --new-tokens tokens. Every provider runs its linear
layers through ``F.linear`` (``model.decode_kernel = False``; the CPU kernel of the library's
default is `benchmarks/decode_linear.py`'s subject). Providers:

* ``hf``: the bare transformers model's ``generate`` (no PEFT, no hooks), greedy;
* ``hf_rhea_kwargs``: the same with Rhea's decoding settings (repetition penalty 1.15 and
  ``<mem>`` suppressed);
* ``rhea_base``: `RheaForCausalLM.generate` with the adapters disabled (the baselines' path);
* ``rhea_generate``: `RheaForCausalLM.generate` with the generate LoRA (Rhea's path);
* ``rhea_decode_merged``: the same with ``model.decode_merged = True`` (the library's default on
  CUDA; ``rhea_generate`` sets it False) (the generate LoRA folded
  into a cached copy of the weights for the call, swapped in and out by reference: what a
  session can run while still compressing with the other adapter);
* ``rhea_merged``: the same after merging the generate LoRA into the weights in place (what
  ``rhea export`` serves).

``switch_ms`` (``rhea_decode_merged``): the cost of one merged call's swap with the cache warm
(weights in and out, adapters disabled and restored), and ``build_ms``: building the merged
copy once (after each change of the adapter's weights).

Prefill = time to one new token; decode = (time to N+1 tokens - prefill) / N per token.
--repeats interleaved rounds (each provider once per round, the order reversed every other
round; ``rhea_merged`` last, on its own, since it merges in place): medians, and per round the
ratio to ``hf`` (``decode_x_hf_rounds``, its min and max) as the spread. Writes JSON and a PNG.

    python benchmarks/decode_overhead.py --shape qwen2.5-coder-1.5b --device cuda \\
        --out benchmarks/results/decode_overhead_h100
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from benchmarks.efficiency_shapes import SHAPES, random_base, random_model  # noqa: E402


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv=None) -> int:
    from rhea.modeling.zoo import cache_dir
    from rhea.modeling.loading import resolve_device

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-coder-1.5b")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds (each provider once per round)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tok_dir = args.tokenizer or str(cache_dir() / "models" / "qwen2.5-coder-1.5b")
    model = random_model(args.shape, tok_dir, device, dtype)
    model.decode_kernel = False  # F.linear on every path, as `hf` runs; benchmarks/decode_linear.py measures the kernel
    bare, _ = random_base(args.shape, tok_dir, device, dtype, seed=1)  # no PEFT layers, no hooks
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 20000, (1, args.prompt), generator=g).to(device)
    mask = torch.ones_like(ids)
    greedy = dict(do_sample=False, pad_token_id=model.tokenizer.pad_token_id)
    rhea_kw = dict(repetition_penalty=1.15, suppress_tokens=[model.mem_token_id])

    def hf(n, **kw):
        return bare.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, **greedy, **kw)

    def rhea(n):
        return model.generate(ids, max_new_tokens=n, min_new_tokens=n, **greedy, **rhea_kw)

    def rhea_base(n):
        with model.disable_adapters():
            return rhea(n)

    def unmerged(n):
        model.decode_merged = False  # the unmerged LoRA path (the library's default on a CPU)
        return rhea(n)

    def merged_copy(n):
        model.decode_merged = True  # the library's default on CUDA
        return rhea(n)

    # Interleaved rounds: every provider once per round, the order reversed every other round, so a
    # host whose load drifts (as a shared H100 host's did) shifts all providers alike; per-round
    # ratios to hf give the spread.
    providers = [("hf", hf), ("hf_rhea_kwargs", lambda n: hf(n, **rhea_kw)), ("rhea_base", rhea_base),
                 ("rhea_generate", unmerged), ("rhea_decode_merged", merged_copy)]
    samples = {name: [] for name, _ in providers}  # [(prefill s, decode s/token)] per round

    def once(fn):
        with torch.no_grad():
            _sync(device)
            t0 = time.perf_counter()
            fn(1)
            _sync(device)
            t1 = time.perf_counter()
            fn(args.new_tokens + 1)
            _sync(device)
            t2 = time.perf_counter()
        return t1 - t0, ((t2 - t1) - (t1 - t0)) / args.new_tokens

    with torch.no_grad():
        _sync(device)
        t0 = time.perf_counter()
        with model.merged("generate"):  # builds the cached merged copy
            pass
        _sync(device)
        build = time.perf_counter() - t0
        swaps = []
        for _ in range(5):
            _sync(device)
            t0 = time.perf_counter()
            with model.merged("generate"):
                pass
            _sync(device)
            swaps.append(time.perf_counter() - t0)
    print(f"merged copy built in {build * 1e3:.1f} ms, swap in+out {statistics.median(swaps) * 1e3:.2f} ms", flush=True)
    with torch.no_grad():
        for _, fn in providers:  # warm each path once (its first use builds caches, e.g. the merged copy)
            fn(args.new_tokens + 1)
    for r in range(args.repeats):
        for name, fn in (providers if r % 2 == 0 else providers[::-1]):
            samples[name].append(once(fn))
        print(f"round {r + 1}/{args.repeats}: " + "  ".join(f"{n} {samples[n][-1][1] * 1e3:.2f}" for n, _ in providers)
              + " ms/token", flush=True)
    rows = []
    for name, _ in providers:
        pre, dec = zip(*samples[name])
        ratios = [d / h for d, (_, h) in zip(dec, samples["hf"])]
        rows.append(dict(provider=name, prefill_ms=statistics.median(pre) * 1e3,
                         decode_ms_per_token=statistics.median(dec) * 1e3,
                         decode_x_hf_rounds=ratios, decode_x_hf_min=min(ratios), decode_x_hf_max=max(ratios)))
    rows[-1].update(build_ms=build * 1e3, switch_ms=statistics.median(swaps) * 1e3)
    model.decode_merged = False  # the in-place merged layers alone
    with model.adapter("generate"):  # last, not interleaved: merging changes the weights in place
        with torch.no_grad():
            model.peft_model.merge_adapter(["generate"])
        rhea(args.new_tokens + 1)  # warm the in-place merged layers
        pre, dec = zip(*[once(rhea) for _ in range(args.repeats)])
        rows.append(dict(provider="rhea_merged", prefill_ms=statistics.median(pre) * 1e3,
                         decode_ms_per_token=statistics.median(dec) * 1e3))
    for row in rows:
        print(f"{row['provider']:18s} prefill {row['prefill_ms']:8.1f} ms   decode {row['decode_ms_per_token']:7.2f} "
              "ms/token" + (f"   x hf per round {row['decode_x_hf_min']:.3f}-{row['decode_x_hf_max']:.3f}"
                            if "decode_x_hf_min" in row else ""), flush=True)
    ref = next(r for r in rows if r["provider"] == "hf")
    for r in rows:
        r["prefill_x_hf"] = r["prefill_ms"] / ref["prefill_ms"]
        r["decode_x_hf"] = r["decode_ms_per_token"] / ref["decode_ms_per_token"]
    meta = dict(shape=args.shape, device=str(device),
                device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                dtype=str(dtype), prompt=args.prompt, new_tokens=args.new_tokens, repeats=args.repeats,
                torch=torch.__version__, n_params=sum(p.numel() for p in bare.parameters()))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "decode_overhead.json"), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    _plot(rows, meta, os.path.join(args.out, "decode_overhead.png"))
    return 0


def _plot(rows, meta, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    names = [r["provider"] for r in rows]
    a.barh(names, [r["prefill_ms"] for r in rows])
    a.set_xlabel(f"prefill ms ({meta['prompt']} tokens)")
    b.barh(names, [r["decode_ms_per_token"] for r in rows])
    b.set_xlabel("decode ms / token")
    fig.suptitle(f"{meta['shape']} (random weights, {meta['dtype']}) on {meta['device_name']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
