"""The adapter mechanics of `RheaForCausalLM`: two named LoRA adapters on one PEFT model.

`LoraAdapters` switches the active adapter (`use`) without touching any ``requires_grad``, so one graph
can train both, and decodes through weights with an adapter folded in (`merged`). It works on the PEFT
model it is given and caches what it finds there (the tuner layers, the merged weights).

Which PEFT API is used where: a switch writes each cached LoRA layer's active-adapter record directly,
because every public PEFT switch (``PeftModel.set_adapter``, ``LoraModel.set_adapter``,
``BaseTunerLayer.set_adapter``) also sets each adapter parameter's ``requires_grad`` (freezing the
other adapter, which joint training must then undo): over 210 LoRA layers a round trip through the
per-layer public calls plus ``set_requires_grad`` to restore the flags took 74 ms, the direct write
0.01 ms (CPU). PEFT's ``LoraModel.set_adapter`` remains the path wherever the direct write would be
wrong (``modules_to_save`` wrappers, merged layers); plain base-model runs use PEFT's
``disable_adapter`` context and read its ``disable_adapters`` flag.
"""
from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn

from rhea.errors import RheaConfigError

ADAPTERS = ("compress", "generate")


@contextlib.contextmanager
def quiet_peft():
    """peft calls a transformers API that transformers deprecates; users can do nothing about it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def lora_config(config):
    """The PEFT ``LoraConfig`` both adapters of a `RheaConfig` are created with."""
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )


def check_adapter(name: str) -> None:
    if name not in ADAPTERS:
        raise ValueError(f"adapter {name!r} is not one of {ADAPTERS}")


class LoraAdapters:
    """Switching and merged decoding over the ``compress`` and ``generate`` adapters of `peft_model`.

    >>> from rhea.testing import tiny_rhea
    >>> lora = LoraAdapters(tiny_rhea().peft_model)
    >>> lora.active()
    'compress'
    >>> with lora.use("generate"):
    ...     lora.active()
    'generate'
    >>> lora.active()
    'compress'
    """

    #: the default (decode_merged None) builds the merged copy only while this share of the GPU's
    #: free memory stays free after it: the copy must not crowd out the KV cache
    MERGED_COPY_MAX_FREE_SHARE = 0.5

    def __init__(self, peft_model):
        self.peft_model = peft_model
        self._tuner = None                 # [BaseTunerLayer] to switch by hand, or None: PEFT's set_adapter
        self._lora: dict[str, list] = {}   # adapter -> its LoRA layers, checked foldable
        self._slots = None                 # (layer ids, [(parent, attribute, LoRA wrapper, base layer)])
        #: adapter -> (key of the weights it was built from, the merged weights)
        self.merged_cache: dict[str, tuple[tuple, list]] = {}
        #: whether the merged copy fits the GPU (`merged_copy_fits`), decided once; None: not yet
        self.fit_verdict: bool | None = None

    # ------------------------------------------------------------------ switching
    def active(self) -> str:
        """The LoRA adapter the LoRA layers run now ("compress" or "generate").

        Read from the LoRA model: ``PeftModel.active_adapter`` keeps its own record, which `use`
        does not update (it sets the LoRA model's and each layer's, directly or through the LoRA
        model's ``set_adapter``).
        """
        active = self.peft_model.base_model.active_adapter
        return active[0] if isinstance(active, (list, tuple)) and len(active) == 1 else active

    @contextlib.contextmanager
    def use(self, name: str):
        """Make `name` the active adapter inside the block, leaving every ``requires_grad`` as it was."""
        check_adapter(name)
        prev = self.active()
        if prev == name:
            yield
            return
        self.switch(name)
        try:
            yield
        finally:
            self.switch(prev)

    def switch(self, to: str) -> None:
        """Point every LoRA layer at adapter `to`, leaving ``requires_grad`` alone.

        What decides which adapter a LoRA layer runs is its active-adapter record (as
        `rhea.training.recompute` pins it), so the layers are found once and only that is set. A
        model with PEFT auxiliary modules (``modules_to_save``) or merged layers takes PEFT's
        ``set_adapter``, with the ``requires_grad`` flags it resets put back.
        """
        layers = self.tuner_layers()
        if layers is None:
            grads = {n: p.requires_grad for n, p in self.peft_model.named_parameters() if "lora_" in n}
            self.peft_model.base_model.set_adapter(to)
            params = dict(self.peft_model.named_parameters())
            for n, flag in grads.items():  # set_adapter froze the other adapter: undo that
                params[n].requires_grad_(flag)
            return
        for layer in layers:
            layer._active_adapter = [to]   # PEFT's own record; no public setter leaves requires_grad alone
        self.peft_model.base_model.active_adapter = to

    def tuner_layers(self) -> list | None:
        """The PEFT tuner layers to switch by hand, or None where PEFT's ``set_adapter`` must run."""
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper

        if self._tuner is None:
            modules = list(self.peft_model.modules())
            if any(isinstance(m, AuxiliaryTrainingWrapper) for m in modules):
                self._tuner = (None,)
            else:
                self._tuner = ([m for m in modules if isinstance(m, BaseTunerLayer)],)
        layers = self._tuner[0]
        if layers is not None and any(layer.merged for layer in layers):
            return None
        return layers

    def disabled(self) -> bool:
        """True inside PEFT's ``disable_adapter`` (it flags every LoRA layer; the first generate layer tells)."""
        layers = self.lora_layers("generate")
        return bool(layers and layers[0].disable_adapters)

    # ------------------------------------------------------------------ merged decoding
    def lora_layers(self, name: str) -> list:
        """Adapter `name`'s LoRA layers, checked foldable; found once (walking the module tree took
        ~10 ms per call on SmolLM2, paid by every merged reply)."""
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora import LoraLayer

        if name in self._lora:
            return self._lora[name]
        layers = [m for m in self.peft_model.modules() if isinstance(m, LoraLayer) and name in m.lora_A]
        odd = [type(m).__name__ for m in layers if not isinstance(m, LoraLinear) or m.use_dora.get(name, False)
               or not isinstance(getattr(m.get_base_layer(), "weight", None), nn.Parameter)
               or not m.get_base_layer().weight.dtype.is_floating_point]
        if odd:
            raise RheaConfigError(f"merged decoding folds plain LoRA into floating-point nn.Linear weights; the {name} "
                                  f"adapter also has {sorted(set(odd))} layers (DoRA, quantised or non-linear bases): "
                                  "set model.decode_merged = False")
        self._lora[name] = layers
        return layers

    def merged_weights(self, name: str) -> tuple[list, list]:
        """(layers, their base weights with `name`'s LoRA added), rebuilt whenever an adapter or base weight changed."""
        layers = self.lora_layers(name)
        key = tuple((m.lora_A[name].weight._version, m.lora_A[name].weight.data_ptr(), m.lora_B[name].weight._version,
                     m.lora_B[name].weight.data_ptr(), m.scaling[name], m.get_base_layer().weight.data_ptr())
                    for m in layers)
        cached = self.merged_cache.get(name)
        if cached is None or cached[0] != key:
            self.merged_cache.pop(name, None)  # free the stale copy before making the new one
            with torch.no_grad():
                weights = [(m.get_base_layer().weight + m.get_delta_weight(name).to(m.get_base_layer().weight.dtype))
                           .detach() for m in layers]
            cached = self.merged_cache[name] = (key, weights)
        return layers, cached[1]

    def merged_copy_fits(self, name: str, device: torch.device) -> bool:
        """True when the merged copy of `name` exists or takes at most MERGED_COPY_MAX_FREE_SHARE of
        `device`'s free memory; else False, warned once (decode_merged=True forces it). False too for
        adapters that cannot be folded (the default never raises for them)."""
        if name in self.merged_cache:
            return True
        if self.fit_verdict is not None:
            return self.fit_verdict
        try:
            layers = self.lora_layers(name)
        except RheaConfigError:  # DoRA / quantised bases: nothing to fold, the default just decodes unmerged
            self.fit_verdict = False
            return False
        need = sum(m.get_base_layer().weight.numel() * m.get_base_layer().weight.element_size() for m in layers)
        free, _ = torch.cuda.mem_get_info(device)
        fits = need <= self.MERGED_COPY_MAX_FREE_SHARE * free
        if not fits:
            warnings.warn(f"merged decoding off: the merged copy of the {name} adapter needs {need / 2**30:.1f} GiB and "
                          f"the GPU has {free / 2**30:.1f} GiB free; decoding runs the LoRA branches (about 2x per "
                          "token on an H100). Set model.decode_merged = True to build it anyway.", RuntimeWarning,
                          stacklevel=3)
        self.fit_verdict = fits
        return fits

    @contextlib.contextmanager
    def merged(self, name: str = "generate"):
        """Run inside the block with adapter `name` folded into the base weights and no LoRA branch.

        The outputs equal running the adapter (up to float rounding of W + BA), at the base
        model's cost per token: each LoRA layer runs one matmul instead of three plus the
        adapter bookkeeping. The merged weights are computed once and cached (one extra copy of
        the adapted layers' weights), rebuilt when the adapter or base weights change (e.g.
        after an optimizer step), and swapped in and out by reference, so the base weights are
        never modified and the other adapter is unaffected. Inference only.
        """
        check_adapter(name)
        layers, weights = self.merged_weights(name)
        bases = [m.get_base_layer() for m in layers]
        originals = [b.weight.data for b in bases]
        slots = self.lora_slots(layers)
        try:
            for b, w in zip(bases, weights):
                b.weight.data = w
            # The LoRA wrappers leave the graph for the block: each parent holds its plain base
            # nn.Linear (merged weight), so a decoded token pays no per-layer adapter bookkeeping,
            # and no adapter code runs at all (so no PEFT disable_adapter: entering and leaving it
            # walks every layer and resets every adapter parameter, 42 ms per call on SmolLM2's
            # CPU and 45-50 ms on the H100 with Qwen2.5-1.5B, per reply).
            try:
                for parent, attr, _, base in slots:
                    setattr(parent, attr, base)
                yield
            finally:
                for parent, attr, lora, _ in slots:
                    setattr(parent, attr, lora)
        finally:
            for b, w in zip(bases, originals):
                b.weight.data = w

    def lora_slots(self, layers: list) -> list:
        """(parent module, attribute, LoRA wrapper, its base layer) for each of `layers`, cached."""
        ids = [id(m) for m in layers]
        if self._slots is not None and self._slots[0] == ids:
            return self._slots[1]
        want = set(ids)
        slots = []
        for parent in self.peft_model.modules():
            for attr, child in parent.named_children():
                if id(child) in want:
                    slots.append((parent, attr, child, child.get_base_layer()))
        self._slots = (ids, slots)
        return slots


__all__ = ["ADAPTERS", "LoraAdapters", "check_adapter", "lora_config", "quiet_peft"]
