"""Benchmark rhea_kernels: turn scoring and prefix-anchored attention, one provider per implementation.

Writes benchmarks/results/kernels_<device>.json (one row per provider x shape, plus ratios
computed within this run) and kernels_<device>.png.

    python benchmarks/kernel_ops.py --device cpu              # CPU: N 1k-4k, D 64/128; C++ kernels
    python benchmarks/kernel_ops.py --device cpu --quick      # smaller shapes, D 64 only
    python benchmarks/kernel_ops.py --device cuda             # GPU: Triton kernels, N to 32k
    python benchmarks/kernel_ops.py --device cuda --only attention --attn-ns 4096,8192,16384 --no-flex

One `OpBench` per op (`BENCHES`: turn_scores, turn_scores_and_tiers, anchored_attention)
runs on one shared loop (`run_bench`); `--only OP` measures one of them.

Providers. Turn scoring: the eager reference, torch.compile(reference), and the kernel
(Triton on CUDA, C++ on CPU). Fused scoring and tiers: the reference's two steps eager and
compiled, the fused op's kernel, and the kernel's scores followed by `score_tiers`
(`<kernel>_two_step`: what fusing saves). Attention: SDPA without bias (the ceiling), SDPA with a
materialised bias, FlexAttention (score_mod + block mask, torch.compile'd for the device;
`--no-flex` leaves it out), `split` (the split route: two flash calls per prefix length merged
by log-sum-exp, forward and backward, `rhea_kernels/anchored_attention/split.py`; on CPU
through the CPU flash ops), and the kernel: `triton` (the Triton launchers called directly,
whatever RHEA_ANCHORED_ROUTE says) on CUDA, `cpp` on CPU. The run ends with a markdown
table of the kernels' ratios (also stored under "table" in the JSON).

Timing: `triton.testing.do_bench` (median, quantiles 0.2/0.8) on CUDA; on CPU the median of
repeats after warm-up (wall clock; on a shared machine use `--threads 1 --clock cpu`, which
times this thread's CPU time and so excludes the time other processes held the core). Bandwidth is reported as a fraction of the device's peak: pass
--peak-gbps, else H100 SXM 3350 GB/s / A100 2039 GB/s / H200 4800 GB/s by name on CUDA, and on
CPU a STREAM-like copy measured here.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import rhea_kernels as rk  # noqa: E402
from rhea_kernels import reference as R  # noqa: E402
from rhea_kernels.anchored_attention import split  # noqa: E402
from rhea.eval.environment import cpu_name  # noqa: E402

GPU_PEAK_GBPS = {"H100": 3350.0, "H200": 4800.0, "A100": 2039.0, "L4": 300.0}


# ------------------------------------------------------------------ timing

CLOCK = "wall"  # "cpu": this thread's CPU time (time.thread_time), for --threads 1 on a shared machine


def _clock() -> float:
    return time.thread_time() if CLOCK == "cpu" else time.perf_counter()


def time_ms(fn, device: str, min_time_s: float = 1.0, max_reps: int = 200) -> tuple[float, float, float]:
    """(median, p20, p80) milliseconds of fn().

    CPU: warm-up calls (first-call allocation, torch.compile; one only for calls over 0.25 s),
    then at least 5 repeats (3 for slow calls) and about min_time_s of them; the median
    resists the other tenants of a shared machine. Calls under 1 ms are timed in batches
    (about 2 ms per sample) so the clock's resolution does not dominate. With --clock cpu
    (single-threaded runs only) a sample is the thread's CPU time, which excludes the time
    the scheduler gave to other processes: wall-clock timings on this shared 2-core machine
    were quantised to its 8 ms scheduler slices.
    """
    if device == "cuda":
        from triton.testing import do_bench

        return tuple(do_bench(fn, quantiles=[0.5, 0.2, 0.8]))
    t0 = time.perf_counter()
    fn()  # first call: allocation, torch.compile
    slow = time.perf_counter() - t0 > 0.25
    for _ in range(0 if slow else 2):
        fn()
    t0 = _clock()
    fn()
    one = max(_clock() - t0, 1e-6)
    batch = 1 if slow or one > 1e-3 else max(1, min(1000, int(2e-3 / one)))
    times = []
    start = time.perf_counter()
    min_reps = 3 if slow else 5
    while len(times) < min_reps or (time.perf_counter() - start < min_time_s and len(times) < max_reps):
        t0 = _clock()
        for _ in range(batch):
            fn()
        times.append((_clock() - t0) * 1e3 / batch)
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]  # noqa: E731
    return statistics.median(times), q(0.2), q(0.8)


def cpu_stream_copy_gbps(mb: int = 256) -> float:
    """STREAM-like copy bandwidth: bytes read + written per second (median of repeats)."""
    src = torch.ones(mb * 2**20 // 4)
    dst = torch.empty_like(src)
    ms, _, _ = time_ms(lambda: dst.copy_(src), "cpu", min_time_s=1.0)
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def device_peak_gbps(device: str, override: float | None) -> tuple[float, str]:
    if override:
        return override, "--peak-gbps"
    if device == "cuda":
        name = torch.cuda.get_device_name()
        for key, gbps in GPU_PEAK_GBPS.items():
            if key in name:
                return gbps, f"spec sheet ({name})"
        return 2000.0, f"default guess ({name}); pass --peak-gbps"
    return cpu_stream_copy_gbps(), "measured STREAM-like copy"


def peak_mem_mb(device: str, fn) -> float | None:
    if device != "cuda":
        return None  # no per-call allocator high-water mark on CPU
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


# ------------------------------------------------------------ the harness

@dataclass
class OpBench:
    """How to benchmark one op: its shapes, inputs, providers and the work one call does.

    `providers(device)` maps a provider name to (make_call(inputs, mode) -> fn, modes); the
    kernel's provider is named "triton" or "cpp" (what serves the op on that device).
    `work(shape, inputs)` gives the metric: ("gbps", bytes moved) or ("tflops", forward flops).
    """

    op: str
    fields: tuple  # names of the shape's entries in the JSON rows
    shapes: Callable  # (device, quick) -> list of shape tuples
    make: Callable  # (shape, device, dtype) -> inputs (dict)
    providers: Callable  # device -> {name: (make_call, modes)}
    work: Callable  # (shape, inputs) -> ("gbps" | "tflops", amount)


def kernel_name(device: str, op: str = "turn_scores") -> str | None:
    """The provider name of the op's own kernel on `device`, or None when only the reference runs."""
    backend = rk.OPS[op].backend(device)
    return backend if backend in ("triton", "cpp") else None


