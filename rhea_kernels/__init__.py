"""rhea_kernels: fused turn scoring and prefix-anchored attention, one package per op.

This package never imports `rhea`.

Layout (kernels by op; each op package has its reference, Triton kernel, `torch.library`
registration, and a C++ entry in ``csrc/``):

    rhea_kernels/turn_scores/         op rhea_kernels::turn_scores            csrc/turn_scores.cpp
    rhea_kernels/score_tiers/         op rhea_kernels::turn_scores_and_tiers  csrc/score_tiers.cpp
    rhea_kernels/anchored_attention/  ops rhea_kernels::anchored_attention_fwd/_bwd  csrc/anchored_attention.cpp
    rhea_kernels/decode_linear/       op rhea_kernels::decode_linear          csrc/decode_linear.cpp
    rhea_kernels/_library.py          the shared registration harness (OPS, backend_for)

Public API:
    turn_scores(vq, vk, turn_mask=None, center=None) -> fp32 [B, T]
    score_tiers(scores, tau_low, tau_high) -> int8 [B, T]   (0 DROP, 1 LATENT, 2 RAW)
    turn_scores_and_tiers(vq, vk, tau_low, tau_high, turn_mask=None, center=None)
    anchored_attention(q, k, v, prefix_len, beta, causal=True, scale=None) -> [B, H, N, D]
    decode_linear(x, weight, bias=None) -> F.linear for a few rows (CPU decoding)
    decode_linears(module, max_rows=16): a model's nn.Linear layers routed to it for small inputs
    HAS_EXT: whether the C++ CPU extension is loaded
    backend_for(tensor, op="turn_scores"): "cpp", "triton" or "reference"
    OPS: the registered ops (name -> KernelOp)
    rhea_kernels.hf.register_anchored_attention(name="rhea_anchored")  (transformers hook)
    rhea_kernels.reference: every op's plain-torch reference

Import an op's modules with ``from rhea_kernels.turn_scores import reference``: after
``import rhea_kernels`` the attribute ``rhea_kernels.turn_scores`` is the function.
"""
from rhea_kernels import _ext
from rhea_kernels._library import OPS, backend_for
from rhea_kernels.anchored_attention import anchored_attention
from rhea_kernels.decode_linear import decode_linear, decode_linears
from rhea_kernels.score_tiers import score_tiers, turn_scores_and_tiers
from rhea_kernels.turn_scores import turn_scores

HAS_EXT = _ext.HAS_EXT

__all__ = ["HAS_EXT", "OPS", "anchored_attention", "backend_for", "decode_linear", "decode_linears", "score_tiers",
           "turn_scores", "turn_scores_and_tiers"]
