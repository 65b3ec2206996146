"""`ACRController`: the router and refactorer as two named LoRA adapters on one base model.

Both adapters live on one PEFT model (``add_adapter``); switching between them is PEFT's
``set_adapter`` — the base weights are never reloaded or copied. ``generator("router")``
and ``generator("refactorer")`` are `TextGenerator`s on the same weights;
``generator(None)`` runs the base model with adapters disabled (the prompt-only mode).

>>> from rhea.testing import tiny_llama, tiny_tokenizer
>>> tok = tiny_tokenizer()
>>> ctrl = ACRController(tiny_llama(len(tok)), tok)
>>> sorted(ctrl.adapter_names)
['refactorer', 'router']
>>> with ctrl.adapter("refactorer"):
...     ctrl.active_adapter
'refactorer'
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from rhea.agents.acr.errors import ACRConfigError

ROUTER = "router"
REFACTORER = "refactorer"
ADAPTERS = (ROUTER, REFACTORER)


def _lora_config(r: int, alpha: int, dropout: float, target_modules):
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                      bias="none", task_type="CAUSAL_LM")


class ACRController:
    """One controller model carrying the ``router`` and ``refactorer`` LoRA adapters.

    model: a plain Hugging Face causal LM (not already wrapped by PEFT); tokenizer: its tokenizer.
    adapters_dir: a directory written by `save_adapters` to start from trained adapters.
    """

    def __init__(self, model, tokenizer, *, lora_r: int = 16, lora_alpha: int = 32, lora_dropout: float = 0.0,
                 target_modules="all-linear", adapters_dir: str | os.PathLike | None = None):
        from peft import PeftModel, get_peft_model

        if isinstance(model, PeftModel) or hasattr(model, "peft_model"):
            raise ACRConfigError(
                f"ACRController wraps a plain causal LM, got {type(model).__name__} (already carrying adapters); "
                "pass the base model, e.g. load_base_model('smollm2-135m')[0]"
            )
        if tokenizer is None:
            raise ACRConfigError("ACRController needs the model's tokenizer")
        self.tokenizer = tokenizer
        self.lora = {"r": lora_r, "alpha": lora_alpha, "dropout": lora_dropout, "target_modules": target_modules}
        cfg = _lora_config(lora_r, lora_alpha, lora_dropout, target_modules)
        from rhea.modeling.adapters import quiet_peft as _quiet_peft

        with _quiet_peft():
            self.peft_model = get_peft_model(model, cfg, adapter_name=ROUTER)
            self.peft_model.add_adapter(REFACTORER, _lora_config(lora_r, lora_alpha, lora_dropout, target_modules))
        self.peft_model.eval()
        if adapters_dir is not None:
            self.load_adapters(adapters_dir)

    # ------------------------------------------------------------------ adapters
    @property
    def adapter_names(self) -> list[str]:
        return list(self.peft_model.peft_config)

    @property
    def active_adapter(self) -> str:
        return self.peft_model.active_adapter

    def set_adapter(self, name: str) -> None:
        """Make `name` active (hot swap; only that adapter's weights become trainable)."""
        if name not in ADAPTERS:
            raise ACRConfigError(f"adapter {name!r} is not one of {ADAPTERS}")
        self.peft_model.set_adapter(name)

    @contextlib.contextmanager
    def adapter(self, name: str):
        """Run the block with adapter `name` active, then restore the previous one."""
        previous = self.active_adapter
        self.set_adapter(name)
        try:
            yield self
        finally:
            self.peft_model.set_adapter(previous)

    def disable_adapters(self):
        """Context manager: the plain base model (the prompt-only mode)."""
        return self.peft_model.disable_adapter()

    def adapter_parameters(self, name: str) -> list:
        """The LoRA parameters of adapter `name`."""
        if name not in ADAPTERS:
            raise ACRConfigError(f"adapter {name!r} is not one of {ADAPTERS}")
        return [p for n, p in self.peft_model.named_parameters() if f".{name}." in n and "lora_" in n]

    def generator(self, name: str | None, **kwargs):
        """A `TextGenerator` on adapter `name` (``None``: base model, adapters disabled)."""
        from rhea.backends.llm import HFGenerator

        if name is not None and name not in ADAPTERS:
            raise ACRConfigError(f"adapter {name!r} is not one of {ADAPTERS} (or None for the base model)")
        return HFGenerator(self, self.tokenizer, adapter=name, **kwargs)

    # ------------------------------------------------------------------ persistence
    def save_adapters(self, directory: str | os.PathLike, names=ADAPTERS) -> str:
        """Write ``directory/router`` and ``directory/refactorer`` (PEFT adapter folders)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            self.peft_model.save_pretrained(str(directory / "_tmp"), selected_adapters=[name])
            target = directory / name
            if target.exists():
                import shutil

                shutil.rmtree(target)
            # PEFT writes non-default adapters to a subfolder named after them
            src = directory / "_tmp" / name if (directory / "_tmp" / name).is_dir() else directory / "_tmp"
            src.rename(target)
            if (directory / "_tmp").exists():
                import shutil

                shutil.rmtree(directory / "_tmp")
        return str(directory)

    def load_adapters(self, directory: str | os.PathLike, names=ADAPTERS) -> None:
        """Replace the weights of the named adapters with those saved in `directory` (base untouched)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        for name in names:
            path = Path(directory) / name / "adapter_model.safetensors"
            if not path.is_file():
                raise ACRConfigError(f"{path} not found; write it with ACRController.save_adapters({str(directory)!r})")
            result = set_peft_model_state_dict(self.peft_model, load_file(str(path)), adapter_name=name)
            unexpected = getattr(result, "unexpected_keys", [])
            if unexpected:
                raise ACRConfigError(f"{path} does not fit this controller (unexpected {unexpected[:3]}); "
                                     "it was saved from another base model or LoRA config")
        self.peft_model.eval()
