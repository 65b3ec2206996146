"""Tile sweep for the Triton turn-scoring kernel on a GPU: which (BLOCK_T, BLOCK_J, BLOCK_D,
num_warps) is fastest per shape, and how far `launch_config`'s choice is from the best.

    python benchmarks/turn_scores_tiles.py                       # the shapes of docs/kernels.md
    python benchmarks/turn_scores_tiles.py --quick               # 3 shapes, fewer configs

Writes benchmarks/results/turn_scores_tiles_<gpu>.json and .png. Providers per shape:

* `v1`: the first kernel's schedule (16 turns per program, one latent row per turn at a
  time: BLOCK_T=16, BLOCK_J=1) -- the kernel before the (turn, latent) rows were flattened;
* `default`: what `launch_config` picks for this GPU (what every call gets);
* `sweep`: every config of the grid below; `best` is the fastest of them;
* `compile`: torch.compile of the fp32 reference (the kernel must beat it to earn its place).

Two times per config: `ms`, `triton.testing.do_bench` of the Python launcher (what a caller
sees, host launch included), and `graph_ms`, `do_bench_cudagraph` (the kernel alone, launch
overhead removed by a CUDA graph). GB/s counts vk's bytes once (the kernel reads it once).
Needs a CUDA GPU; the kernel's correctness is tested elsewhere (tests/kernels/).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rhea_kernels import reference as R  # noqa: E402

SHAPES = [(1, 8, 8, 576), (1, 64, 8, 576), (1, 512, 8, 576), (8, 512, 8, 576), (1, 512, 8, 1536),
          (1, 512, 8, 4096), (1, 4096, 8, 1536), (64, 512, 8, 4096)]
QUICK_SHAPES = [(1, 64, 8, 576), (1, 512, 8, 4096), (8, 512, 8, 576)]


def sweep_configs(nq: int, nk: int, d: int, quick: bool):
    import triton

    block_q = max(16, triton.next_power_of_2(nq))
    block_js = sorted({1, min(32, triton.next_power_of_2(nk))})
    block_ts = [1, 2, 4, 8, 16, 32]
    block_ds = [128] if quick else [64, 128]
    warps = [4] if quick else [4, 8]
    for bt, bj, bd, w in itertools.product(block_ts, block_js, block_ds, warps):
        if 16 <= bt * bj <= 256 and bd <= max(16, triton.next_power_of_2(d)):
            yield dict(BLOCK_T=bt, BLOCK_J=bj, BLOCK_Q=block_q, BLOCK_D=bd), w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="vq/vk dtype (latents on a bf16 model)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("turn_scores_tiles.py needs a CUDA GPU (Triton kernels); on a CPU run "
                         "benchmarks/kernel_ops.py --device cpu instead")
    import triton
    from triton.runtime.errors import OutOfResources
    from triton.testing import do_bench, do_bench_cudagraph

    from rhea_kernels.turn_scores.triton_kernel import _sm_count, launch_config, turn_scores_triton

    dev = torch.device("cuda")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    n_sm = _sm_count(dev)
    compiled = torch.compile(R.turn_scores)
    rows, summary = [], []
    for B, T, n, d in (QUICK_SHAPES if args.quick else SHAPES):
        g = torch.Generator(device=dev).manual_seed(0)
        vq = torch.randn(B, n, d, device=dev, generator=g).to(dtype)
        vk = torch.randn(B, T, n, d, device=dev, generator=g).to(dtype)
        want = R.turn_scores(vq.float(), vk.float())
        gb = vk.numel() * vk.element_size() / 1e9
        default = launch_config(n, d, n, B, T, n_sm)
        v1 = dict(default, BLOCK_T=16, BLOCK_J=1)
        cases = [("v1", v1, 4), ("default", default, 4)] + \
            [("sweep", c, w) for c, w in sweep_configs(n, n, d, args.quick)]
        shape_rows = []
        for prov, cfg, w in cases:
            fn = lambda: turn_scores_triton(vq, vk, config=cfg, num_warps=w)  # noqa: E731
            try:
                got = fn()[0]
            except OutOfResources as e:  # a tile too big for this GPU: not a candidate
                print(f"  skip {cfg} num_warps={w}: {e}", flush=True)
                continue
            err = (got - want).abs().max().item()
            if err > 1e-3:
                raise SystemExit(f"config {cfg} num_warps={w} wrong on {(B, T, n, d)}: max error {err:.2e}")
            ms = do_bench(fn, quantiles=[0.5])
            graph_ms = do_bench_cudagraph(fn)
            row = dict(B=B, T=T, n=n, d=d, dtype=args.dtype, provider=prov, num_warps=w, **cfg,
                       grid=B * triton.cdiv(T, cfg["BLOCK_T"]), ms=ms, graph_ms=graph_ms,
                       graph_gbps=gb / (graph_ms * 1e-3))
            shape_rows.append(row)
        c_ms = do_bench(lambda: compiled(vq, vk), quantiles=[0.5])
        c_graph = do_bench_cudagraph(lambda: compiled(vq, vk))
        shape_rows.append(dict(B=B, T=T, n=n, d=d, dtype=args.dtype, provider="compile", ms=c_ms, graph_ms=c_graph,
                               graph_gbps=gb / (c_graph * 1e-3)))
        by = {r["provider"]: r for r in shape_rows if r["provider"] != "sweep"}
        best = min((r for r in shape_rows if r["provider"] in ("sweep", "default")), key=lambda r: r["graph_ms"])
        s = dict(shape=[B, T, n, d], v1_graph_ms=by["v1"]["graph_ms"], default_graph_ms=by["default"]["graph_ms"],
                 best_graph_ms=best["graph_ms"], compile_graph_ms=c_graph,
                 best_config=dict(BLOCK_T=best["BLOCK_T"], BLOCK_J=best["BLOCK_J"], BLOCK_D=best["BLOCK_D"],
                                  num_warps=best["num_warps"]),
                 default_config=dict(BLOCK_T=default["BLOCK_T"], BLOCK_J=default["BLOCK_J"],
                                     BLOCK_D=default["BLOCK_D"], num_warps=4),
                 default_x_v1=by["v1"]["graph_ms"] / by["default"]["graph_ms"],
                 default_x_compile=c_graph / by["default"]["graph_ms"],
                 best_over_default=by["default"]["graph_ms"] / best["graph_ms"],
                 default_gbps=by["default"]["graph_gbps"], default_ms_with_launch=by["default"]["ms"],
                 compile_ms_with_launch=c_ms)
        summary.append(s)
        rows += shape_rows
        print(f"({B},{T},{n},{d}) graph ms: v1 {s['v1_graph_ms']:.4f} default {s['default_graph_ms']:.4f} "
              f"best {s['best_graph_ms']:.4f} {s['best_config']} compile {c_graph:.4f} | default x v1 "
              f"{s['default_x_v1']:.2f} x compile {s['default_x_compile']:.2f} | {s['default_gbps']:.0f} GB/s",
              flush=True)

    name = torch.cuda.get_device_name()
    tag = name.split()[1].lower() if name.startswith("NVIDIA ") else name.replace(" ", "_").lower()
    meta = dict(device=name, n_sm=n_sm, torch=torch.__version__, triton=triton.__version__, dtype=args.dtype,
                command="python benchmarks/turn_scores_tiles.py" + (" --quick" if args.quick else ""))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"turn_scores_tiles_{tag}")
    with open(path + ".json", "w") as f:
        json.dump(dict(meta=meta, summary=summary, rows=rows), f, indent=1)
    plot(summary, path + ".png", name)
    print("wrote", path + ".json")


def plot(summary, path: str, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(summary))
    for key, label in (("v1_graph_ms", "v1 (16 turns x 1 latent per step)"), ("default_graph_ms", "default"),
                       ("best_graph_ms", "best of sweep"), ("compile_graph_ms", "torch.compile(reference)")):
        ax.plot(xs, [s[key] * 1e3 for s in summary], marker="o", label=label)
    ax.set_xticks(list(xs), ["B{}\nT{}\nn{} d{}".format(*s["shape"]) for s in summary], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("µs per call, CUDA graph (kernel alone)")
    ax.set_title(f"turn_scores tiles ({device})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
