"""Shared test shapes: small and odd (the interpreter is 100-350x slower than torch)."""
from __future__ import annotations

import pytest
import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# (B, T, nq, nk, d, with_center)
SCORE_SHAPES = [(1, 1, 1, 1, 576, False), (2, 7, 3, 5, 60, True), (2, 33, 8, 2, 60, False), (1, 7, 4, 4, 576, True),
                 (1, 3, 2, 70, 32, True)]  # nk=70: several latent chunks per turn


def score_params(dtypes=("fp32", "fp16", "bf16"), shapes=SCORE_SHAPES):
    return [pytest.param(*s, dt, id=f"B{s[0]}-T{s[1]}-nq{s[2]}-nk{s[3]}-d{s[4]}{'-c' if s[5] else ''}-{dt}")
            for s in shapes for dt in dtypes]


def score_inputs(B, T, nq, nk, d, with_center, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    vq = torch.randn(B, nq, d, generator=g).to(dtype)
    vk = torch.randn(B, T, nk, d, generator=g).to(dtype)
    vk[0, 0] = 0  # a zero turn must score 0, not NaN
    if T > 2:  # make one turn a near-copy of a query so the RAW tier occurs
        vk[-1, 1, 0] = vq[-1, 0] + 0.05 * torch.randn(d, generator=g).to(dtype)
    mask = torch.rand(B, T, generator=g) > 0.3
    center = 0.1 * torch.randn(d, generator=g) if with_center else None
    return vq, vk, mask, center


# (B, H, Hkv, N, D, prefix_len, causal)
ATTN_SHAPES = [
    (2, 4, 1, 37, 60, [5, 37], True),
    (1, 2, 2, 130, 32, [0], True),
    (2, 4, 2, 1, 64, [0, 1], True),
    (1, 2, 1, 70, 16, [66], False),
    (2, 8, 2, 37, 64, [37, 12], True),
]


def attn_params(dtypes=("fp32", "fp16", "bf16"), shapes=ATTN_SHAPES):
    return [pytest.param(*s, dt, id=f"B{s[0]}-H{s[1]}-KV{s[2]}-N{s[3]}-D{s[4]}-P{'_'.join(map(str, s[5]))}"
                                    f"{'' if s[6] else '-full'}-{dt}")
            for s in shapes for dt in dtypes]


def attn_inputs(B, H, Hkv, N, D, prefix_len, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, N, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, N, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, N, D, generator=g).to(dtype)
    grad_out = torch.randn(B, H, N, D, generator=g).to(dtype)
    return q, k, v, torch.tensor(prefix_len, dtype=torch.int64), grad_out


# Relative RMS error allowed vs the fp32 reference, per input dtype.
ATTN_TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.5e-2}
