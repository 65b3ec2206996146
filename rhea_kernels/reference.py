"""Plain-torch ground truth of every rhea_kernels op, gathered from the op packages.

Each op's reference lives beside its kernels (``rhea_kernels/<op>/reference.py``) and
defines its semantics; the Triton and C++ kernels are tested against it. This module
re-exports them under one name for callers and tests:

* `turn_scores` (rhea_kernels/turn_scores/reference.py): max cosine of each stored turn's
  latents against the query latents; zero vectors score 0, masked turns -inf.
* `score_tiers`, `turn_scores_and_tiers` (rhea_kernels/score_tiers/reference.py): tiers
  2 RAW if s > tau_high, 0 DROP if s < tau_low, else 1 LATENT; masked turns DROP.
* `decode_linear` (rhea_kernels/decode_linear/reference.py): ``F.linear(x, weight, bias)``.
* `anchored_attention`, `anchored_attention_bwd`, `anchored_attention_lse_merge`,
  `anchored_bias` (rhea_kernels/anchored_attention/reference.py): attention where keys
  below prefix_len[b] get +beta and are visible to every query.
"""
from rhea_kernels.anchored_attention.reference import (
    anchored_attention,
    anchored_attention_bwd,
    anchored_attention_lse_merge,
    anchored_bias,
)
from rhea_kernels.decode_linear.reference import decode_linear
from rhea_kernels.score_tiers.reference import DROP, LATENT, RAW, score_tiers, turn_scores_and_tiers
from rhea_kernels.turn_scores.reference import EPS, turn_scores

__all__ = ["DROP", "EPS", "LATENT", "RAW", "anchored_attention", "anchored_attention_bwd",
           "anchored_attention_lse_merge", "anchored_bias", "decode_linear", "score_tiers", "turn_scores",
           "turn_scores_and_tiers"]
