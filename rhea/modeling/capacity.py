"""Capacity surgery on a Rhea model's trainable pieces: the `<mem>` read-out slots, the piece-index
offsets and each adapter's LoRA rank.

Growing is a warm start that leaves what the model computes unchanged (new slots copy trained ones,
new LoRA directions start with a zero ``B``); shrinking a rank keeps the best low-rank approximation
of each layer's update (a truncated SVD). `RheaForCausalLM.resize_mem_slots`,
``resize_piece_embeddings``, ``resize_lora_rank`` and ``shrink_lora_rank`` call these on the model's
own pieces; `rhea.modeling.shrink` writes a shrunk directory.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from rhea.errors import RheaConfigError
from rhea.modeling.adapters import ADAPTERS


def resized_slots(slots: torch.Tensor, n_mem: int) -> nn.Parameter:
    """`slots` (``[old, hidden]``) as `n_mem` rows, with the same ``requires_grad``.

    Slot ``i < min(old, new)`` keeps its trained embedding; a new slot ``i >= old`` starts as a copy of slot
    ``i mod old`` (the compress pass reads it at another position, so its state differs from the original's
    at once), which keeps a trained compressor's read-out instead of starting the new slots from scratch.

    >>> resized_slots(torch.tensor([[1.0], [2.0]]), 3).flatten().tolist()
    [1.0, 2.0, 1.0]
    """
    rows = slots.detach()[torch.arange(n_mem, device=slots.device) % slots.shape[0]].clone()
    return nn.Parameter(rows, requires_grad=slots.requires_grad)


def resized_piece_offsets(offsets: torch.Tensor | None, n: int, *, hidden: int, dtype: torch.dtype,
                          device: torch.device, requires_grad: bool) -> nn.Parameter | None:
    """`offsets` (``[old, hidden]`` or None) as `n` rows; None for ``n = 0``.

    Offset ``i`` below the old count keeps its trained value; a new one starts as a copy of the old last
    offset (which piece ``i`` used before), or zero when there was none, so every piece is compressed
    exactly as before until training moves them.

    >>> grown = resized_piece_offsets(torch.tensor([[1.0], [2.0]]), 3, hidden=1, dtype=torch.float32,
    ...                               device=torch.device("cpu"), requires_grad=True)
    >>> grown.flatten().tolist()
    [1.0, 2.0, 2.0]
    """
    if n == 0:
        return None
    rows = torch.zeros(n, hidden, dtype=dtype, device=device)
    if offsets is not None:
        keep = min(n, offsets.shape[0])
        rows[:keep] = offsets.detach()[:keep]
        rows[keep:] = offsets.detach()[-1]
    return nn.Parameter(rows, requires_grad=requires_grad)


def lora_rank(peft_model, adapter: str) -> int:
    """The LoRA rank of `adapter` ("compress" or "generate") as its PEFT config records it."""
    if adapter not in ADAPTERS:
        raise RheaConfigError(f"adapter {adapter!r} is not one of {ADAPTERS}")
    return int(peft_model.peft_config[adapter].r)


def _rank_change(peft_model, adapter: str, r: int, *, grow: bool) -> tuple[int, list]:
    """Check a rank change of `adapter` to `r` (`grow`: up, else down); return the old rank and its LoRA layers."""
    from peft.tuners.lora import LoraLayer

    old = lora_rank(peft_model, adapter)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise RheaConfigError(f"rank {r!r} must be an int >= 1")
    if grow and r < old:
        raise RheaConfigError(f"the {adapter!r} adapter has rank {old}; resize_lora_rank only grows a rank "
                              f"(shrinking to {r} would drop trained directions; shrink_lora_rank does): pass r >= {old}")
    if not grow and r > old:
        raise RheaConfigError(f"the {adapter!r} adapter has rank {old}; shrink_lora_rank only lowers a rank: "
                              f"pass r <= {old} (resize_lora_rank grows one)")
    cfg = peft_model.peft_config[adapter]
    if getattr(cfg, "rank_pattern", None) or getattr(cfg, "alpha_pattern", None):
        raise RheaConfigError(f"the {adapter!r} adapter sets rank_pattern/alpha_pattern; per-layer ranks are not "
                              "changed here")
    layers = [m for m in peft_model.modules() if isinstance(m, LoraLayer) and adapter in m.r]
    for layer in layers:
        if adapter not in layer.lora_A or getattr(layer, "merged", False):
            raise RheaConfigError(f"{type(layer).__name__} holds the {adapter!r} adapter merged or outside "
                                  "lora_A/lora_B (e.g. an embedding LoRA); unmerge it before changing its rank")
    return old, layers


def _set_layer_rank(layer, adapter: str, r: int) -> None:
    """Record rank `r` on one LoRA layer with its scale ``alpha / r`` (``alpha / sqrt(r)`` under rsLoRA) kept."""
    layer.r[adapter] = r
    layer.lora_alpha[adapter] = layer.scaling[adapter] * (math.sqrt(r) if layer.use_rslora.get(adapter) else r)


def _set_config_rank(peft_model, adapter: str, old: int, r: int) -> None:
    """Record rank `r` in the adapter's PEFT config, alpha following it so the scale is kept (saved with it)."""
    cfg = peft_model.peft_config[adapter]
    alpha = (cfg.lora_alpha / old) * r if not cfg.use_rslora else cfg.lora_alpha * math.sqrt(r / old)
    cfg.r, cfg.lora_alpha = r, int(alpha) if float(alpha).is_integer() else alpha


