"""Plain-torch ground truth of ``rhea_kernels::anchored_attention_fwd`` / ``_bwd``.

Key ``j`` is visible to query ``i`` iff ``j < prefix_len[b]`` or ``j <= i`` (or
always when ``causal=False``), and its logit gets ``+beta`` iff ``j < prefix_len[b]``.
K/V may have fewer heads than Q (GQA: query head ``h`` reads kv head ``h // (H // Hkv)``).

These favour clarity over speed (`anchored_attention` materialises an N x N bias), except
`anchored_attention_lse_merge`, an exact O(N)-memory formulation built from two fused
attention calls.
"""
from __future__ import annotations

import math

import torch


def anchored_bias(prefix_len: torch.Tensor, n_q: int, n_k: int, beta: float, causal: bool = True) -> torch.Tensor:
    """Additive float mask [B, 1, n_q, n_k]: 0 / beta where visible, -inf elsewhere.

    Queries are aligned to the end of the keys (query i sits at position i + n_k - n_q),
    which is the usual convention when a KV cache holds earlier positions.
    """
    device = prefix_len.device
    qpos = torch.arange(n_q, device=device) + (n_k - n_q)
    kpos = torch.arange(n_k, device=device)
    in_prefix = kpos[None, :] < prefix_len.long()[:, None]  # [B, n_k]
    visible = in_prefix[:, None, :] | (kpos[None, None, :] <= qpos[None, :, None]) if causal else (
        torch.ones(prefix_len.shape[0], n_q, n_k, dtype=torch.bool, device=device)
    )
    bias = torch.where(in_prefix, beta, 0.0).to(torch.float32)[:, None, :].expand(-1, n_q, -1)
    return torch.where(visible, bias, float("-inf"))[:, None]


def anchored_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    prefix_len: torch.Tensor,
    beta: float,
    causal: bool = True,
    scale: float | None = None,
    return_lse: bool = False,
):
    """Prefix-anchored attention by materialising the [B, 1, N, N] bias (ground truth).

    Computed in fp32 and cast back to q's dtype; differentiable through autograd.

    Example:
        >>> q = k = v = torch.randn(1, 2, 5, 16)
        >>> anchored_attention(q, k, v, torch.tensor([2]), beta=1.0).shape
        torch.Size([1, 2, 5, 16])
    """
    B, H, N, D = q.shape
    group = H // k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    logits = torch.matmul(q.float(), kf.transpose(-1, -2)) * scale
    logits = logits + anchored_bias(prefix_len, N, k.shape[2], beta, causal)
    lse = torch.logsumexp(logits, dim=-1)
    out = torch.matmul(torch.exp(logits - lse[..., None]), vf).to(q.dtype)
    return (out, lse) if return_lse else out


def _attention_with_lse(q, k, v, causal, scale):
    """fp32 (out, lse) of plain attention via the fused CPU/CUDA flash kernels."""
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, scale=scale)
        return out.float(), lse.float()
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, causal, False, scale=scale)[:2]
    return out.float(), lse.float()


def anchored_attention_lse_merge(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    prefix_len: torch.Tensor,
    beta: float,
    causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """Exact O(N)-memory anchored attention: prefix and body attention merged by LSE.

    For each batch row (prefix lengths differ), every query attends the prefix keys
    without a mask, and queries in the body attend body keys causally; the two partial
    results are merged with weights ``exp(lse_prefix + beta)`` and ``exp(lse_body)``.
    Uses the fused flash kernels (forward only; not differentiable).

    Example:
        >>> q = k = v = torch.randn(1, 2, 5, 16)
        >>> anchored_attention_lse_merge(q, k, v, torch.tensor([2]), beta=1.0).shape
        torch.Size([1, 2, 5, 16])
    """
    B, H, N, D = q.shape
    group = H // k.shape[1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    out = torch.empty(B, H, N, D, dtype=torch.float32, device=q.device)
    for b in range(B):
        P = int(prefix_len[b].clamp(0, N))
        qb = q[b:b + 1]
        kb = k[b:b + 1].repeat_interleave(group, dim=1)
        vb = v[b:b + 1].repeat_interleave(group, dim=1)
        lse_p = torch.full((1, H, N), float("-inf"), device=q.device)
        o_p = torch.zeros(1, H, N, D, device=q.device)
        if P > 0:
            o_p, lse_p = _attention_with_lse(qb, kb[:, :, :P], vb[:, :, :P], False, scale)
            lse_p = lse_p + beta
        lse_b = torch.full((1, H, N), float("-inf"), device=q.device)
        o_b = torch.zeros(1, H, N, D, device=q.device)
        if P < N:
            if causal:  # only queries at or after the prefix end see body keys
                o, l = _attention_with_lse(qb[:, :, P:], kb[:, :, P:], vb[:, :, P:], True, scale)
                o_b[:, :, P:], lse_b[:, :, P:] = o, l
            else:
                o_b, lse_b = _attention_with_lse(qb, kb[:, :, P:], vb[:, :, P:], False, scale)
        lse = torch.logaddexp(lse_p, lse_b)
        w_p = torch.exp(lse_p - lse)[..., None]
        w_b = torch.exp(lse_b - lse)[..., None]
        out[b:b + 1] = w_p * o_p + w_b * o_b
    return out.to(q.dtype)


def anchored_attention_bwd(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    prefix_len: torch.Tensor,
    beta: float,
    causal: bool = True,
    scale: float | None = None,
):
    """Analytic gradients (dq, dk, dv) of `anchored_attention`, materialising N x N.

    The softmax backward written out (dS = P * (dO V^T - rowsum(dO * O))), so it runs
    where autograd is unavailable (inside a custom op's kernel). GQA gradients are summed
    over each kv head's query group.

    Example:
        >>> q = k = v = torch.randn(1, 2, 5, 16)
        >>> [t.shape[1] for t in anchored_attention_bwd(torch.ones(1, 2, 5, 16), q, k, v, torch.tensor([2]), 1.0)]
        [2, 2, 2]
    """
    B, H, N, D = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    qf, do = q.float(), grad_out.float()
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    logits = torch.matmul(qf, kf.transpose(-1, -2)) * scale + anchored_bias(prefix_len, N, k.shape[2], beta, causal)
    p = torch.softmax(logits, dim=-1)
    out = torch.matmul(p, vf)
    dv = torch.matmul(p.transpose(-1, -2), do)
    ds = p * (torch.matmul(do, vf.transpose(-1, -2)) - (do * out).sum(-1, keepdim=True))
    dq = torch.matmul(ds, kf) * scale
    dk = torch.matmul(ds.transpose(-1, -2), qf) * scale

    def fold(t):  # [B, H, N, D] -> [B, Hkv, N, D], summing each group's query heads
        return t.view(B, Hkv, group, N, D).sum(2)

    return dq.to(q.dtype), fold(dk).to(k.dtype), fold(dv).to(v.dtype)
