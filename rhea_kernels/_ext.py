"""Loader for the optional C++ extension `rhea_kernels._C` (built with RHEA_BUILD_EXT=1).

Records `HAS_EXT`; when the extension is missing, warns once and the ops fall back to
the plain-torch reference on CPU. Also registers fake (meta) kernels for the C++ ops so
they trace under torch.compile and pass `torch.library.opcheck`.
"""
from __future__ import annotations

import warnings

import torch

try:
    from rhea_kernels import _C  # noqa: F401  (importing registers torch.ops.rhea_kernels.cpp_*)

    HAS_EXT = True
    EXT_ERROR: str | None = None
except ImportError as exc:  # not built, or built against another torch
    HAS_EXT = False
    EXT_ERROR = str(exc)

_warned = False


def warn_missing_ext() -> None:
    """Warn once that CPU ops use the slower plain-torch reference."""
    global _warned
    if not HAS_EXT and not _warned:
        _warned = True
        warnings.warn(
            "rhea_kernels C++ extension not available "
            f"({EXT_ERROR}); CPU ops fall back to the plain-torch reference. "
            "Build it with `RHEA_BUILD_EXT=1 pip install --no-build-isolation -e .`.",
            RuntimeWarning,
            stacklevel=3,
        )


if HAS_EXT:

    @torch.library.register_fake("rhea_kernels::cpp_turn_scores")
    def _(vq, vk, turn_mask, center):
        return vk.new_empty(vk.shape[:2], dtype=torch.float32)

    @torch.library.register_fake("rhea_kernels::cpp_turn_scores_and_tiers")
    def _(vq, vk, turn_mask, center, tau_low, tau_high):
        return (vk.new_empty(vk.shape[:2], dtype=torch.float32), vk.new_empty(vk.shape[:2], dtype=torch.int8))

    @torch.library.register_fake("rhea_kernels::cpp_anchored_attention_fwd")
    def _(q, k, v, prefix_len, beta, causal, scale):
        return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    @torch.library.register_fake("rhea_kernels::cpp_anchored_attention_bwd")
    def _(grad_out, q, k, v, out, lse, prefix_len, beta, causal, scale):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
