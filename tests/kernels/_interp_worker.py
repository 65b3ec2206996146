"""Runs Triton kernels in a child process started with TRITON_INTERPRET=1.

The interpreter must be chosen before triton is first imported, process-wide; running
it in a child keeps the pytest process (and other test directories sharing an xdist
worker) free of TRITON_INTERPRET. Nothing here imports triton at module level.
"""
from __future__ import annotations

import os


def init() -> None:
    """Pool initializer: select the interpreter before anything imports triton."""
    os.environ["TRITON_INTERPRET"] = "1"
    import torch

    torch.set_num_threads(1)  # the parent runs beside it on a shared 2-core machine


def turn_scores(vq, vk, turn_mask, center, tau_low, tau_high):
    from rhea_kernels.triton.turn_scores import turn_scores_triton

    return turn_scores_triton(vq, vk, turn_mask, center, tau_low, tau_high, with_tiers=True)


def anchored_attention(q, k, v, prefix_len, beta, causal, scale, grad_out):
    """Forward and backward; returns (out, lse, dq, dk, dv)."""
    from rhea_kernels.triton.anchored_attention import (
        anchored_attention_bwd_triton,
        anchored_attention_fwd_triton,
    )

    out, lse = anchored_attention_fwd_triton(q, k, v, prefix_len, beta, causal, scale)
    dq, dk, dv = anchored_attention_bwd_triton(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale)
    return out, lse, dq, dk, dv
