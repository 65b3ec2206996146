"""`rhea kernels`: what is built, whether it is correct here, and how fast one shape runs.

    rhea kernels info                                  # extension, Triton, CUDA, dispatch per op and device
    rhea kernels check [--device cpu|cuda]             # every op (turn_scores, the fused
                                                       # turn_scores_and_tiers, anchored_attention
                                                       # forward and backward) vs its reference
    rhea kernels time turn_scores --shape 1,64,8,576   # one shape: kernel vs eager reference
    rhea kernels time turn_scores_and_tiers --shape 1,64,8,576   # fused op vs reference's two steps
    rhea kernels time anchored_attention --shape 1,8,2,1024,64 --prefix 128 --backward
    rhea kernels time decode_linear --shape 8,1536,8960   # M rows x K -> N: the op vs F.linear (BLAS)

`time` uses `torch.utils.benchmark.Timer.blocked_autorange` (median); the full comparison
across providers and shapes is `benchmarks/kernel_ops.py`. This module never imports `rhea`.
"""
from __future__ import annotations

import argparse
import platform
import sys

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class KernelsCliError(ValueError):
    """Bad `rhea kernels` arguments (shape, device)."""


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise KernelsCliError("--device cuda: torch.cuda.is_available() is False on this machine; use --device cpu")
    return torch.device(name)


