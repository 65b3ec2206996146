"""``rhea_kernels::anchored_attention_fwd`` / ``_bwd`` and their autograd, registered once.

CPU: the C++ entry ``csrc/anchored_attention.cpp`` (else `reference`); CUDA: the split
route (`split`: two aten flash-attention calls merged by log-sum-exp) where `split.eligible`
(fp16/bf16, D % 8 == 0, sm80+, ...), else the Triton kernels in `triton_kernel`. The
environment variable ``RHEA_ANCHORED_ROUTE`` picks the CUDA route: ``auto`` (default) takes
the split route for eligible inputs of N >= 4096 whose passes run on cuDNN's attention (Triton
for the rest), ``split`` for every eligible input (cuDNN or the flash op), ``triton`` always runs the
Triton kernels. The forward returns (out, fp32 log-sum-exp, bias included, natural
log); both CUDA routes use that convention, and forward and backward decide with the same
test on the same (q, k). Autograd saves both outputs and calls the backward op, so every
backend's backward runs through one registration.
"""
from __future__ import annotations

import os

import torch

from rhea_kernels import _library
from rhea_kernels.anchored_attention import reference


def _fwd_reference(q, k, v, prefix_len, beta, causal, scale):
    return reference.anchored_attention(q, k, v, prefix_len, beta, causal, scale, return_lse=True)


ROUTE_ENV = "RHEA_ANCHORED_ROUTE"
#: ``auto`` takes the split route from this sequence length: on the H100 it was 1.08-1.34x SDPA
#: (no bias) at N = 4k-16k vs the Triton kernel's 1.61-1.84x; shorter N was not measured on cuDNN
#: (over FA2 at N=1024 the split route was 3.0x, the kernel 1.6x: fixed costs dominate)
AUTO_SPLIT_MIN_N = 4096
ROUTES = ("auto", "split", "triton")


def cuda_route() -> str:
    """The CUDA route asked for by ``RHEA_ANCHORED_ROUTE`` (default ``auto``); ValueError if unknown."""
    route = os.environ.get(ROUTE_ENV, "auto").strip().lower() or "auto"
    if route not in ROUTES:
        raise ValueError(f"{ROUTE_ENV}={os.environ.get(ROUTE_ENV)!r} is not a route; use one of "
                         f"{', '.join(ROUTES)} (auto and split: the split flash route where eligible, "
                         f"triton: always the Triton kernels)")
    return route


def _use_split(q, k) -> bool:
    """The one test both the CUDA forward and backward make (same q, k -> same answer).

    ``auto`` takes the split route only where its passes run on cuDNN's attention (the kernel
    SDPA itself picks on an H100) and N >= AUTO_SPLIT_MIN_N; over the FA2 flash op the split
    route measured slower than the Triton kernel (docs/guides/kernels.md), so there ``auto`` stays on
    Triton. ``split`` forces it for every eligible input.
    """
    route = cuda_route()
    if route == "triton":
        return False
    from rhea_kernels.anchored_attention import split

    if not split.eligible(q, k):
        return False
    if route == "split":
        return True
    return q.shape[2] >= AUTO_SPLIT_MIN_N and split.pass_backend(q, k) == "cudnn"


def _fwd_triton(q, k, v, prefix_len, beta, causal, scale):
    if _use_split(q, k):
        from rhea_kernels.anchored_attention.split import split_fwd

        return split_fwd(q, k, v, prefix_len, beta, causal, scale)
    from rhea_kernels.anchored_attention.triton_kernel import anchored_attention_fwd_triton

    return anchored_attention_fwd_triton(q, k, v, prefix_len, beta, causal, scale)


def _fwd_fake(q, k, v, prefix_len, beta, causal, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)


def _bwd_reference(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale):
    return reference.anchored_attention_bwd(grad_out, q, k, v, prefix_len, beta, causal, scale)


def _bwd_triton(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale):
    if _use_split(q, k):
        from rhea_kernels.anchored_attention.split import split_bwd

        return split_bwd(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale)
    from rhea_kernels.anchored_attention.triton_kernel import anchored_attention_bwd_triton

    return anchored_attention_bwd_triton(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale)


def _bwd_fake(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


FWD = _library.define(
    "anchored_attention_fwd",
    "(Tensor q, Tensor k, Tensor v, Tensor prefix_len, float beta, bool causal, float scale) -> (Tensor, Tensor)",
    reference=_fwd_reference, triton=_fwd_triton, fake=_fwd_fake,
    package="rhea_kernels/anchored_attention", cpp_source="csrc/anchored_attention.cpp",
)
BWD = _library.define(
    "anchored_attention_bwd",
    "(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor prefix_len, float beta, "
    "bool causal, float scale) -> (Tensor, Tensor, Tensor)",
    reference=_bwd_reference, triton=_bwd_triton, fake=_bwd_fake,
    package="rhea_kernels/anchored_attention", cpp_source="csrc/anchored_attention.cpp",
)


def _setup_context(ctx, inputs, output):
    q, k, v, prefix_len, beta, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, prefix_len, out, lse)
    ctx.beta, ctx.causal, ctx.scale = beta, causal, scale
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, prefix_len, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.rhea_kernels.anchored_attention_bwd(grad_out.contiguous(), q, k, v, out, lse, prefix_len,
                                                               ctx.beta, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None, None, None


torch.library.register_autograd(FWD.qualname, _backward, setup_context=_setup_context, lib=_library.LIB)
