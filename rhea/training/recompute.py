"""Activation (gradient) checkpointing that recomputes each layer under the adapter of its forward.

The joint step runs the backbone twice in one graph: once under the **compress** LoRA adapter
(`RheaForCausalLM.compress`) and once under the **generate** adapter (`forward`). Which adapter
a PEFT LoRA layer runs is global state (``_active_adapter`` on every LoRA layer), switched by
`RheaForCausalLM.adapter` around each pass. Non-reentrant checkpointing replays a layer's
forward during backward, when the active adapter is whatever the model was left at, so with
plain ``gradient_checkpointing_enable()`` the compress pass is recomputed under the generate
adapter (or the other way round) and the gradients are silently wrong.

`pin_adapters_context_fn` fixes this where the recomputation happens: it is the ``context_fn``
of ``torch.utils.checkpoint.checkpoint``, called once per checkpointed layer call *in the
forward*, so it records the adapters active then and returns a recompute context that makes
them active again for the replay (and restores the current ones afterwards). It only sets the
LoRA layers' active-adapter names; it never touches ``requires_grad`` (so it is safe inside the
backward pass and under FSDP, whose parameters are swapped between sharded and unsharded).

>>> from rhea.testing import tiny_rhea
>>> model = tiny_rhea().train()
>>> enable_activation_checkpointing(model)   # what run.gradient_checkpointing: true does
>>> model.base_model.model.layers[0].gradient_checkpointing
True
"""
from __future__ import annotations

import contextlib
from typing import Callable

from torch import nn


def _lora_layers(model: nn.Module) -> list[nn.Module]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


@contextlib.contextmanager
def _active_adapters(layers: list[nn.Module], names: list):
    """Inside the block, ``layers[i]`` runs adapter(s) ``names[i]``; afterwards what they ran before."""
    before = [layer._active_adapter for layer in layers]
    try:
        for layer, name in zip(layers, names):
            layer._active_adapter = name
        yield
    finally:
        for layer, name in zip(layers, before):
            layer._active_adapter = name


def pin_adapters_context_fn(model: nn.Module) -> Callable[[], tuple]:
    """A ``context_fn`` for non-reentrant ``checkpoint`` that replays each layer under its forward's adapters.

    `model` is any module holding the PEFT LoRA layers (a `RheaForCausalLM`, its PEFT model or
    its base). The LoRA layers are listed once here; each call snapshots their active adapters.
    """
    layers = _lora_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} holds no PEFT LoRA layers; nothing to pin during recomputation")

    def context_fn():
        snapshot = [layer._active_adapter for layer in layers]
        return contextlib.nullcontext(), _active_adapters(layers, snapshot)

    return context_fn


def enable_activation_checkpointing(model) -> None:
    """Turn on non-reentrant activation checkpointing on every decoder layer of a `RheaForCausalLM`.

    Each layer's recomputation runs under the adapter its forward ran (`pin_adapters_context_fn`),
    so gradients equal those without checkpointing for both adapters and the `<mem>` slots.
    """
    base = model.base_model
    kwargs = {"use_reentrant": False, "context_fn": pin_adapters_context_fn(model.peft_model)}
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5 name
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # pragma: no cover - transformers 4
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
