"""rhea_kernels: fused turn scoring and prefix-anchored attention (Triton, C++ fallback, references).

This package never imports `rhea`.

Public API:
    turn_scores(vq, vk, turn_mask=None, center=None) -> fp32 [B, T]
    score_tiers(scores, tau_low, tau_high) -> int8 [B, T]   (0 DROP, 1 LATENT, 2 RAW)
    turn_scores_and_tiers(vq, vk, tau_low, tau_high, turn_mask=None, center=None)
    anchored_attention(q, k, v, prefix_len, beta, causal=True, scale=None) -> [B, H, N, D]
    HAS_EXT: whether the C++ CPU extension is loaded
    rhea_kernels.hf.register_anchored_attention(name="rhea_anchored")  (transformers hook)
"""
from rhea_kernels.ops import (
    HAS_EXT,
    anchored_attention,
    backend_for,
    score_tiers,
    turn_scores,
    turn_scores_and_tiers,
)

__all__ = ["HAS_EXT", "anchored_attention", "backend_for", "score_tiers", "turn_scores", "turn_scores_and_tiers"]
