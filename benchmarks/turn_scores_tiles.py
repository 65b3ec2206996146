"""Tile and variant sweep for the Triton turn-scoring kernel on a GPU: which config is fastest per
shape, how far `launch_config`'s choice is from the best, and how close both come to the memory
roofline (the device's measured copy bandwidth).

    python benchmarks/turn_scores_tiles.py                        # the shapes of docs/guides/kernels.md, ~70 s
    python benchmarks/turn_scores_tiles.py --shapes 1,512,8,4096 64,512,8,4096
    python benchmarks/turn_scores_tiles.py --quick                # 3 shapes, 4 sweep configs each
    python benchmarks/turn_scores_tiles.py --center               # centred calls (the fp32 `ieee` dot only)

Writes benchmarks/results/turn_scores_tiles_<gpu>[_<tag>].json and .png; with --write-default
also turn_scores_best_<gpu>[_<tag>].json (per shape the fastest config, and the fastest of each
variant family, in `launch_config`'s keys). Providers per shape:

* `v1`: the first kernel's schedule (16 turns per program, one latent row per turn at a
  time: BLOCK_T=16, BLOCK_J=1, fp32 `ieee` dot);
* `prev_default`: what `launch_config` picked before the variants (the fp32 `ieee` dot, no
  split, num_stages=3, 4 warps) -- on today's kernel body;
* `default`: what `launch_config` picks now for this GPU (what every call gets);
* `sweep`: the curated candidates of `sweep_configs` (NATIVE_DOT, num_stages 2/3/4, split-K
  SPLIT_D, tile sizes, 8 warps), most informative first, cut at --max-configs and at the time
  budget (--budget-s for the whole run, shared out evenly over the shapes; the target shapes
  (1, 512, 8, 4096) and (64, 512, 8, 4096) first; the JSON is rewritten after every shape);
* `compile`: torch.compile of the fp32 reference (the kernel must beat it to earn its place);
  skipped for the shapes reached after the budget is spent.

Every candidate is checked against the fp32 reference before it is timed (max abs error
<= 1e-3 on the finite scores; with --tiers the int8 tiers too); a wrong config is reported
(WRONG, `meta.errors`), left out, and makes the exit status 1 after everything else ran.
Times: `graph_ms`, `do_bench_cudagraph` median (the kernel alone, launch overhead removed by
a CUDA graph; split-K counts both kernels and the workspace allocation), and for the
baselines `ms`, `do_bench` of the Python launcher (what a caller sees). `graph_gbps` counts
vk's bytes once (the kernel reads it once; the split-K workspace, written and read once, ~3.5%
of vk's bytes each way at (1, 512, 8, 4096), is not counted), `roofline_frac` = graph_gbps /
the copy bandwidth measured at the start of the run (a 2 x 512 MiB device-to-device copy,
bytes read + written). Candidates are compiled in parallel first (Triton's AsyncCompileMode, when present).
Needs a CUDA GPU; the kernel's correctness is tested elsewhere too (tests/kernels/).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from rhea_kernels import reference as R  # noqa: E402

SHAPES = [(1, 8, 8, 576), (1, 64, 8, 576), (1, 512, 8, 576), (8, 512, 8, 576), (1, 512, 8, 1536),
          (1, 512, 8, 4096), (1, 4096, 8, 1536), (64, 512, 8, 4096)]
QUICK_SHAPES = [(1, 64, 8, 576), (1, 512, 8, 4096), (8, 512, 8, 576)]
TARGETS = [(1, 512, 8, 4096), (64, 512, 8, 4096)]  # the shapes the defaults are judged on: measured first (results are written per shape)
TAU_LOW, TAU_HIGH = 0.05, 0.5
DEVICE = "cuda"  # a CPU dry run of this script (TRITON_INTERPRET=1) patches it
KNOBS = ("BLOCK_T", "BLOCK_J", "BLOCK_Q", "BLOCK_D", "NATIVE_DOT", "SPLIT_D", "num_stages")


UNSET = {"NATIVE_DOT": False, "SPLIT_D": 1, "num_stages": 3}  # what a config without the key gets


def _key(cfg: dict, warps: int) -> tuple:
    return tuple(cfg.get(k, UNSET.get(k)) for k in KNOBS) + (warps,)


def sweep_configs(B: int, T: int, n: int, d: int, n_sm: int, dtype: torch.dtype, center: bool) -> list:
    """Candidate (config, num_warps) pairs beside the default, most informative first.

    1. the other dot on the default tile (NATIVE_DOT vs the fp32 `ieee` dot);
    2. split-K vs not: the unsplit rule's tile where the default splits, a split where it does not
       but the grid is small;
    3. pipelining depth (num_stages 2 and 4) and 8 warps on the default;
    4. the split neighbourhood (SPLIT_D x2 and /2, 32- and 128-row tiles);
    5. the unsplit neighbourhood (BLOCK_T x2 and /2, BLOCK_D=128), with the default's dot;
    6. the `ieee` family (what fp32 and centred calls get): 8 warps, 2 stages, half the tile.
    """
    import triton

    from rhea_kernels.turn_scores.triton_kernel import MAX_ROWS, MIN_ROWS, launch_config, native_dot_ok, split_chunk

    dflt = launch_config(n, d, n, B, T, n_sm, dtype, center)
    unsplit = launch_config(n, d, n, B, T, n_sm, dtype, center, allow_split=False)
    nat = native_dot_ok(dtype, center)
    bj = dflt["BLOCK_J"]
    out, seen = [], {_key(dflt, 4)}

    def add(cfg, warps=4):
        rows = cfg["BLOCK_T"] * cfg["BLOCK_J"]
        if not (MIN_ROWS <= rows <= MAX_ROWS) or cfg["BLOCK_D"] > max(16, triton.next_power_of_2(d)):
            return
        if cfg["SPLIT_D"] > 1:
            if split_chunk(d, cfg["SPLIT_D"], cfg["BLOCK_D"])[1] < 2:
                return
            cfg = dict(cfg, SPLIT_D=split_chunk(d, cfg["SPLIT_D"], cfg["BLOCK_D"])[1])
        k = _key(cfg, warps)
        if k not in seen:
            seen.add(k)
            out.append((cfg, warps))

    if nat:
        add(dict(dflt, NATIVE_DOT=not dflt["NATIVE_DOT"]))
    def split_for(rows):  # about 4 programs per SM, chunks of >= 256 columns
        bt = max(1, rows // bj)
        return dict(unsplit, BLOCK_T=bt, NATIVE_DOT=nat,
                    SPLIT_D=max(2, min(d // 256, triton.cdiv(4 * n_sm, B * triton.cdiv(T, bt)))))

    split_worth = d >= 512 and B * triton.cdiv(T, unsplit["BLOCK_T"]) < 4 * n_sm
    base = dflt if dflt["SPLIT_D"] > 1 else split_for(64) if split_worth else None
    if dflt["SPLIT_D"] > 1:
        add(dict(unsplit, NATIVE_DOT=nat))
    elif base is not None:
        add(base)
    add(dict(dflt, num_stages=2))
    add(dict(dflt, num_stages=4))
    add(dflt, 8)
    if base is not None:
        add(dict(base, SPLIT_D=base["SPLIT_D"] * 2))
        add(dict(base, SPLIT_D=max(2, base["SPLIT_D"] // 2)))
        add(split_for(32))
        add(split_for(128))
        add(dict(base, num_stages=4))
        add(base, 8)
    for bt in (unsplit["BLOCK_T"] * 2, unsplit["BLOCK_T"] // 2):
        if bt >= 1:
            add(dict(unsplit, BLOCK_T=bt, NATIVE_DOT=nat))
    add(dict(unsplit, BLOCK_D=128, NATIVE_DOT=nat))
    ieee = dict(unsplit, NATIVE_DOT=False)
    add(ieee, 8)
    add(dict(ieee, num_stages=2))
    add(dict(ieee, BLOCK_T=max(1, ieee["BLOCK_T"] // 2)), 8)
    add(dict(ieee, num_stages=2), 8)
    add(dict(ieee, BLOCK_T=max(1, ieee["BLOCK_T"] // 4)))
    add(dict(unsplit, BLOCK_D=128, NATIVE_DOT=nat, num_stages=2), 8)
    return out


def family(row: dict) -> str:
    return ("native" if row.get("NATIVE_DOT") else "ieee") + ("+split" if row.get("SPLIT_D", 1) > 1 else "")


def copy_gbps(do_bench) -> float:
    """Device-to-device copy bandwidth (bytes read + written), the roofline of a one-pass kernel."""
    n = 1 << 28  # 512 MiB of bf16 each way
    src = torch.empty(n, dtype=torch.bfloat16, device=DEVICE).normal_()
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, quantiles=[0.5])
    ms = ms[0] if isinstance(ms, (list, tuple)) else ms
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 2 / (ms * 1e-3) / 1e9


def _precompile(cases, vq, vk, mask, center, with_tiers) -> str:
    """Compile every candidate first, in parallel where this Triton has AsyncCompileMode."""
    from concurrent.futures import ThreadPoolExecutor

    from rhea_kernels.turn_scores.triton_kernel import precompile

    if os.environ.get("TRITON_INTERPRET") == "1":
        return "none (interpreter)"
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return "sequential (no AsyncCompileMode)"

    def mode(ex):
        try:
            return AsyncCompileMode(ex, ignore_errors=True)
        except TypeError:  # an older AsyncCompileMode
            return AsyncCompileMode(ex)

    try:
        with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex, mode(ex):
            for _, cfg, w in cases:
                try:
                    precompile(vq, vk, mask, center, with_tiers, config=cfg, num_warps=w)
                except Exception as e:  # noqa: BLE001 - the timed call reports it
                    print(f"  precompile {cfg} w{w}: {type(e).__name__}: {e}", flush=True)
        return "parallel"
    except Exception as e:  # noqa: BLE001 - fall back to compiling at first call
        print(f"  parallel precompile failed ({type(e).__name__}: {e}); compiling at first call", flush=True)
        return "sequential (fallback)"


def parse_shape(s: str) -> tuple:
    vals = tuple(int(v) for v in s.replace("x", ",").split(","))
    if len(vals) != 4:
        raise argparse.ArgumentTypeError(f"shape {s!r}: want B,T,n,d")
    return vals


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 shapes, 4 sweep configs each")
    ap.add_argument("--shapes", nargs="+", type=parse_shape, help="B,T,n,d ... (default: the docs' 8 shapes)")
    ap.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="bf16",
                    help="vq/vk dtype (latents on a bf16 model)")
    ap.add_argument("--center", action="store_true", help="centred calls (NATIVE_DOT is not allowed there)")
    ap.add_argument("--tiers", action="store_true", help="the fused op: time and check the int8 tiers too")
    ap.add_argument("--max-configs", type=int, default=14, help="sweep candidates per shape (0: all)")
    ap.add_argument("--budget-s", type=float, default=55.0,
                    help="wall-clock budget of the whole run; the sweep stops early to keep it (baselines always run)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--rep-ms", type=int, default=10, help="do_bench_cudagraph's rep (ms of calls per graph)")
    ap.add_argument("--write-default", action="store_true",
                    help="also write turn_scores_best_<gpu>.json: per shape the best config, to update launch_config")
    ap.add_argument("--tag", default="", help="suffix of the output files")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("turn_scores_tiles.py needs a CUDA GPU (Triton kernels); on a CPU run "
                         "benchmarks/kernel_ops.py --device cpu instead")
    import triton
    from triton.runtime.errors import OutOfResources
    from triton.testing import do_bench, do_bench_cudagraph

    from rhea_kernels.score_tiers.reference import score_tiers
    from rhea_kernels.turn_scores.triton_kernel import _sm_count, launch_config, split_chunk, turn_scores_triton

    t_start = time.monotonic()
    deadline = t_start + args.budget_s
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(DEVICE)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    n_sm = _sm_count(dev)
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    max_configs = 4 if args.quick and args.max_configs == 14 else args.max_configs
    copy = copy_gbps(do_bench)
    print(f"device copy bandwidth: {copy:.0f} GB/s (read + write)", flush=True)
    compiled = None if args.no_compile else torch.compile(R.turn_scores)
    rows, summary, errors = [], [], []
    name = torch.cuda.get_device_name()
    gpu = name.split()[1].lower() if name.startswith("NVIDIA ") else name.replace(" ", "_").lower()
    tag = gpu + (f"_{args.tag}" if args.tag else "")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"turn_scores_tiles_{tag}")
    meta = dict(device=name, n_sm=n_sm, torch=torch.__version__, triton=triton.__version__, dtype=args.dtype,
                center=args.center, tiers=args.tiers, copy_gbps=copy,
                command="python benchmarks/turn_scores_tiles.py "
                + " ".join(argv if argv is not None else sys.argv[1:]))
    order = sorted(range(len(shapes)), key=lambda i: tuple(shapes[i]) not in TARGETS)  # stable: targets first
    for i_shape, (B, T, n, d) in enumerate(shapes[i] for i in order):
        t_shape = time.monotonic()
        shape_deadline = t_shape + max(0.0, deadline - t_shape) / (len(shapes) - i_shape)
        g = torch.Generator(device=dev).manual_seed(0)
        vq = torch.randn(B, n, d, device=dev, generator=g).to(dtype)
        vk = torch.randn(B, T, n, d, device=dev, generator=g).to(dtype)
        vk[-1, T // 2, 0] = vq[-1, 0]  # one turn in the top tier
        mask = torch.rand(B, T, device=dev, generator=g) > 0.1
        c = 0.1 * torch.randn(d, device=dev, generator=g) if args.center else None
        want = R.turn_scores(vq.float(), vk.float(), mask, c)
        want_tiers = score_tiers(want, TAU_LOW, TAU_HIGH)
        finite = ~want.isinf()
        gb = vk.numel() * vk.element_size() / 1e9
        default = launch_config(n, d, n, B, T, n_sm, dtype, c is not None)
        prev = dict(launch_config(n, d, n, B, T, n_sm, allow_split=False), NATIVE_DOT=False, num_stages=3)
        v1 = dict(prev, BLOCK_T=16, BLOCK_J=1)
        sweep = sweep_configs(B, T, n, d, n_sm, dtype, c is not None)
        if max_configs > 0:
            sweep = sweep[:max_configs]
        cases = [("v1", v1, 4), ("prev_default", prev, 4), ("default", default, 4)]
        cases += [("sweep", s, w) for s, w in sweep]
        t0 = time.monotonic()
        how = _precompile(cases, vq, vk, mask, c, args.tiers)
        t_compile = time.monotonic() - t0
        shape_rows = []
        for prov, cfg, w in cases:
            if prov == "sweep" and time.monotonic() > shape_deadline:
                print(f"  budget: {sum(r['provider'] == 'sweep' for r in shape_rows)} of {len(sweep)} sweep configs "
                      "timed", flush=True)
                break
            fn = lambda: turn_scores_triton(vq, vk, mask, c, TAU_LOW, TAU_HIGH, args.tiers, config=cfg,  # noqa: E731
                                            num_warps=w)
            def wrong(why):  # recorded, not timed; the run goes on (one GPU run: keep what it measures)
                errors.append(dict(shape=[B, T, n, d], provider=prov, config=cfg, num_warps=w, error=why))
                print(f"  WRONG {prov} {cfg} num_warps={w}: {why}", flush=True)

            try:
                got, tiers = fn()
            except OutOfResources as e:  # a tile too big for this GPU: not a candidate
                print(f"  skip {cfg} num_warps={w}: {e}", flush=True)
                continue
            except Exception as e:  # noqa: BLE001 - e.g. a compile error of one candidate
                wrong(f"{type(e).__name__}: {e}")
                continue
            if not torch.equal(got.isinf(), want.isinf()):
                wrong("-inf pattern differs from the reference")
                continue
            err = (got[finite] - want[finite]).abs().max().item() if finite.any() else 0.0
            if not err <= 1e-3:
                wrong(f"max error {err:.2e} > 1e-3")
                continue
            if args.tiers:
                clear = ((want - TAU_LOW).abs() > 1e-3) & ((want - TAU_HIGH).abs() > 1e-3)
                if not (torch.equal(tiers, score_tiers(got, TAU_LOW, TAU_HIGH))
                        and torch.equal(tiers[clear], want_tiers[clear])):
                    wrong("tiers differ")
                    continue
            graph_ms = _graph_ms(do_bench_cudagraph, fn, args.rep_ms)
            ms = do_bench(fn, warmup=5, rep=25, quantiles=[0.5]) if prov != "sweep" else None
            ms = ms[0] if isinstance(ms, (list, tuple)) else ms
            full = dict(UNSET, **{k: v for k, v in cfg.items() if v is not None})
            grid = B * triton.cdiv(T, full["BLOCK_T"]) * split_chunk(d, full["SPLIT_D"], full["BLOCK_D"])[1]
            shape_rows.append(dict(B=B, T=T, n=n, d=d, dtype=args.dtype, center=args.center, tiers=args.tiers,
                                   provider=prov, num_warps=w, **full, grid=grid, max_err=err, ms=ms,
                                   graph_ms=graph_ms, graph_gbps=gb / (graph_ms * 1e-3),
                                   roofline_frac=gb / (graph_ms * 1e-3) / copy))
        if compiled is not None and time.monotonic() > deadline:
            print("  torch.compile baseline skipped: past the time budget", flush=True)
        elif compiled is not None:
            c_fn = lambda: compiled(vq, vk, mask, c)  # noqa: E731
            c_fn()
            c_ms = do_bench(c_fn, warmup=5, rep=25, quantiles=[0.5])
            c_ms = c_ms[0] if isinstance(c_ms, (list, tuple)) else c_ms
            c_graph = _graph_ms(do_bench_cudagraph, c_fn, args.rep_ms)
            shape_rows.append(dict(B=B, T=T, n=n, d=d, dtype=args.dtype, center=args.center, provider="compile",
                                   ms=c_ms, graph_ms=c_graph, graph_gbps=gb / (c_graph * 1e-3),
                                   roofline_frac=gb / (c_graph * 1e-3) / copy))
        by = {r["provider"]: r for r in shape_rows if r["provider"] != "sweep"}
        rows += shape_rows
        if "default" not in by:
            errors.append(dict(shape=[B, T, n, d], provider="default", error="no timing (did not launch or wrong)"))
            print(f"  WRONG: no default timing at {(B, T, n, d)}; no summary for this shape", flush=True)
            meta["errors"] = errors
            _write(path, meta, summary, rows, args.write_default)
            continue
        kernel_rows = [r for r in shape_rows if r["provider"] in ("prev_default", "default", "sweep")]
        best = min(kernel_rows, key=lambda r: r["graph_ms"])
        fams = {}
        for r in kernel_rows:
            f = family(r)
            if f not in fams or r["graph_ms"] < fams[f]["graph_ms"]:
                fams[f] = r
        cfg_of = lambda r: {k: r[k] for k in KNOBS} | {"num_warps": r["num_warps"]}  # noqa: E731
        s = dict(shape=[B, T, n, d], graph_ms={p: r["graph_ms"] for p, r in by.items()},
                 v1_graph_ms=by["v1"]["graph_ms"] if "v1" in by else None,
                 prev_default_graph_ms=by["prev_default"]["graph_ms"] if "prev_default" in by else None,
                 default_graph_ms=by["default"]["graph_ms"], best_graph_ms=best["graph_ms"],
                 compile_graph_ms=by["compile"]["graph_ms"] if "compile" in by else None,
                 best_provider=best["provider"], best_config=cfg_of(best), default_config=cfg_of(by["default"]),
                 family_best={f: dict(graph_ms=r["graph_ms"], config=cfg_of(r)) for f, r in sorted(fams.items())},
                 default_gbps=by["default"]["graph_gbps"], best_gbps=best["graph_gbps"], copy_gbps=copy,
                 default_roofline_frac=by["default"]["roofline_frac"], best_roofline_frac=best["roofline_frac"],
                 best_over_default=by["default"]["graph_ms"] / best["graph_ms"],
                 default_ms_with_launch=by["default"]["ms"],
                 n_sweep_timed=sum(r["provider"] == "sweep" for r in shape_rows), n_sweep=len(sweep),
                 precompile=how, precompile_s=t_compile, shape_s=time.monotonic() - t_shape)
        if "v1" in by:
            s["default_x_v1"] = by["v1"]["graph_ms"] / by["default"]["graph_ms"]
        if "prev_default" in by:
            s["default_x_prev"] = by["prev_default"]["graph_ms"] / by["default"]["graph_ms"]
        if "compile" in by:
            s["default_x_compile"] = by["compile"]["graph_ms"] / by["default"]["graph_ms"]
            s["compile_ms_with_launch"] = by["compile"]["ms"]
        summary.append(s)
        print(f"({B},{T},{n},{d}) µs: prev {_us(s['prev_default_graph_ms'])} default {_us(s['default_graph_ms'])} "
              f"best {_us(s['best_graph_ms'])} [{family(best)} {s['best_config']}] compile {_us(s['compile_graph_ms'])}"
              f" | default {s['default_gbps']:.0f} GB/s = {s['default_roofline_frac']:.0%} of copy, best "
              f"{s['best_gbps']:.0f} GB/s = {s['best_roofline_frac']:.0%} | {s['n_sweep_timed']}/{len(sweep)} swept, "
              f"compile {t_compile:.1f} s, shape {s['shape_s']:.1f} s", flush=True)

        summary.sort(key=lambda x: shapes.index(tuple(x["shape"])))
        meta["wall_s"] = time.monotonic() - t_start
        meta["errors"] = errors
        _write(path, meta, summary, rows, args.write_default)  # after every shape: a killed run keeps its results

    meta["wall_s"] = time.monotonic() - t_start
    _write(path, meta, summary, rows, args.write_default)
    print(_table(summary))
    try:
        plot(summary, path + ".png", name)
    except ImportError as e:  # the JSON is written; say why the PNG is not
        print(f"no PNG: {e} (pip install matplotlib)")
    print(f"wrote {path}.json in {meta['wall_s']:.0f} s")
    if errors:
        raise SystemExit(f"{len(errors)} config(s) wrong or missing (meta.errors in the JSON): {errors}")


def _write(path: str, meta: dict, summary: list, rows: list, write_default: bool) -> None:
    with open(path + ".json", "w") as f:
        json.dump(dict(meta=meta, summary=summary, table=_table(summary), rows=rows), f, indent=1)
    if write_default:
        best_path = path.replace("turn_scores_tiles_", "turn_scores_best_") + ".json"
        with open(best_path, "w") as f:
            json.dump(dict(meta=meta, shapes={",".join(map(str, s["shape"])): dict(
                best=s["best_config"], best_graph_ms=s["best_graph_ms"], default=s["default_config"],
                default_graph_ms=s["default_graph_ms"], family_best=s["family_best"]) for s in summary}), f, indent=1)


def _graph_ms(do_bench_cudagraph, fn, rep: int) -> float:
    try:
        return do_bench_cudagraph(fn, rep=rep, return_mode="median")
    except TypeError:  # a Triton without return_mode: the mean
        return do_bench_cudagraph(fn, rep=rep)


def _us(ms):
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def _table(summary) -> str:
    out = ["| (B, T, n, d) | prev default µs | default µs | best µs | best family | torch.compile µs "
           "| default GB/s | best GB/s | copy GB/s | default / roofline | best / roofline | default x prev "
           "| default x compile |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        fam = family(s["best_config"])
        out.append(f"| {tuple(s['shape'])} | {_us(s['prev_default_graph_ms'])} | {_us(s['default_graph_ms'])} | "
                   f"{_us(s['best_graph_ms'])} | {fam} | {_us(s['compile_graph_ms'])} | {s['default_gbps']:.0f} | "
                   f"{s['best_gbps']:.0f} | {s['copy_gbps']:.0f} | {s['default_roofline_frac']:.0%} | "
                   f"{s['best_roofline_frac']:.0%} | {s.get('default_x_prev', float('nan')):.2f} | "
                   f"{s.get('default_x_compile', float('nan')):.2f} |")
    return "\n".join(out)


def plot(summary, path: str, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(summary))
    for key, label in (("v1_graph_ms", "v1 (16 turns x 1 latent per step)"),
                       ("prev_default_graph_ms", "previous default (ieee dot, no split)"),
                       ("default_graph_ms", "default"), ("best_graph_ms", "best of sweep"),
                       ("compile_graph_ms", "torch.compile(reference)")):
        ys = [s[key] * 1e3 if s.get(key) is not None else float("nan") for s in summary]
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xticks(list(xs), ["B{}\nT{}\nn{} d{}".format(*s["shape"]) for s in summary], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("µs per call, CUDA graph (kernel alone)")
    ax.set_title(f"turn_scores tiles ({device})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
