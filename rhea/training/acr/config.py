"""`TGSEConfig`: every setting of the TGSE loop (the YAML keys of ``rhea train-acr --config``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rhea.agents.acr.errors import ACRConfigError
from rhea.training.acr.rewards import REWARDS

POOLS = ("corrective", "compressive", "regularization")


@dataclass
class TGSEConfig:
    """Every TGSE setting (YAML keys of ``rhea train-acr --config``)."""

    #: where state.json, pools/, adapters/ and best/ go
    output_dir: str = "acr-tgse"
    #: base model of the controller (model-zoo name, local path or cached hub id)
    base_model: str = "smollm2-135m"
    #: iterations in all (iteration 0 is Phase I)
    iterations: int = 4
    #: iterations 1..N are Phase II (teacher refactorer with probability p_teacher); later ones Phase III
    phase2_iterations: int = 2
    #: tasks drawn (unused ones only) in Phase I
    seed_tasks: int = 12
    #: tasks drawn per Phase II/III iteration
    tasks_per_iteration: int = 8
    #: reward margin: corrective needs r_ref - r_raw >= delta, regularization r_raw - r_ref >= delta
    delta: float = 0.5
    #: compressive instances must cut the context's text tokens by at least this share
    min_token_saving: float = 0.3
    #: mix of the pools in each iteration's training set (normalised)
    pool_ratios: dict = field(default_factory=lambda: {"corrective": 0.5, "compressive": 0.3, "regularization": 0.2})
    #: at most this many router (and refactorer) training instances per iteration
    max_train_instances: int = 64
    #: teacher-refactorer probability in the first Phase II iteration
    p_teacher_start: float = 1.0
    #: multiplied into p_teacher after every Phase II iteration
    p_teacher_decay: float = 0.5
    #: floor of p_teacher in Phase II (Phase III is always 0)
    p_teacher_min: float = 0.0
    #: share of instances held out (by instance id) for the per-module validation loss (once a module has >= 5)
    val_fraction: float = 0.2
    #: iterations without validation improvement before a module stops training
    patience: int = 2
    #: passes over the training mix per iteration
    epochs: int = 2
    #: AdamW learning rate of the adapters
    lr: float = 2e-4
    #: LoRA rank / alpha of both adapters
    lora_r: int = 8
    lora_alpha: int = 16
    #: SFT samples longer than this (tokens) are skipped and reported
    max_length: int = 2048
    #: reward of the hindsight verification: exact_match or value_match
    reward: str = "exact_match"
    #: generation budgets
    router_max_new_tokens: int = 64
    refactor_max_new_tokens: int = 96
    solver_max_new_tokens: int = 16
    #: seed of task order, teacher draws and training
    seed: int = 0

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ACRConfigError(msg)

        for name in ("iterations", "seed_tasks", "tasks_per_iteration", "max_train_instances", "epochs", "patience",
                     "lora_r", "lora_alpha", "max_length", "router_max_new_tokens", "refactor_max_new_tokens",
                     "solver_max_new_tokens"):
            value = getattr(self, name)
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 1, f"{name}={value!r} must be an int >= 1")
        need(isinstance(self.phase2_iterations, int) and self.phase2_iterations >= 0,
             f"phase2_iterations={self.phase2_iterations!r} must be an int >= 0")
        need(0 < self.delta <= 1, f"delta={self.delta} must be in (0, 1]")
        need(0 <= self.min_token_saving < 1, f"min_token_saving={self.min_token_saving} must be in [0, 1)")
        need(isinstance(self.pool_ratios, dict) and set(self.pool_ratios) <= set(POOLS)
             and all(isinstance(v, (int, float)) and v >= 0 for v in self.pool_ratios.values())
             and sum(self.pool_ratios.values()) > 0,
             f"pool_ratios={self.pool_ratios!r} must map some of {POOLS} to non-negative weights with a positive sum")
        need(0 <= self.p_teacher_min <= self.p_teacher_start <= 1 and 0 <= self.p_teacher_decay <= 1,
             "p_teacher_min <= p_teacher_start must lie in [0, 1] and p_teacher_decay in [0, 1]")
        need(0 <= self.val_fraction < 1, f"val_fraction={self.val_fraction} must be in [0, 1)")
        need(self.lr > 0, f"lr={self.lr} must be > 0")
        need(self.reward in REWARDS, f"reward={self.reward!r} must be one of {REWARDS}")

    def phase(self, iteration: int) -> str:
        return "I" if iteration == 0 else "II" if iteration <= self.phase2_iterations else "III"

    def p_teacher(self, iteration: int) -> float:
        """Probability that the teacher refactors in `iteration` (1 in Phase I, 0 in Phase III)."""
        phase = self.phase(iteration)
        if phase == "I":
            return 1.0
        if phase == "III":
            return 0.0
        return max(self.p_teacher_min, self.p_teacher_start * self.p_teacher_decay ** (iteration - 1))

    @classmethod
    def from_dict(cls, data: dict) -> "TGSEConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(data) - known)
        if bad:
            raise ACRConfigError(f"unknown TGSE key(s) {bad}; known keys: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_yaml(cls, path: str) -> "TGSEConfig":
        import yaml

        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_dict(yaml.safe_load(f) or {})
        except FileNotFoundError as e:
            raise ACRConfigError(f"config file {path} not found") from e

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
