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

    # Defaults are the paper's settings (appendix A.1, A.3, B.3); `cpu_demo()` is the small
    # configuration the tests and the CPU benchmark run. docs/reports/fidelity.md (## ACR) maps each key
    # to the paper.
    #: where state.json, pools/, adapters/ and best/ go
    output_dir: str = "acr-tgse"
    #: base model of the controller (model-zoo name, local path or cached hub id)
    base_model: str = "smollm2-135m"
    #: iterations in all (iteration 0 is Phase I); paper: 18 rounds (A.1)
    iterations: int = 18
    #: iterations 1..N are Phase II (teacher refactorer with probability p_teacher); later ones Phase III.
    #: paper (B.3): only the first evolution iteration is hybrid (student router, teacher refactorer)
    phase2_iterations: int = 1
    #: tasks drawn (unused ones only) in Phase I; paper: a cold-start set of 400 (A.1)
    seed_tasks: int = 400
    #: tasks drawn per Phase II/III iteration; paper: 200 (A.1)
    tasks_per_iteration: int = 200
    #: Algorithm 1's reward margin: corrective needs R(H^) >= R(H) + delta, compressive |R(H^) - R(H)| < delta.
    #: paper (A.3): 0.001; with 0/1 rewards every delta in (0, 1] gives the same pools
    delta: float = 0.001
    #: compressive instances must cut the context's text tokens by at least this share (Algorithm 1's |H^| << |H|;
    #: the paper gives no number)
    min_token_saving: float = 0.3
    #: mix of the pools in each iteration's training set (normalised); the paper leaves the ratios unspecified (A.3)
    pool_ratios: dict = field(default_factory=lambda: {"corrective": 0.5, "compressive": 0.3, "regularization": 0.2})
    #: loss weight of corrective instances relative to the others (§4.3: "a higher loss weight"; no number given)
    corrective_weight: float = 2.0
    #: at most this many router (and refactorer) training instances per iteration
    max_train_instances: int = 4000
    #: teacher-refactorer probability in the first Phase II iteration (B.3: the teacher refactors in iteration 1)
    p_teacher_start: float = 1.0
    #: multiplied into p_teacher after every Phase II iteration (Algorithm 1 anneals it; schedule unspecified)
    p_teacher_decay: float = 0.5
    #: floor of p_teacher in Phase II (Phase III is always 0)
    p_teacher_min: float = 0.0
    #: ask the teacher router when the student picks none (or breaks the contract) on a task the solver fails.
    #: Not in the paper (off by default); it helps a student too weak to ever intervene
    teacher_router_fallback: bool = False
    #: share of instances held out (by instance id) for the per-module validation loss (once a module has >= 5)
    val_fraction: float = 0.2
    #: iterations without validation improvement (by more than min_delta) before a module stops; paper: 3 (A.3)
    patience: int = 3
    #: smallest validation-loss improvement that counts; paper: 0.001 (A.3)
    min_delta: float = 0.001
    #: passes over the training mix per iteration; paper: 3 (A.3)
    epochs: int = 3
    #: SFT batch size; paper: 4 per device (A.3)
    batch_size: int = 4
    #: samples per forward/backward pass; the optimizer still steps once per ``batch_size`` samples
    #: (gradient accumulation, the same gradient). 0 = the whole batch in one pass. 1 bounds memory:
    #: a 1.5B model in fp32 on a CPU needs it (a batch of 4 long router prompts ran out of 23 GB)
    micro_batch_size: int = 0
    #: AdamW learning rate of the adapters; paper: 2e-4 (A.3)
    lr: float = 2e-4
    #: LoRA rank / alpha of both adapters; paper: r=16, alpha=32 (A.3)
    lora_r: int = 16
    lora_alpha: int = 32
    #: SFT samples longer than this (tokens) are skipped and reported
    max_length: int = 8192
    #: reward of the hindsight verification: exact_match (the paper's EM) or value_match
    reward: str = "exact_match"
    #: decoding temperature of the router, refactorer and teacher during rollouts; paper: 0.7 (A.3)
    temperature: float = 0.7
    #: decoding temperature of the solver in the hindsight verification; paper: 0.7 (A.3, "unless otherwise specified")
    solver_temperature: float = 0.7
    #: generation budgets (caps: they bind only when a model does not stop). The paper caps every
    #: generation at 8192 tokens (A.3); set these to 8192 to match it. The defaults fit the JSON
    #: decision, a refactored dialogue history and a short QA answer, so a CPU run cannot stall on
    #: a model that rambles
    router_max_new_tokens: int = 256
    refactor_max_new_tokens: int = 1024
    solver_max_new_tokens: int = 64
    #: seed of task order, teacher draws, sampling and training
    seed: int = 0

    @classmethod
    def cpu_demo(cls, **overrides) -> "TGSEConfig":
        """The small configuration for CPU tests and demos (what `benchmarks/acr.py` runs on CPU):
        12 seed tasks, 8 per iteration, 4 iterations, r8/alpha16, 2 epochs, batch 1, patience 2,
        greedy decoding, short budgets, teacher router fallback on. `overrides` replace any key."""
        small = dict(iterations=4, phase2_iterations=2, seed_tasks=12, tasks_per_iteration=8, delta=0.5,
                     max_train_instances=64, teacher_router_fallback=True, patience=2, min_delta=1e-4, epochs=2,
                     batch_size=1, lora_r=8, lora_alpha=16, max_length=2048, temperature=0.0, solver_temperature=0.0,
                     router_max_new_tokens=64, refactor_max_new_tokens=96, solver_max_new_tokens=16)
        return cls(**{**small, **overrides})

    def __post_init__(self) -> None:
        try:
            self._validate()
        except TypeError as e:  # a key of the wrong type (a word where a number goes, null, ...)
            raise ACRConfigError(f"a TGSE key has the wrong type ({e}); `rhea train-acr --help` lists each key with "
                                 "its default, whose type it takes") from None

    def _validate(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ACRConfigError(msg)

        need(isinstance(self.output_dir, str) and self.output_dir.strip() != "",
             f"output_dir={self.output_dir!r} must be the path of a directory (a non-empty string)")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            need(not isinstance(v, int) or abs(v) <= 2 ** 31 - 1,
                 f"{f.name}={str(v)[:20]}... is too large; pass at most {2 ** 31 - 1:,}")

        for name in ("iterations", "seed_tasks", "tasks_per_iteration", "max_train_instances", "epochs", "patience", "batch_size",
                     "lora_r", "lora_alpha", "max_length", "router_max_new_tokens", "refactor_max_new_tokens",
                     "solver_max_new_tokens"):
            value = getattr(self, name)
            need(isinstance(value, int) and not isinstance(value, bool) and value >= 1, f"{name}={value!r} must be an int >= 1")
        need(isinstance(self.micro_batch_size, int) and not isinstance(self.micro_batch_size, bool)
             and self.micro_batch_size >= 0, f"micro_batch_size={self.micro_batch_size!r} must be an int >= 0 (0: whole batch)")
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
        need(self.min_delta >= 0, f"min_delta={self.min_delta} must be >= 0")
        need(self.corrective_weight > 0, f"corrective_weight={self.corrective_weight} must be > 0")
        for name in ("temperature", "solver_temperature"):
            need(0 <= getattr(self, name) <= 2, f"{name}={getattr(self, name)} must be in [0, 2]")
        need(isinstance(self.teacher_router_fallback, bool),
             f"teacher_router_fallback={self.teacher_router_fallback!r} must be true or false")
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
        return cls.from_dict(_read_yaml(path))

    @staticmethod
    def keys_in_yaml(path: str) -> set[str]:
        """The keys a YAML config sets (read after `from_yaml` has validated it)."""
        return set(_read_yaml(path))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _read_yaml(path: str) -> dict:
    """The mapping a TGSE YAML config holds, or an `ACRConfigError` saying why there is none: no file, a
    directory, not UTF-8, not YAML, or YAML that is not a mapping of keys."""
    import yaml

    from rhea.storage import read_text_file

    text = read_text_file(path, ACRConfigError, "config file")
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ACRConfigError(f"config file {path} nests lists or mappings too deeply to read; write one 'key: value' "
                             "per line") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise ACRConfigError(f"config file {path} holds a value that cannot be read ({e}); use numbers of ordinary "
                             "size") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ACRConfigError(f"config file {path} is not valid YAML{where} "
                             f"({getattr(e, 'problem', None) or type(e).__name__}); write one 'key: value' per line") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ACRConfigError(f"config file {path} holds a {type(data).__name__}, not a mapping; write one "
                             "'key: value' per line (keys: `rhea train-acr --help`)")
    return data