def run_bench(bench: OpBench, device: str, quick: bool, peak_gbps: float, rows: list) -> None:
    """Time every provider x mode x shape of `bench`, appending one row each (printed as measured)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    providers = bench.providers(device)
    for shape in bench.shapes(device, quick):
        inputs = bench.make(shape, device, dtype)
        metric, amount = bench.work(shape, inputs)
        for name, (make_call, modes) in providers.items():
            for mode in modes:
                if name == "compile":
                    torch._dynamo.reset()
                run = make_call(inputs, mode)
                try:
                    ms, lo, hi = time_ms(run, device)
                    mem = peak_mem_mb(device, run)
                except (RuntimeError, torch.OutOfMemoryError) as exc:  # e.g. an N x N bias out of memory
                    print(f"{bench.op} {name} {shape} {mode}: {type(exc).__name__}: {str(exc)[:80]}")
                    continue
                row = dict(op=bench.op, provider=name, mode=mode, **dict(zip(bench.fields, shape)), dtype=str(dtype),
                           ms=ms, ms_p20=lo, ms_p80=hi, peak_mem_mb=mem)
                if metric == "gbps":
                    gbps = amount / (ms * 1e-3) / 1e9
                    row.update(gbps=gbps, frac_peak_bw=gbps / peak_gbps)
                    extra = f"{gbps:8.1f} GB/s ({gbps / peak_gbps:5.1%} of peak)"
                else:
                    flops = amount * (3.5 if mode == "fwd_bwd" else 1.0)  # backward = 2.5x forward matmul work
                    row.update(tflops=flops / (ms * 1e-3) / 1e12)
                    extra = f"{row['tflops']:7.3f} TFLOP/s" + (f" {mem:8.1f} MiB" if mem is not None else "")
                rows.append(row)
                print(f"{bench.op} {shape} {name:12s} {mode:7s} {ms:10.3f} ms {extra}", flush=True)


# ------------------------------------------------- turn scoring (and tiers)

def turn_scoring_shapes(device: str, quick: bool):
    # (B, T, n, d): one session growing to a server batch
    shapes = [(1, 8, 8, 576), (1, 64, 8, 576), (1, 512, 8, 576), (8, 512, 8, 576)]
    if device == "cuda":
        shapes += [(1, 512, 8, 4096), (64, 512, 8, 4096)]
    elif not quick:
        shapes += [(4, 512, 8, 4096)]
    return shapes


def _score_inputs(shape, device, dtype):
    B, T, n, d = shape
    return dict(vq=torch.randn(B, n, d, device=device, dtype=dtype), vk=torch.randn(B, T, n, d, device=device,
                                                                                    dtype=dtype))


def _score_bytes(shape, x):
    B, T = shape[:2]
    return "gbps", (x["vq"].numel() + x["vk"].numel()) * x["vq"].element_size() + B * T * 4


def _call(fn):
    return lambda x, mode: (lambda: fn(x["vq"], x["vk"]))


def turn_scores_providers(device: str):
    compiled = torch.compile(R.turn_scores)
    providers = {"eager": (_call(R.turn_scores), ("fwd",)), "compile": (_call(compiled), ("fwd",))}
    if kernel_name(device, "turn_scores"):
        providers[kernel_name(device, "turn_scores")] = (_call(rk.turn_scores), ("fwd",))
    return providers


TAU_LOW, TAU_HIGH = 0.1, 0.5


def tiers_providers(device: str):
    """The fused op against the two-step paths a caller could take instead."""
    def two_step(scores_fn, tiers_fn):
        return lambda vq, vk: tiers_fn(scores_fn(vq, vk), TAU_LOW, TAU_HIGH)

    compiled = torch.compile(two_step(R.turn_scores, R.score_tiers))
    providers = {"eager": (_call(two_step(R.turn_scores, R.score_tiers)), ("fwd",)),
                 "compile": (_call(compiled), ("fwd",))}
    kernel = kernel_name(device, "turn_scores_and_tiers")
    if kernel:  # the op's own kernel, and the kernel's scores followed by score_tiers (what fusing saves)
        providers[kernel] = (_call(lambda vq, vk: rk.turn_scores_and_tiers(vq, vk, TAU_LOW, TAU_HIGH)), ("fwd",))
        providers[f"{kernel}_two_step"] = (_call(two_step(rk.turn_scores, rk.score_tiers)), ("fwd",))
    return providers


# ------------------------------------------------------ anchored attention

ATTN_NS: list[int] | None = None  # --attn-ns: the attention N list (default: attention_shapes')
FLEX = True  # --no-flex: leave FlexAttention out (its per-shape compile dominates a short GPU run)


class _TritonAnchored(torch.autograd.Function):
    """The Triton launchers themselves (not the op, whose CUDA route RHEA_ANCHORED_ROUTE picks)."""

    @staticmethod
    def forward(ctx, q, k, v, pl, beta, causal, scale):
        from rhea_kernels.anchored_attention import triton_kernel as T

        out, lse = T.anchored_attention_fwd_triton(q, k, v, pl, beta, causal, scale)
        ctx.save_for_backward(q, k, v, pl, out, lse)
        ctx.args = (beta, causal, scale)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from rhea_kernels.anchored_attention import triton_kernel as T

        q, k, v, pl, out, lse = ctx.saved_tensors
        dq, dk, dv = T.anchored_attention_bwd_triton(grad_out.contiguous(), q, k, v, out, lse, pl, *ctx.args)
        return dq, dk, dv, None, None, None, None


def attention_providers(device: str, causal: bool = True):
    def sdpa(q, k, v, pl, beta):  # the speed ceiling: no bias, flash/fused backend
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    def sdpa_bias(q, k, v, pl, beta):  # explicit N x N float mask: off the flash backend
        mask = R.anchored_bias(pl, q.shape[2], k.shape[2], beta, causal).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def sdpa_flash(q, k, v, pl, beta):  # no bias, SDPA forced onto the FA2 flash kernel the split route can use
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    def split_route(q, k, v, pl, beta):  # two attention calls per prefix length + fused LSE merge
        return split.attention(q, k, v, pl, beta, causal)  # passes on cuDNN where it checks out, else flash

    def split_flash(q, k, v, pl, beta):
        return split.attention(q, k, v, pl, beta, causal, backend="flash")

    providers = {"sdpa_no_bias": (sdpa, True), "sdpa_bias": (sdpa_bias, True)}
    if device == "cuda":
        providers["sdpa_flash"] = (sdpa_flash, True)
    if FLEX:
        providers["flex"] = (_flex_provider(causal), True)
    kernel = kernel_name(device, "anchored_attention_fwd")
    if kernel == "triton":
        providers[kernel] = (lambda q, k, v, pl, beta: _TritonAnchored.apply(q, k, v, pl, float(beta), causal,
                                                                            q.shape[-1] ** -0.5), True)
    elif kernel:
        providers[kernel] = (lambda q, k, v, pl, beta: rk.anchored_attention(q, k, v, pl, beta, causal), True)
    providers["split"] = (split_route, True)  # last: a CUDA fault here cannot cost the kernel's rows of a shape
    if device == "cuda":
        providers["split_flash"] = (split_flash, True)
    return providers


def attention_backends(device: str) -> dict:
    """What served the attention rows: the kernel SDPA picks without a mask (its `sdpa_no_bias`
    ceiling), and per (device, dtype, D, H, Hkv) whether the split route's passes ran on cuDNN."""
    if device != "cuda":
        return {}
    from torch.nn.attention import SDPBackend

    q = torch.randn(1, 16, 4096, 128, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 4, 4096, 128, device=device, dtype=torch.bfloat16)
    try:
        choice = SDPBackend(torch._fused_sdp_choice(q, k, k, is_causal=True, enable_gqa=True)).name
    except (AttributeError, RuntimeError, TypeError, ValueError) as e:  # private API: record why not
        choice = f"unknown ({type(e).__name__})"
    return dict(sdpa_no_bias_backend=choice,
                split_cudnn={str(key): ok for key, ok in split._CUDNN.items()})