def _install(layer, adapter: str, a: nn.Linear, b: nn.Linear, r: int) -> None:
    """Put new ``A``/``B`` (on the old ones' device, dtype and ``requires_grad``) into `layer` at rank `r`."""
    for new, was in ((a, layer.lora_A[adapter]), (b, layer.lora_B[adapter])):
        new.to(device=was.weight.device, dtype=was.weight.dtype)
        new.requires_grad_(was.weight.requires_grad)
    layer.lora_A[adapter], layer.lora_B[adapter] = a, b
    _set_layer_rank(layer, adapter, r)


def resize_lora_rank(peft_model, adapter: str, r: int, *, seed: int = 0) -> None:
    """Grow the LoRA rank of `adapter` on `peft_model` to `r` without changing what the model computes.

    Every LoRA layer of the adapter keeps its trained ``A`` rows and ``B`` columns; the new ``A`` rows are
    drawn as PEFT draws a fresh ``A`` (Kaiming-uniform) and the new ``B`` columns are zero, so ``B A`` is
    unchanged. ``lora_alpha`` is raised with the rank so that the scale ``alpha / r`` (``alpha / sqrt(r)``
    under rsLoRA) stays what the adapter was trained with. The adapter's PEFT config records the new rank
    and alpha, so a save round-trips it. Build the optimizer after resizing: the LoRA tensors are new.
    """
    old, layers = _rank_change(peft_model, adapter, r, grow=True)
    if r == old:
        return
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in layers:
            a_old, b_old = layer.lora_A[adapter], layer.lora_B[adapter]
            a = nn.Linear(a_old.in_features, r, bias=False)
            nn.init.kaiming_uniform_(a.weight, a=math.sqrt(5), generator=g)  # PEFT's default init of A
            a.weight[:old] = a_old.weight.float()
            b = nn.Linear(r, b_old.out_features, bias=b_old.bias is not None)
            b.weight.zero_()
            b.weight[:, :old] = b_old.weight.float()
            if b_old.bias is not None:
                b.bias.copy_(b_old.bias.float())
            _install(layer, adapter, a, b, r)
    _set_config_rank(peft_model, adapter, old, r)


def shrink_lora_rank(peft_model, adapter: str, r: int, *, seed: int = 0) -> dict:
    """Cut the LoRA rank of `adapter` on `peft_model` to `r` by a truncated SVD of each layer's update.

    Each LoRA layer's update ``scale * B A`` is replaced by its best rank-`r` approximation (Eckart-Young):
    the top `r` singular directions, split evenly between the new ``B`` and ``A``. The scale ``alpha / r`` is
    kept (``lora_alpha`` is lowered with the rank), so a layer whose update already had rank <= `r` computes
    exactly what it did. An update with fewer than `r` non-zero singular values (a zero, untrained adapter
    included) keeps PEFT's fresh-start shape in the spare directions: Kaiming ``A`` rows, zero ``B``
    columns, so the adapter can still be trained afterwards. Returns what was kept: the share of each
    layer's squared Frobenius norm (``energy_kept_min`` / ``_mean`` over layers, 1.0 for a zero update)
    and the largest relative error ``||dW - dW_r|| / ||dW||``.
    """
    old, layers = _rank_change(peft_model, adapter, r, grow=False)
    if getattr(peft_model.peft_config[adapter], "use_dora", False):
        raise RheaConfigError(f"the {adapter!r} adapter uses DoRA, whose magnitude vector depends on the update's "
                              "column norms; a truncated B A would no longer match it")
    if any(layer.lora_B[adapter].bias is not None for layer in layers):
        raise RheaConfigError(f"the {adapter!r} adapter has a lora_B bias (lora_bias=True); it is not shrunk here")
    kept, errors = [], []
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in layers:
            a_old, b_old = layer.lora_A[adapter], layer.lora_B[adapter]
            a, b = a_old.weight.detach().double().cpu(), b_old.weight.detach().double().cpu()
            # B A = Qb (Rb Ra^T) Qa^T: the SVD of the small old x old core gives the update's SVD.
            qb, rb = torch.linalg.qr(b)
            qa, ra = torch.linalg.qr(a.T)
            u, s, vh = torch.linalg.svd(rb @ ra.T, full_matrices=False)
            total = float((s * s).sum())
            tail = float((s[r:] * s[r:]).sum())
            kept.append(1.0 if total == 0.0 else 1.0 - tail / total)
            errors.append(0.0 if total == 0.0 else math.sqrt(tail / total))
            k = min(r, s.shape[0])                               # a layer narrower than r has fewer directions
            root = torch.sqrt(s[:k])                             # B' A' = U_k S_k V_k^T = B A, truncated;
            new_b = (qb @ u[:, :k]) * root                       # the scale alpha / r is kept as it was
            new_a = root[:, None] * (vh[:k] @ qa.T)
            a_new = nn.Linear(a_old.in_features, r, bias=False)
            nn.init.kaiming_uniform_(a_new.weight, a=math.sqrt(5), generator=g)
            b_new = nn.Linear(r, b_old.out_features, bias=False)
            b_new.weight.zero_()
            live = torch.nonzero(s[:k] > 0).flatten()
            a_new.weight[live] = new_a[live].to(a_new.weight.dtype)
            b_new.weight[:, live] = new_b[:, live].to(b_new.weight.dtype)
            _install(layer, adapter, a_new, b_new, r)
    _set_config_rank(peft_model, adapter, old, r)
    return {"adapter": adapter, "rank_before": old, "rank_after": r, "layers": len(layers),
            "energy_kept_min": min(kept, default=1.0),
            "energy_kept_mean": sum(kept) / len(kept) if kept else 1.0,
            "rel_error_max": max(errors, default=0.0)}


__all__ = ["lora_rank", "resize_lora_rank", "resized_piece_offsets", "resized_slots", "shrink_lora_rank"]
