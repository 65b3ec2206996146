"""Public ops as `torch.library` custom ops: one signature, three backends.

Dispatch per call: Triton on CUDA, the C++ extension on CPU when built (see `HAS_EXT`),
else the plain-torch reference (with one warning). The ops have fake kernels, so
`torch.compile(fullgraph=True)` traces them, and `anchored_attention` has autograd.

Example:
    >>> import torch, rhea_kernels
    >>> vq, vk = torch.randn(1, 8, 64), torch.randn(1, 5, 8, 64)
    >>> scores, tiers = rhea_kernels.turn_scores_and_tiers(vq, vk, tau_low=0.0, tau_high=0.3)
    >>> scores.shape, tiers.dtype
    (torch.Size([1, 5]), torch.int8)
"""
from __future__ import annotations

import math

import torch

from rhea_kernels import _checks, _ext, reference

HAS_EXT = _ext.HAS_EXT


def backend_for(t: torch.Tensor) -> str:
    """Which implementation runs for tensors on t's device: "triton", "cpp" or "reference"."""
    if t.device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "reference"
        return "triton"
    if t.device.type == "cpu" and HAS_EXT:
        return "cpp"
    _ext.warn_missing_ext()
    return "reference"


# ---------------------------------------------------------------- turn scoring

@torch.library.custom_op("rhea_kernels::turn_scores", mutates_args=())
def _turn_scores_op(vq: torch.Tensor, vk: torch.Tensor, turn_mask: torch.Tensor | None,
                    center: torch.Tensor | None) -> torch.Tensor:
    backend = backend_for(vk)
    if backend == "triton":
        from rhea_kernels.triton.turn_scores import turn_scores_triton
        return turn_scores_triton(vq, vk, turn_mask, center)[0]
    if backend == "cpp":
        return torch.ops.rhea_kernels.cpp_turn_scores(vq, vk, turn_mask, center)
    return reference.turn_scores(vq, vk, turn_mask, center)


@_turn_scores_op.register_fake
def _(vq, vk, turn_mask, center):
    return vk.new_empty(vk.shape[:2], dtype=torch.float32)


