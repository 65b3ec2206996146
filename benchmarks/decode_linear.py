"""A decoding step's linear layers on a CPU: BLAS (``F.linear``) vs `rhea_kernels.decode_linear`, one run.

Two parts, both interleaved rounds (each provider once per round, the order reversed every other
round) with medians:

* ``ops``: every distinct linear layer shape of the model (attention projections, MLP, the LM
  head) at M = 1, 2, 4, 8, 16, 32 rows: ``F.linear`` against the op, ms per call, GB/s of weights
  streamed, and the ratio;
* ``decode``: `RheaForCausalLM.generate` (generate adapter, Rhea's decoding settings) at batch
  B = 1 and 8 (--batches), greedy, forced to --new-tokens tokens after a --prompt-token prompt,
  with ``model.decode_kernel = False`` (BLAS) and True (the kernel): seconds per decoding step
  (time to N+1 tokens minus time to 1, over N), and whether the tokens were equal.

--model: a zoo name or path (`load_rhea_model`: real weights) or ``shape:NAME`` for random weights
of a shape in benchmarks/efficiency_shapes.py. Writes <out>.json and <out>.png.

    python benchmarks/decode_linear.py --model qwen2.5-coder-1.5b --threads 2 --out benchmarks/results/decode_linear_cpu
    python benchmarks/decode_linear.py --model shape:qwen2-tiny --tokenizer DIR --rounds 1 --out /tmp/dl   # smoke
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import rhea_kernels  # noqa: E402,F401
from rhea_kernels.decode_linear import available, decode_linear  # noqa: E402

ROWS = (1, 2, 4, 8, 16, 32)


def _median_ms(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def layer_shapes(model) -> list[tuple[int, int, int]]:
    """(K, N, count) of each distinct fp32 linear weight the model's decoding runs (adapters aside)."""
    counts: dict[tuple[int, int], int] = {}
    for name, layer in model.named_modules():
        if isinstance(layer, torch.nn.Linear) and "lora_" not in name:
            n, k = layer.weight.shape
            counts[(k, n)] = counts.get((k, n), 0) + 1
    return [(k, n, c) for (k, n), c in sorted(counts.items())]


def bench_ops(shapes, rows, rounds: int, repeats: int) -> list[dict]:
    out = []
    g = torch.Generator().manual_seed(0)
    for k, n, count in shapes:
        w = torch.randn(n, k, generator=g) / k ** 0.5
        for m in rows:
            x = torch.randn(m, k, generator=g)
            err = (decode_linear(x, w) - F.linear(x, w)).abs().max().item()
            providers = [("blas", lambda: F.linear(x, w)), ("kernel", lambda: decode_linear(x, w))]
            for _, fn in providers:
                fn()
            samples = {name: [] for name, _ in providers}
            for r in range(rounds):
                for name, fn in (providers if r % 2 == 0 else providers[::-1]):
                    samples[name].append(_median_ms(fn, repeats))
            blas, kern = statistics.median(samples["blas"]), statistics.median(samples["kernel"])
            gb = n * k * 4 / 1e9
            out.append(dict(K=k, N=n, layers=count, rows=m, blas_ms=blas, kernel_ms=kern, speedup=blas / kern,
                            blas_gbps=gb / blas * 1e3, kernel_gbps=gb / kern * 1e3, max_abs_err=err))
            print(f"K={k:6d} N={n:6d} M={m:3d}: BLAS {blas:8.3f} ms  kernel {kern:8.3f} ms  x{blas / kern:5.2f}  "
                  f"({gb / kern * 1e3:5.1f} GB/s)", flush=True)
    return out


