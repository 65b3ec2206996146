"""``rhea_kernels::turn_scores_and_tiers``: turn scoring with the tiers written in the same pass.

Schema, fake kernel and implementations, registered once. CPU: the C++ entry
``csrc/score_tiers.cpp`` (the turn-scoring pass of ``csrc/turn_scores.cpp`` with the tiers
epilogue), else `reference.turn_scores_and_tiers`; CUDA: the turn-scoring Triton kernel with
``WRITE_TIERS`` (rhea_kernels/turn_scores/triton_kernel.py). Thresholds are compared in fp32 on
every path, so the tiers equal ``score_tiers(scores)`` exactly.
"""
from __future__ import annotations

import torch

from rhea_kernels import _library
from rhea_kernels.score_tiers import reference


def _triton(vq, vk, turn_mask, center, tau_low, tau_high):
    from rhea_kernels.turn_scores.triton_kernel import turn_scores_triton

    return turn_scores_triton(vq, vk, turn_mask, center, tau_low, tau_high, with_tiers=True)


def _fake(vq, vk, turn_mask, center, tau_low, tau_high):
    return vk.new_empty(vk.shape[:2], dtype=torch.float32), vk.new_empty(vk.shape[:2], dtype=torch.int8)


OP = _library.define(
    "turn_scores_and_tiers",
    "(Tensor vq, Tensor vk, Tensor? turn_mask, Tensor? center, float tau_low, float tau_high) -> (Tensor, Tensor)",
    reference=reference.turn_scores_and_tiers, triton=_triton, fake=_fake,
    package="rhea_kernels/score_tiers", cpp_source="csrc/score_tiers.cpp",
)
