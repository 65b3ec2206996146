"""`RheaConfig`: plain data with the paper's defaults, validated at construction."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from rhea.errors import RheaConfigError

CONFIG_NAME = "rhea_config.json"


def check_thresholds(tau_low: float, tau_high: float) -> None:
    """HCR's thresholds must be ordered: a turn scoring above tau_high is raw, below tau_low dropped.

    >>> check_thresholds(0.9, 0.8)
    Traceback (most recent call last):
    ...
    rhea.errors.RheaConfigError: tau_low=0.9 must be <= tau_high=0.8
    """
    if not tau_low <= tau_high:
        raise RheaConfigError(f"tau_low={tau_low} must be <= tau_high={tau_high}")


@dataclass
class RheaConfig:
    """Hyper-parameters of a Rhea model (defaults follow the paper).

    >>> RheaConfig(n_mem=8).tau_high
    0.8
    >>> RheaConfig(tau_low=0.9, tau_high=0.8)
    Traceback (most recent call last):
    ...
    rhea.errors.RheaConfigError: tau_low=0.9 must be <= tau_high=0.8
    """

    #: latent vectors per compressed reply (`<mem>` read-out slots)
    n_mem: int = 8
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    #: PEFT target modules: "all-linear" or a list of module names
    target_modules: str | list[str] = "all-linear"
    #: HCR thresholds: score < tau_low → drop, > tau_high → raw text, else latent
    tau_low: float = 0.5
    tau_high: float = 0.8
    #: additive attention bias on the instruction-prefix keys (0 = plain causal attention)
    anchor_bias: float = 0.0
    #: subtract this mean latent before cosine scoring (None = raw cosine, the paper's rule); `rhea calibrate` fits it
    latent_center: list[float] | None = None
    #: "fixed" (default: subtract latent_center when set, else raw cosine), "running" (subtract the running mean of
    #: the session's latents; no calibration needed) or "none" (raw cosine, the paper's rule, even with a centre)
    latent_centering: str = "fixed"
    #: id or local path of the base model; model-zoo names (e.g. "smollm2-135m") work too
    base_model: str | None = None
    #: recorded at save time so loading onto a different base fails clearly
    base_hidden_size: int | None = None
    base_vocab_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise RheaConfigError(msg)

        need(isinstance(self.n_mem, int) and 1 <= self.n_mem <= 512,
             f"n_mem={self.n_mem!r} must be an int in [1, 512]")
        need(isinstance(self.lora_r, int) and self.lora_r >= 1, f"lora_r={self.lora_r!r} must be an int >= 1")
        need(self.lora_alpha > 0, f"lora_alpha={self.lora_alpha!r} must be > 0")
        need(0.0 <= self.lora_dropout < 1.0, f"lora_dropout={self.lora_dropout!r} must be in [0, 1)")
        need(isinstance(self.target_modules, (str, list)) and len(self.target_modules) > 0,
             f"target_modules={self.target_modules!r} must be 'all-linear' or a non-empty list of module names")
        for name in ("tau_low", "tau_high"):
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and -1.0 <= v <= 1.0,
                 f"{name}={v!r} must be a cosine threshold in [-1, 1]")
        check_thresholds(self.tau_low, self.tau_high)
        need(isinstance(self.anchor_bias, (int, float)) and self.anchor_bias >= 0.0,
             f"anchor_bias={self.anchor_bias!r} must be a float >= 0")
        need(self.latent_centering in ("fixed", "running", "none"),
             f"latent_centering={self.latent_centering!r} must be 'fixed', 'running' or 'none'")
        if self.latent_center is not None:
            need(isinstance(self.latent_center, list) and len(self.latent_center) > 0,
                 "latent_center must be None or a non-empty list of floats (one per hidden unit)")

    # --- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RheaConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RheaConfigError(f"unknown RheaConfig field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**data)

    def save(self, directory: str | os.PathLike) -> str:
        path = os.path.join(directory, CONFIG_NAME)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "RheaConfig":
        path = os.path.join(directory, CONFIG_NAME)
        if not os.path.isfile(path):
            raise RheaConfigError(f"{path} not found: is {directory!s} a directory written by RheaForCausalLM.save_pretrained?")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise RheaConfigError(f"{path} is not valid JSON ({e}); re-save the model or restore the file") from e
        if not isinstance(data, dict):
            raise RheaConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)