def bench_decode(model, batches, prompt: int, new_tokens: int, rounds: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    greedy = dict(do_sample=False, repetition_penalty=1.15, pad_token_id=model.tokenizer.pad_token_id)
    rows = []
    for b in batches:
        ids = torch.randint(100, 20000, (b, prompt), generator=g)
        mask = torch.ones_like(ids)

        def run(n, kernel):
            model.decode_kernel = kernel
            return model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, **greedy)

        def once(kernel):
            t0 = time.perf_counter()
            run(1, kernel)
            t1 = time.perf_counter()
            out = run(new_tokens + 1, kernel)
            t2 = time.perf_counter()
            return (t1 - t0, ((t2 - t1) - (t1 - t0)) / new_tokens), out

        tokens, samples = {}, {False: [], True: []}
        with torch.no_grad():
            for kernel in (False, True):
                run(2, kernel)  # warm-up
            for r in range(rounds):
                for kernel in ((False, True) if r % 2 == 0 else (True, False)):
                    sample, out = once(kernel)
                    samples[kernel].append(sample)
                    tokens[kernel] = out
        step = {k: statistics.median(s for _, s in v) for k, v in samples.items()}
        pre = {k: statistics.median(p for p, _ in v) for k, v in samples.items()}
        rows.append(dict(batch=b, prompt=prompt, new_tokens=new_tokens, blas_step_s=step[False],
                         kernel_step_s=step[True], speedup=step[False] / step[True], blas_prefill_s=pre[False],
                         kernel_prefill_s=pre[True], same_tokens=bool(torch.equal(tokens[False], tokens[True])),
                         rounds=[dict(blas=s[1], kernel=t[1]) for s, t in zip(samples[False], samples[True])]))
        print(f"B={b}: decoding step BLAS {step[False]:.3f} s  kernel {step[True]:.3f} s  x{step[False] / step[True]:.2f}"
              f"  same tokens: {rows[-1]['same_tokens']}", flush=True)
    model.decode_kernel = None
    return rows


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for k, n, _ in result["layer_shapes"]:
        pts = [r for r in result["ops"] if r["K"] == k and r["N"] == n]
        a.plot([r["rows"] for r in pts], [r["speedup"] for r in pts], marker="o", label=f"{k}->{n}")
    a.axhline(1.0, color="grey", lw=0.8)
    a.set_xscale("log", base=2)
    a.set_xlabel("rows (M)")
    a.set_ylabel("F.linear time / kernel time")
    a.set_title("one linear layer")
    a.legend(fontsize=7)
    dec = result["decode"]
    xs = range(len(dec))
    a_w = 0.38
    b.bar([x - a_w / 2 for x in xs], [r["blas_step_s"] for r in dec], a_w, label="BLAS (F.linear)")
    b.bar([x + a_w / 2 for x in xs], [r["kernel_step_s"] for r in dec], a_w, label="decode_linear")
    b.set_xticks(list(xs), [f"batch {r['batch']}\nx{r['speedup']:.2f}" for r in dec])
    b.set_ylabel("s per decoding step")
    b.set_title(f"{result['model']}: RheaForCausalLM.generate")
    b.legend()
    fig.suptitle(f"{result['cpu']}, {result['threads']} threads")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="zoo name or path, or shape:NAME (random weights)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer directory for shape:NAME (default: the Qwen cache)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per comparison")
    ap.add_argument("--repeats", type=int, default=5, help="calls per op timing (median)")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--out", required=True, help="output prefix: writes OUT.json and OUT.png")
    args = ap.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    if min(rows + batches) < 1 or args.new_tokens < 1 or args.rounds < 1:
        raise SystemExit("--rows, --batches, --new-tokens and --rounds take integers >= 1")
    if not available():
        raise SystemExit("rhea_kernels has no C++ decode_linear kernel here: build it with "
                         "`RHEA_BUILD_EXT=1 pip install --no-build-isolation -e .` (make install does)")
    if args.threads:
        torch.set_num_threads(args.threads)
    from rhea.eval.environment import cpu_name

    if args.model.startswith("shape:"):
        from benchmarks.efficiency_shapes import random_model
        from rhea.modeling.zoo import cache_dir

        tok_dir = args.tokenizer or str(cache_dir() / "models" / "qwen2.5-coder-1.5b")
        model = random_model(args.model.split(":", 1)[1], tok_dir, torch.device("cpu"), torch.float32)
    else:
        from rhea.modeling.loading import load_rhea_model

        model = load_rhea_model(args.model, dtype=torch.float32)
    model.eval()
    shapes = layer_shapes(model.base_model)
    result = dict(model=args.model, cpu=cpu_name(), threads=torch.get_num_threads(), torch=torch.__version__,
                  layer_shapes=shapes, ops=bench_ops(shapes, rows, args.rounds, args.repeats))
    result["decode"] = [] if args.skip_decode else bench_decode(model, batches, args.prompt, args.new_tokens,
                                                                args.rounds)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    plot(result, args.out + ".png")
    print(f"wrote {args.out}.json and {args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