def _flex_provider(causal: bool):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention)  # compiled per shape: CUDA (Triton) or CPU (C++) templates

    def flex_anchored(q, k, v, pl, beta):  # the same bias as a score_mod, the visibility as a block mask
        def score_mod(score, b, h, qi, kj):
            return score + torch.where(kj < pl[b], beta, 0.0)

        def mask_mod(b, h, qi, kj):
            return (kj < pl[b]) | (kj <= qi) if causal else kj >= 0

        bm = create_block_mask(mask_mod, q.shape[0], None, q.shape[2], k.shape[2], device=q.device)
        return flex(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=True)

    return flex_anchored


def attention_shapes(device: str, quick: bool):
    if device == "cuda":
        ns = ATTN_NS or ([1024, 2048, 4096, 8192] if quick else [1024, 2048, 4096, 8192, 16384, 32768])
        return [(max(1, 16384 // n), 16, 4, n, d) for d in (64, 128) for n in ns]  # (B, H, Hkv, N, D)
    ns = ATTN_NS or ([512, 1024] if quick else [1024, 2048, 4096])
    return [(1, 8, 2, n, d) for d in ((64,) if quick else (64, 128)) for n in ns]


def _attn_inputs(shape, device, dtype):
    B, H, Hkv, N, D = shape
    x = dict(q=torch.randn(B, H, N, D, device=device, dtype=dtype), k=torch.randn(B, Hkv, N, D, device=device,
                                                                                   dtype=dtype),
             v=torch.randn(B, Hkv, N, D, device=device, dtype=dtype),
             pl=torch.full((B,), N // 8, device=device, dtype=torch.int64))  # instruction prefix: 1/8 of the context
    x["g"] = torch.randn_like(x["q"])
    return x


def _attn_flops(shape, x):
    B, H, Hkv, N, D = shape
    return "tflops", 4 * B * H * D * (N * (N + 1) / 2 + (N // 8) ** 2 / 2)  # causal + prefix above the diagonal


def attention_bench_providers(device: str):
    def wrap(fn):
        def make_call(x, mode):
            if mode == "fwd":
                return lambda: fn(x["q"], x["k"], x["v"], x["pl"], 1.0)
            leaves = [x[n].clone().requires_grad_() for n in "qkv"]
            return lambda: fn(*leaves, x["pl"], 1.0).backward(x["g"])
        return make_call

    return {name: (wrap(fn), ("fwd", "fwd_bwd") if has_bwd else ("fwd",))
            for name, (fn, has_bwd) in attention_providers(device).items()}


BENCHES = {
    "turn_scores": OpBench("turn_scores", ("B", "T", "n", "d"), turn_scoring_shapes, _score_inputs,
                           turn_scores_providers, _score_bytes),
    "turn_scores_and_tiers": OpBench("turn_scores_and_tiers", ("B", "T", "n", "d"), turn_scoring_shapes,
                                     _score_inputs, tiers_providers, _score_bytes),
    "anchored_attention": OpBench("anchored_attention", ("B", "H", "Hkv", "N", "D"), attention_shapes, _attn_inputs,
                                  attention_bench_providers, _attn_flops),
}


# ------------------------------------------------------------------ output

KERNELS = ("triton", "cpp")
ATTN_KERNELS = KERNELS + ("split", "split_flash", "sdpa_flash")  # attention rows that get the kernel ratios (and the table)


def ratios(rows):
    """Within-run ratios named by the issue's targets.

    turn_scores, turn_scores_and_tiers: speedup of every provider over eager, of the kernel over
    torch.compile, and (fused op) of the fused kernel over the kernel's scores + score_tiers.
    anchored_attention: time of every provider / SDPA without bias (the ceiling; lower is
    better), and for the kernels (triton or cpp, and split): speedup over FlexAttention and
    over SDPA with a materialised bias, and the backward (fwd_bwd - fwd) time / SDPA's
    backward time.
    """
    out = []
    for op in ("turn_scores", "turn_scores_and_tiers"):
        ts = {(r["provider"], r["B"], r["T"], r["n"], r["d"]): r["ms"] for r in rows if r["op"] == op}
        for (prov, *shape), ms in ts.items():
            if prov == "eager" or ("eager", *shape) not in ts:
                continue
            row = dict(op=op, provider=prov, shape=shape, speedup_vs_eager=ts[("eager", *shape)] / ms)
            if prov in KERNELS and ("compile", *shape) in ts:
                row["speedup_vs_compile"] = ts[("compile", *shape)] / ms
            if prov in KERNELS and (f"{prov}_two_step", *shape) in ts:  # fused vs the kernel's scores + score_tiers
                row["speedup_vs_two_step"] = ts[(f"{prov}_two_step", *shape)] / ms
            out.append(row)
    at = {(r["provider"], r["mode"], r["B"], r["N"], r["D"]): r["ms"] for r in rows
          if r["op"] == "anchored_attention"}
    for (prov, mode, B, N, D), ms in at.items():
        ceil = at.get(("sdpa_no_bias", mode, B, N, D))
        if prov == "sdpa_no_bias" or ceil is None:
            continue
        row = dict(op="anchored_attention", provider=prov, mode=mode, N=N, D=D, time_vs_sdpa_no_bias=ms / ceil)
        if prov in ATTN_KERNELS:
            for other in ("flex", "sdpa_bias"):
                if (other, mode, B, N, D) in at:
                    row[f"speedup_vs_{other}"] = at[(other, mode, B, N, D)] / ms
            fwd, sfwd = at.get((prov, "fwd", B, N, D)), at.get(("sdpa_no_bias", "fwd", B, N, D))
            if mode == "fwd_bwd" and fwd and sfwd and ceil > sfwd:
                row["bwd_time_vs_sdpa_bwd"] = (ms - fwd) / (ceil - sfwd)
        out.append(row)
    return out


def table(ratio_rows) -> str:
    """Markdown table of the kernel's ratios (the closing-note table)."""
    lines = []
    ts = [r for r in ratio_rows if r["op"] == "turn_scores" and r["provider"] in KERNELS]
    if ts:
        lines += ["| turn_scores (B, T, n, d) | provider | x eager | x torch.compile |", "|---|---|---|---|"]
        lines += [f"| {tuple(r['shape'])} | {r['provider']} | {r['speedup_vs_eager']:.2f} | "
                  f"{r.get('speedup_vs_compile', float('nan')):.2f} |" for r in ts]
    fused = [r for r in ratio_rows if r["op"] == "turn_scores_and_tiers" and r["provider"] in KERNELS]
    if fused:
        lines += ["", "| turn_scores_and_tiers (B, T, n, d) | provider | x eager two-step | x torch.compile two-step "
                  "| x kernel two-step |", "|---|---|---|---|---|"]
        lines += [f"| {tuple(r['shape'])} | {r['provider']} | {r['speedup_vs_eager']:.2f} | "
                  f"{r.get('speedup_vs_compile', float('nan')):.2f} | "
                  f"{r.get('speedup_vs_two_step', float('nan')):.2f} |" for r in fused]
    at = [r for r in ratio_rows if r["op"] == "anchored_attention" and r["provider"] in ATTN_KERNELS]
    at.sort(key=lambda r: (r["D"], r["N"], r["mode"], r["provider"]))
    if at:
        lines += ["", "| attention N | D | mode | provider | time / SDPA no bias | x FlexAttention | x SDPA+bias "
                  "| bwd time / SDPA bwd |", "|---|---|---|---|---|---|---|---|"]
        fmt = lambda r, k: f"{r[k]:.2f}" if k in r else "-"  # noqa: E731
        lines += [f"| {r['N']} | {r['D']} | {r['mode']} | {r['provider']} | {r['time_vs_sdpa_no_bias']:.2f} | "
                  f"{fmt(r, 'speedup_vs_flex')} | {fmt(r, 'speedup_vs_sdpa_bias')} | "
                  f"{fmt(r, 'bwd_time_vs_sdpa_bwd')} |" for r in at]
    return "\n".join(lines)


def plot(rows, path: str, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a0, a1, a2) = plt.subplots(1, 3, figsize=(19, 4.8))
    for ax, op in ((a0, "turn_scores"), (a1, "turn_scores_and_tiers")):
        ts = [r for r in rows if r["op"] == op]
        labels = sorted({(r["B"], r["T"], r["n"], r["d"]) for r in ts}, key=lambda s: math.prod(s))
        for prov in sorted({r["provider"] for r in ts}):
            ys = [next((r["ms"] for r in ts if r["provider"] == prov and (r["B"], r["T"], r["n"], r["d"]) == s),
                       float("nan")) for s in labels]
            ax.plot(range(len(labels)), ys, marker="o", label=prov)
        ax.set_xticks(range(len(labels)), [f"B{b} T{t}\nn{n} d{d}" for b, t, n, d in labels], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("ms (median)")
        ax.set_title(f"{op} ({device})")
        if ts:
            ax.legend(fontsize=7)
    at = [r for r in rows if r["op"] == "anchored_attention"]
    for prov in sorted({r["provider"] for r in at}):
        for mode, style in (("fwd", "-"), ("fwd_bwd", "--")):
            for D in sorted({r["D"] for r in at}):
                pts = sorted((r["N"], r["tflops"]) for r in at if r["provider"] == prov and r["mode"] == mode
                             and r["D"] == D)
                if pts:
                    a2.plot(*zip(*pts), style, marker="o", label=f"{prov} {mode} D{D}")
    a2.set_xscale("log", base=2)
    a2.set_xlabel("N (causal, prefix = N/8)")
    a2.set_ylabel("TFLOP/s")
    a2.set_title(f"anchored attention ({device})")
    if at:
        a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _int_list(text: str) -> list[int]:
    try:
        ns = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ns or min(ns) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return ns


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller shapes")
    ap.add_argument("--peak-gbps", type=float, default=None, help="device peak memory bandwidth (GB/s)")
    ap.add_argument("--only", choices=[*BENCHES, "attention"], default=None,
                    help="one op (\"attention\" = anchored_attention); its rows replace that op's in the JSON")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="CPU timing clock: wall (default) or this thread's CPU time (needs --threads 1)")
    ap.add_argument("--attn-ns", type=_int_list, default=None, metavar="N,N,...",
                    help="attention sequence lengths, e.g. 4096,8192,16384 (B = max(1, 16384 // N) on CUDA)")
    ap.add_argument("--no-flex", action="store_true", help="leave the FlexAttention provider out")
    args = ap.parse_args(argv)
    global CLOCK, ATTN_NS, FLEX
    ATTN_NS, FLEX = args.attn_ns, not args.no_flex
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu" and (args.device != "cpu" or torch.get_num_threads() != 1):
        raise SystemExit("--clock cpu measures one thread's CPU time: use it with --device cpu --threads 1")
    CLOCK = args.clock
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda requested but torch.cuda.is_available() is False")
    peak, peak_src = device_peak_gbps(args.device, args.peak_gbps)
    print(f"device={args.device} peak={peak:.1f} GB/s ({peak_src}) threads={torch.get_num_threads()} "
          f"HAS_EXT={rk.HAS_EXT}", flush=True)
    rows: list[dict] = []  # filled as measured: a run stopped by SIGTERM/Ctrl-C still writes what it has
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    partial = False
    only = "anchored_attention" if args.only == "attention" else args.only
    ops = list(BENCHES) if only is None else [only]
    try:
        for op in ops:
            run_bench(BENCHES[op], args.device, args.quick, peak, rows)
    except KeyboardInterrupt:
        partial = True
        print(f"stopped: writing the {len(rows)} rows measured so far (meta.partial = true)", flush=True)
    meta = dict(partial=partial, device=args.device, device_name=torch.cuda.get_device_name() if args.device == "cuda"
                else cpu_name(), torch=torch.__version__, threads=torch.get_num_threads(), clock=args.clock,
                peak_gbps=peak, peak_source=peak_src, quick=args.quick, has_ext=rk.HAS_EXT,
                attn_ns=args.attn_ns, flex=FLEX, **attention_backends(args.device),
                time=time.strftime("%Y-%m-%dT%H:%M:%S"))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"kernels_{args.device}")
    meta_by_op = {op: meta for op in ops}
    if only is not None and os.path.exists(path + ".json"):
        # --only re-measures one op: keep the other op's rows (and the settings they were taken with).
        with open(path + ".json") as f:
            old = json.load(f)
        kept = [r for r in old["rows"] if r["op"] not in ops]
        for r in kept:
            meta_by_op.setdefault(r["op"], old.get("meta_by_op", {}).get(r["op"], old["meta"]))
        rows = kept + rows
    with open(path + ".json", "w") as f:
        json.dump(dict(meta=meta, meta_by_op=meta_by_op, rows=rows, ratios=ratios(rows), table=table(ratios(rows))),
                  f, indent=1)
    plot(rows, path + ".png", args.device)
    print(table(ratios(rows)))
    print(f"wrote {path}.json and {path}.png")


if __name__ == "__main__":
    main()
