"""transformers integration: prefix-anchored attention as an `attn_implementation`.

After ``register_anchored_attention()``, a model loaded or switched with
``attn_implementation="rhea_anchored"`` routes attention through
`anchored_attention_forward`, which reads two forward kwargs:

* ``rhea_prefix_len``: int tensor [B] (or an int), the number of instruction-prefix tokens
  of each row, counted over *real* tokens: left padding is not counted; the hook finds
  the padding in the attention mask and offsets the prefix past it.
* ``rhea_anchor_bias``: float beta added to the prefix keys' logits (default 0.0).

Without ``rhea_prefix_len`` the function is plain causal attention.

Paths: a full causal pass with no padding (attention_mask is None and the query covers
all keys) runs the fused `rhea_kernels.anchored_attention` kernel (O(N) memory, with
backward). Padded batches and KV-cache steps (query shorter than the keys) combine the
4-D boolean mask transformers builds (registered mask function: `sdpa_mask`) with the
anchored rule into one additive mask for SDPA; decode steps make that mask one row.

Example:
    >>> from rhea_kernels.hf import register_anchored_attention
    >>> register_anchored_attention()                           # doctest: +SKIP
    >>> model.set_attn_implementation("rhea_anchored")           # doctest: +SKIP
    >>> model(input_ids, rhea_prefix_len=torch.tensor([12]), rhea_anchor_bias=1.0)  # doctest: +SKIP

Only this module imports transformers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rhea_kernels.anchored_attention import anchored_attention

PREFIX_LEN_KWARG = "rhea_prefix_len"
ANCHOR_BIAS_KWARG = "rhea_anchor_bias"


def anchored_keys(visible: torch.Tensor, prefix_len: torch.Tensor) -> torch.Tensor:
    """Bool [B, Nk]: the first prefix_len[b] *real* keys of each row.

    A key is real if some query may attend it in `visible` [B, 1|H, Nq, Nk] (padding keys
    are attended by no one), so left padding shifts the prefix by the pad count.
    """
    real = visible.any(dim=1).any(dim=1)  # [B, Nk]
    rank = real.long().cumsum(-1)  # 1-based index among real keys
    return real & (rank <= prefix_len.to(real.device).long()[:, None])


def _visible(attention_mask, B, Nq, Nk, device) -> torch.Tensor:
    """Bool [B, 1|H, Nq, Nk] from transformers' mask (None = causal, end-aligned queries)."""
    if attention_mask is None:
        qpos = torch.arange(Nq, device=device) + (Nk - Nq)
        causal = torch.arange(Nk, device=device)[None, :] <= qpos[:, None]
        return causal[None, None].expand(B, 1, Nq, Nk)
    mask = attention_mask[..., :Nk]
    if mask.dtype != torch.bool:  # additive float mask: 0 where allowed, large negative elsewhere
        mask = mask > torch.finfo(mask.dtype).min / 2
    return mask.expand(B, -1, Nq, Nk)


def _masked_anchored_sdpa(query, key, value, attention_mask, prefix_len, beta, scaling):
    B, H, Nq, _ = query.shape
    Nk = key.shape[2]
    visible = _visible(attention_mask, B, Nq, Nk, query.device)
    anchored = anchored_keys(visible, prefix_len)[:, None, None, :]
    allowed = visible | anchored
    # Rows that see nothing (padding queries) would give NaN; their output is discarded anyway.
    allowed = allowed | ~allowed.any(-1, keepdim=True)
    bias = torch.where(anchored, beta, 0.0).to(query.dtype)
    mask = torch.where(allowed, bias, torch.finfo(query.dtype).min)
    group = H // key.shape[1]
    # SDPA's enable_gqa is not honoured with an explicit mask on every backend: repeat here.
    key = key.repeat_interleave(group, dim=1)
    value = value.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)


def anchored_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """`AttentionInterface` function: anchored attention, returns ([B, N, H, D], None).

    Reads ``rhea_prefix_len`` ([B] ints, real tokens) and ``rhea_anchor_bias`` (float) from
    kwargs; see the module docstring for padding and KV-cache handling.

    Example:
        >>> q, k = torch.randn(1, 4, 6, 16), torch.randn(1, 2, 6, 16)
        >>> out, _ = anchored_attention_forward(None, q, k, k, None, rhea_prefix_len=torch.tensor([2]),
        ...                                     rhea_anchor_bias=1.0)
        >>> out.shape
        torch.Size([1, 6, 4, 16])
    """
    if dropout and module is not None and module.training:
        raise ValueError(f"dropout={dropout} is not supported by rhea_anchored attention; set attention_dropout=0")
    B = query.shape[0]
    prefix_len = kwargs.get(PREFIX_LEN_KWARG)
    beta = float(kwargs.get(ANCHOR_BIAS_KWARG) or 0.0)
    if prefix_len is None:
        prefix_len, beta = torch.zeros(B, dtype=torch.int64, device=query.device), 0.0
    elif isinstance(prefix_len, int):
        prefix_len = torch.full((B,), prefix_len, dtype=torch.int64, device=query.device)
    elif not isinstance(prefix_len, torch.Tensor) or tuple(prefix_len.shape) != (B,):
        raise ValueError(f"{PREFIX_LEN_KWARG} must be an int or an int tensor of shape [B]=({B},), "
                         f"got {prefix_len!r}")
    prefix_len = prefix_len.to(query.device)
    if attention_mask is None and query.shape[2] == key.shape[2]:
        # Clamp: a prefix longer than the sequence (e.g. a truncated prompt) anchors everything.
        prefix_len = prefix_len.clamp(0, query.shape[2])
        out = anchored_attention(query, key, value, prefix_len, beta, causal=True, scale=scaling)
    else:
        out = _masked_anchored_sdpa(query, key, value, attention_mask, prefix_len, beta, scaling)
    return out.transpose(1, 2).contiguous(), None


def register_anchored_attention(name: str = "rhea_anchored") -> str:
    """Register `anchored_attention_forward` as attn_implementation `name` in
    `transformers.AttentionInterface`, with `sdpa_mask` under the same name in
    `transformers.masking_utils.AttentionMaskInterface` (else attention_mask arrives None).

    Returns the name. Idempotent.

    Example:
        >>> register_anchored_attention()  # doctest: +SKIP
        'rhea_anchored'
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, anchored_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
