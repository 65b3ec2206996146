"""``rhea_kernels::turn_scores``: schema, fake kernel and implementations, registered once.

CPU: the C++ entry ``csrc/turn_scores.cpp`` (else `reference.turn_scores`); CUDA: the
Triton kernel in `triton_kernel` (no tiers epilogue).
"""
from __future__ import annotations

import torch

from rhea_kernels import _library
from rhea_kernels.turn_scores import reference


def _triton(vq, vk, turn_mask, center):
    from rhea_kernels.turn_scores.triton_kernel import turn_scores_triton

    return turn_scores_triton(vq, vk, turn_mask, center)[0]


def _fake(vq, vk, turn_mask, center):
    return vk.new_empty(vk.shape[:2], dtype=torch.float32)


OP = _library.define(
    "turn_scores", "(Tensor vq, Tensor vk, Tensor? turn_mask, Tensor? center) -> Tensor",
    reference=reference.turn_scores, triton=_triton, fake=_fake,
    package="rhea_kernels/turn_scores", cpp_source="csrc/turn_scores.cpp",
)