@torch.library.custom_op("rhea_kernels::turn_scores_and_tiers", mutates_args=())
def _turn_scores_and_tiers_op(vq: torch.Tensor, vk: torch.Tensor, turn_mask: torch.Tensor | None,
                              center: torch.Tensor | None, tau_low: float,
                              tau_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    backend = backend_for(vk)
    if backend == "triton":
        from rhea_kernels.triton.turn_scores import turn_scores_triton
        return turn_scores_triton(vq, vk, turn_mask, center, tau_low, tau_high, with_tiers=True)
    if backend == "cpp":
        return torch.ops.rhea_kernels.cpp_turn_scores_and_tiers(vq, vk, turn_mask, center, tau_low, tau_high)
    scores = reference.turn_scores(vq, vk, turn_mask, center)
    return scores, reference.score_tiers(scores, tau_low, tau_high)


@_turn_scores_and_tiers_op.register_fake
def _(vq, vk, turn_mask, center, tau_low, tau_high):
    return vk.new_empty(vk.shape[:2], dtype=torch.float32), vk.new_empty(vk.shape[:2], dtype=torch.int8)


def _direct_cpp(t: torch.Tensor) -> bool:
    """Whether a CPU call can go straight to the C++ op.

    The `cpp_*` ops are registered operators with fake kernels themselves (traceable by
    torch.compile), so calling them directly skips only the Python custom-op layer, which
    costs tens of microseconds per call: most of a turn-scoring call at T=64.
    """
    return HAS_EXT and t.device.type == "cpu"


def turn_scores(vq: torch.Tensor, vk: torch.Tensor, turn_mask: torch.Tensor | None = None,
                center: torch.Tensor | None = None) -> torch.Tensor:
    """Score every stored turn against the query: ``max_{i,j} cos(vq[b,i]-c, vk[b,t,j]-c)``.

    Args:
        vq: query latents [B, nq, d] (fp32/fp16/bf16).
        vk: stored turn latents [B, T, nk, d], same dtype.
        turn_mask: optional bool [B, T]; False = no such turn (score -inf).
        center: optional [d] mean latent subtracted from vq and vk before normalising.

    Returns:
        fp32 [B, T]. A zero (after centring) vector has cosine 0 with everything.
        Not differentiable.

    Example:
        >>> turn_scores(torch.randn(2, 8, 576), torch.randn(2, 30, 8, 576)).shape
        torch.Size([2, 30])
    """
    _checks.check_turn_scores(vq, vk, turn_mask, center)
    if _direct_cpp(vk):
        return torch.ops.rhea_kernels.cpp_turn_scores(vq, vk, turn_mask, center)
    return _turn_scores_op(vq, vk, turn_mask, center)


def score_tiers(scores: torch.Tensor, tau_low: float, tau_high: float) -> torch.Tensor:
    """int8 tiers from scores: 2 RAW if s > tau_high, 0 DROP if s < tau_low, else 1 LATENT.

    Example:
        >>> score_tiers(torch.tensor([[0.1, 0.6, 0.9, float("-inf")]]), 0.5, 0.8).tolist()
        [[0, 1, 2, 0]]
    """
    _checks.check_taus(tau_low, tau_high)
    return reference.score_tiers(scores, tau_low, tau_high)


def turn_scores_and_tiers(vq: torch.Tensor, vk: torch.Tensor, tau_low: float, tau_high: float,
                          turn_mask: torch.Tensor | None = None,
                          center: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`turn_scores` and `score_tiers` in one pass: returns (fp32 scores [B, T], int8 tiers [B, T]).

    Example:
        >>> s, t = turn_scores_and_tiers(torch.randn(1, 4, 64), torch.randn(1, 9, 4, 64), 0.1, 0.3)
        >>> t.dtype
        torch.int8
    """
    _checks.check_turn_scores(vq, vk, turn_mask, center)
    _checks.check_taus(tau_low, tau_high)
    if _direct_cpp(vk):
        return torch.ops.rhea_kernels.cpp_turn_scores_and_tiers(vq, vk, turn_mask, center, float(tau_low),
                                                               float(tau_high))
    return _turn_scores_and_tiers_op(vq, vk, turn_mask, center, float(tau_low), float(tau_high))


# ----------------------------------------------------------- anchored attention

@torch.library.custom_op("rhea_kernels::anchored_attention_fwd", mutates_args=())
def _anchored_fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_len: torch.Tensor,
                     beta: float, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    backend = backend_for(q)
    if backend == "triton":
        from rhea_kernels.triton.anchored_attention import anchored_attention_fwd_triton
        return anchored_attention_fwd_triton(q, k, v, prefix_len, beta, causal, scale)
    if backend == "cpp":
        return torch.ops.rhea_kernels.cpp_anchored_attention_fwd(q, k, v, prefix_len, beta, causal, scale)
    return reference.anchored_attention(q, k, v, prefix_len, beta, causal, scale, return_lse=True)


@_anchored_fwd_op.register_fake
def _(q, k, v, prefix_len, beta, causal, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.custom_op("rhea_kernels::anchored_attention_bwd", mutates_args=())
def _anchored_bwd_op(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     out: torch.Tensor, lse: torch.Tensor, prefix_len: torch.Tensor, beta: float,
                     causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    backend = backend_for(q)
    if backend == "triton":
        from rhea_kernels.triton.anchored_attention import anchored_attention_bwd_triton
        return anchored_attention_bwd_triton(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale)
    if backend == "cpp":
        return torch.ops.rhea_kernels.cpp_anchored_attention_bwd(
            grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale)
    return reference.anchored_attention_bwd(grad_out, q, k, v, prefix_len, beta, causal, scale)


@_anchored_bwd_op.register_fake
def _(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, prefix_len, beta, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, prefix_len, out, lse)
    ctx.beta, ctx.causal, ctx.scale = beta, causal, scale
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, prefix_len, out, lse = ctx.saved_tensors
    dq, dk, dv = _anchored_bwd_op(grad_out.contiguous(), q, k, v, out, lse, prefix_len,
                                  ctx.beta, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None, None, None


_anchored_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def anchored_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_len: torch.Tensor | int,
                       beta: float, causal: bool = True, scale: float | None = None) -> torch.Tensor:
    """Attention where the instruction prefix is anchored: keys j < prefix_len[b] get +beta
    and are visible to every query; the rest is ordinary (causal) attention.

    Args:
        q: [B, H, N, D]; k, v: [B, Hkv, N, D] with H % Hkv == 0 (GQA, K/V never repeated).
        prefix_len: int32/int64 [B] (or an int for every row), each in [0, N].
        beta: additive logit bias on prefix keys (0 = plain attention with a visible prefix).
        causal: causal body (default); False = full attention plus the prefix bias.
        scale: softmax scale, default 1/sqrt(D).

    Returns:
        [B, H, N, D] in q's dtype; differentiable w.r.t. q, k, v.

    Example:
        >>> q, k, v = torch.randn(1, 4, 10, 64), torch.randn(1, 1, 10, 64), torch.randn(1, 1, 10, 64)
        >>> anchored_attention(q, k, v, torch.tensor([3]), beta=2.0).shape
        torch.Size([1, 4, 10, 64])
    """
    if isinstance(prefix_len, int):
        prefix_len = torch.full((q.shape[0],), prefix_len, dtype=torch.int64, device=q.device)
    _checks.check_attention(q, k, v, prefix_len, beta, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _anchored_fwd_op(q, k, v, prefix_len, float(beta), bool(causal), scale)[0]