def _shape(text: str, n: int, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != n or min(dims) < 1 or max(dims) > 2 ** 31 - 1:
        raise KernelsCliError(f"--shape {text[:60]!r}: expected {n} positive integers (each at most 2**31 - 1) "
                              f"separated by commas ({what})")
    return dims


def anchored_route_text() -> str:
    """What serves anchored attention on CUDA under this process's RHEA_ANCHORED_ROUTE (no GPU needed)."""
    from rhea_kernels.anchored_attention import op as attn_op

    try:
        route = attn_op.cuda_route()
    except ValueError as e:
        return f"invalid: {e}"
    eligible = "fp16/bf16, D % 8 == 0, sm80+"
    return {
        "auto": f"auto: the split route (prefix + body attention merged by log-sum-exp) for {eligible} and "
                f"N >= {attn_op.AUTO_SPLIT_MIN_N} where cuDNN attention checks out; the Triton kernel otherwise",
        "split": f"split: the split route for every {eligible} input (cuDNN passes where they check out, else FA2); "
                 "the Triton kernel otherwise",
        "triton": "triton: the Triton kernel for every input",
    }[route]


def info() -> dict:
    from rhea_kernels import _ext
    from rhea_kernels._library import OPS, backend_for

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    out = {
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "cpp_extension": _ext.HAS_EXT,
        "cpp_extension_error": _ext.EXT_ERROR,
        "triton": triton_version,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "cpp_missing_kernels": ", ".join(_ext.missing_kernels()) or None,
        "backend_cpu": backend_for(torch.empty(0)),
    }
    if torch.cuda.is_available():
        out["backend_cuda"] = backend_for(torch.empty(0, device="cuda"))
    out["anchored_attention_cuda_route"] = anchored_route_text()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for name, op in OPS.items():  # one line per op: who serves it on each device, and its sources
        served = " ".join(f"{d}={op.backend(d)}" for d in devices)
        out[f"op {name}"] = f"{served}  ({op.package}/, {op.cpp_source})"
    return out


def _close(name: str, got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> tuple[str, bool, float]:
    got, want = got.float().cpu(), want.float().cpu()
    finite = torch.isfinite(want)
    same_inf = torch.equal(torch.isfinite(got), finite)
    err = (got[finite] - want[finite]).abs().max().item() if finite.any() else 0.0
    ok = same_inf and torch.allclose(got[finite], want[finite], atol=atol, rtol=rtol)
    return name, ok, err


def check(device: torch.device, seed: int = 0) -> list[tuple[str, bool, float]]:
    """Every op on small odd shapes against `rhea_kernels.reference`; (case, ok, max abs error).

    Covers turn_scores, the fused turn_scores_and_tiers (the path a retrieval policy takes:
    its scores, and its tiers against the reference tiers and against score_tiers of its own
    scores), anchored_attention forward and gradients (fp32 and bf16) and decode_linear.
    """
    import rhea_kernels as rk
    from rhea_kernels import reference as R

    g = torch.Generator().manual_seed(seed)
    rand = lambda *s, dtype=torch.float32: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    results = []
    tau_low, tau_high = 0.05, 0.5
    for B, T, nq, nk, d in [(1, 1, 8, 8, 576), (2, 33, 3, 5, 60), (1, 7, 8, 8, 896)]:
        vq, vk = rand(B, nq, d), rand(B, T, nk, d)
        if T > 2:  # a near-copy of a query latent, so the RAW tier occurs
            vk[0, 1, 0] = vq[0, 0] + 0.05 * rand(d)
        mask = torch.rand(B, T, generator=g).to(device) > 0.3
        shape = f"B={B} T={T} nq={nq} nk={nk} d={d}"
        want = R.turn_scores(vq, vk, mask)
        results.append(_close(f"turn_scores {shape}", rk.turn_scores(vq, vk, mask), want, 1e-4, 1e-4))
        scores, tiers = rk.turn_scores_and_tiers(vq, vk, tau_low, tau_high, mask)
        results.append(_close(f"turn_scores_and_tiers {shape} scores", scores, want, 1e-4, 1e-4))
        # tiers: equal to the rule applied to the op's own scores, and to the reference's tiers
        # wherever the reference score is not within rounding of a threshold
        own = int((tiers != R.score_tiers(scores, tau_low, tau_high)).sum())
        clear = ((want - tau_low).abs() > 1e-4) & ((want - tau_high).abs() > 1e-4)
        wrong = own + int((tiers[clear] != R.score_tiers(want, tau_low, tau_high)[clear]).sum())
        results.append((f"turn_scores_and_tiers {shape} tiers", wrong == 0 and tiers.dtype == torch.int8,
                        float(wrong)))
    for B, H, Hkv, N, D, prefix in [(1, 4, 1, 37, 64, 5), (2, 2, 2, 130, 32, 130), (1, 2, 1, 1, 64, 0)]:
        for dtype, tol in ((torch.float32, 2e-4), (torch.bfloat16, 3e-2)):
            q = rand(B, H, N, D, dtype=dtype).requires_grad_()
            k, v = rand(B, Hkv, N, D, dtype=dtype).requires_grad_(), rand(B, Hkv, N, D, dtype=dtype).requires_grad_()
            pl = torch.full((B,), prefix, dtype=torch.long, device=device)
            out = rk.anchored_attention(q, k, v, pl, beta=1.5)
            ref = R.anchored_attention(*(t.detach().float().requires_grad_() for t in (q, k, v)), pl, beta=1.5)
            tag = f"anchored_attention B={B} H={H}:{Hkv} N={N} D={D} prefix={prefix} {str(dtype)[6:]}"
            results.append(_close(tag + " fwd", out, ref, tol, tol))
            grad = rand(*out.shape)
            got = torch.autograd.grad(out, (q, k, v), grad.to(dtype))
            qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
            want = torch.autograd.grad(R.anchored_attention(qf, kf, vf, pl, beta=1.5), (qf, kf, vf), grad)
            for name, a, b in zip("qkv", got, want):
                results.append(_close(f"{tag} d{name}", a, b, 10 * tol, 10 * tol))
    for M, K, N in [(1, 64, 33), (8, 777, 100), (13, 1600, 65)]:
        x, w, b = rand(M, K), rand(N, K) / K ** 0.5, rand(N)
        results.append(_close(f"decode_linear M={M} K={K} N={N}", rk.decode_linear(x, w, b), R.decode_linear(x, w, b),
                              1e-4, 1e-4))
    return results


def time_op(op: str, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype, prefix: int,
            backward: bool) -> dict:
    """Median seconds of the kernel and of the eager reference for one shape."""
    from torch.utils.benchmark import Timer

    import rhea_kernels as rk
    from rhea_kernels import reference as R

    if op == "turn_scores":
        B, T, n, d = shape
        vq, vk = torch.randn(B, n, d, device=device, dtype=dtype), torch.randn(B, T, n, d, device=device, dtype=dtype)
        fns = {"kernel": lambda: rk.turn_scores(vq, vk), "reference": lambda: R.turn_scores(vq, vk)}
    elif op == "turn_scores_and_tiers":  # the fused op vs the reference's two steps
        B, T, n, d = shape
        vq, vk = torch.randn(B, n, d, device=device, dtype=dtype), torch.randn(B, T, n, d, device=device, dtype=dtype)
        fns = {"kernel": lambda: rk.turn_scores_and_tiers(vq, vk, 0.1, 0.5),
               "reference": lambda: R.score_tiers(R.turn_scores(vq, vk), 0.1, 0.5)}
    elif op == "decode_linear":  # the op vs F.linear (BLAS) for M rows
        M, K, N = shape
        x, w = torch.randn(M, K, device=device, dtype=dtype), torch.randn(N, K, device=device, dtype=dtype)
        fns = {"kernel": lambda: rk.decode_linear(x, w), "reference": lambda: R.decode_linear(x, w, None)}
    else:
        B, H, Hkv, N, D = shape
        if H % Hkv:
            raise KernelsCliError(f"--shape: H={H} must be a multiple of Hkv={Hkv} (GQA)")
        if not 0 <= prefix <= N:
            raise KernelsCliError(f"--prefix {prefix} must be between 0 and N={N}")
        q = torch.randn(B, H, N, D, device=device, dtype=dtype, requires_grad=backward)
        k = torch.randn(B, Hkv, N, D, device=device, dtype=dtype, requires_grad=backward)
        v = torch.randn(B, Hkv, N, D, device=device, dtype=dtype, requires_grad=backward)
        pl = torch.full((B,), prefix, dtype=torch.long, device=device)

        def run(fn):
            def call():
                out = fn(q, k, v, pl, beta=1.0)
                if backward:
                    out.sum().backward()
            return call

        # the LSE-merge reference is O(N) memory but forward-only; with --backward, the materialised one
        fns = {"kernel": run(rk.anchored_attention),
               "reference": run(R.anchored_attention if backward else R.anchored_attention_lse_merge)}
    res = {}
    for name, fn in fns.items():
        fn()  # warm-up (allocation, Triton compile)
        res[name] = Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.5).median
    res["speedup"] = res["reference"] / res["kernel"]
    return res


def _main(args) -> int:
    try:
        if args.kernels_cmd == "info":
            for key, value in info().items():
                print(f"{key:26s} {value}")
            return 0
        device = _device(args.device)
        if args.kernels_cmd == "check":
            results = check(device)
            for name, ok, err in results:
                what = f"{int(err)} tiers differ" if name.endswith(" tiers") else f"max|err| {err:.2e}"
                print(f"{'ok  ' if ok else 'FAIL'} {name:70s} {what}")
            failed = sum(not ok for _, ok, _ in results)
            print(f"{len(results) - failed}/{len(results)} cases match the reference on {device}")
            return 1 if failed else 0
        what = {"anchored_attention": "B,H,Hkv,N,D", "decode_linear": "M,K,N"}.get(args.op, "B,T,n,d")
        shape = _shape(args.shape, what.count(",") + 1, what)
        res = time_op(args.op, shape, device, DTYPES[args.dtype], args.prefix, args.backward)
        print(f"{args.op} {shape} {args.dtype} on {device}: kernel {res['kernel'] * 1e3:.3f} ms, "
              f"reference {res['reference'] * 1e3:.3f} ms, speed-up {res['speedup']:.2f}x")
        return 0
    except KernelsCliError as e:
        print(f"rhea kernels: error: {e}", file=sys.stderr)
        return 2


def register(sub) -> None:
    p = sub.add_parser("kernels", help="rhea_kernels: build info, correctness check, one-shape timing",
                       description=__doc__.split("\n\n")[0])
    ks = p.add_subparsers(dest="kernels_cmd", required=True)
    ks.add_parser("info", help="what is built and which implementation each device uses")
    c = ks.add_parser("check", help="compare every op (turn_scores, the fused turn_scores_and_tiers, "
                      "anchored_attention fwd/bwd, decode_linear) with the plain-torch references on small shapes")
    c.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    t = ks.add_parser("time", help="time one shape: kernel vs eager reference")
    t.add_argument("op", choices=["turn_scores", "turn_scores_and_tiers", "anchored_attention", "decode_linear"])
    t.add_argument("--shape", required=True,
                   help="turn_scores, turn_scores_and_tiers: B,T,n,d; anchored_attention: B,H,Hkv,N,D; "
                        "decode_linear: M,K,N")
    t.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    t.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    t.add_argument("--prefix", type=int, default=0, help="anchored_attention: instruction prefix length")
    t.add_argument("--backward", action="store_true", help="anchored_attention: time forward + backward")
    p.set_defaults(func=_main)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rhea")
    register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return args.func(args)
