"""``rhea_kernels::anchored_attention_fwd`` / ``_bwd`` and their autograd, registered once.

CPU: the C++ entry ``csrc/anchored_attention.cpp`` (else `reference`); CUDA: the Triton
kernels in `triton_kernel`. The forward returns (out, fp32 log-sum-exp); autograd saves
both and calls the backward op, so every backend's backward runs through one registration.
"""
from __future__ import annotations

import torch

from rhea_kernels import _library
from rhea_kernels.anchored_attention import reference


def _fwd_reference(q, k, v, prefix_len, beta, causal, scale):
    return reference.anchored_attention(q, k, v, prefix_len, beta, causal, scale, return_lse=True)


def _fwd_triton(q, k, v, prefix_len, beta, causal, scale):
    from rhea_kernels.anchored_attention.triton_kernel import anchored_attention_fwd_triton

    return anchored_attention_fwd_triton(q, k, v, prefix_len, beta, causal, scale)


def _fwd_fake(q, k, v, prefix_len, beta, causal, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)


def _bwd_reference(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale):
    return reference.anchored_attention_bwd(grad_out, q, k, v, prefix_len, beta, causal, scale)


def _bwd_triton(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale):
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
