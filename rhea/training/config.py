"""`TrainConfig`: YAML mapped onto dataclasses; defaults follow the paper.

>>> cfg = TrainConfig.from_dict({"data": {"path": "chats.jsonl"}, "optim": {"lr": 2e-5}})
>>> cfg.optim.lr, cfg.optim.grad_accum, cfg.optim.epochs
(2e-05, 128, 2)
>>> TrainConfig.from_dict({"optim": {"learning_rate": 1e-5}})
Traceback (most recent call last):
...
rhea.training.errors.TrainConfigError: unknown key(s) ['learning_rate'] in section 'optim'; known keys: ['cooldown_steps', 'epochs', 'grad_accum', 'lr', 'max_grad_norm', 'max_nonfinite_steps', 'max_steps', 'schedule', 'warmup_ratio', 'warmup_steps', 'weight_decay']
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rhea.training.errors import TrainConfigError


@dataclass
class ModelSection:
    #: model-zoo name, local path or cached hub id of the base model
    base_model: str = "smollm2-135m"
    #: continue from a directory written by save_pretrained (adapters + <mem> slots) instead of fresh adapters
    init_from: str | None = None
    #: with init_from: give the loaded directory this config's n_mem (new <mem> slots start as copies of the trained
    #: ones) and grow its compress LoRA to lora_r (trained directions kept, new ones start at zero, alpha/r kept);
    #: false: the directory's own n_mem and ranks are used and n_mem/lora_r/lora_alpha here are ignored
    init_resize: bool = False
    #: latent vectors per compressed reply
    n_mem: int = 8
    #: LoRA rank of both adapters
    lora_r: int = 16
    #: LoRA scaling numerator (scale = alpha / r)
    lora_alpha: int = 32
    #: dropout on the LoRA input
    lora_dropout: float = 0.05
    #: PEFT target modules: "all-linear" or a list such as [q_proj, k_proj, v_proj, o_proj]
    target_modules: Any = "all-linear"
    #: how latents enter the generate pass: "raw", "norm", "projector", "deep" or "states" (RheaConfig.latent_injection)
    latent_injection: str = "raw"


@dataclass
class DataSection:
    #: JSONL file (OpenAI messages / ShareGPT conversations / UltraChat data) or a datasets directory
    path: str | None = None
    #: "conversations" (joint compress/generate samples) or "trajectories" (Sculptor {"messages", "loss_mask"})
    kind: str = "conversations"
    #: share of past replies kept as raw text (the rest are latents or dropped)
    tier_raw: float = 0.2
    #: share of past turns dropped entirely, as HCR's DROP tier does at inference
    tier_drop: float = 0.1
    #: samples longer than this (tokens) are skipped and reported, never truncated
    max_length: int = 2048
    #: replies longer than this (tokens) cannot be compressed: their samples are skipped and reported
    max_compress_length: int = 512
    #: first turn index that becomes a sample (1 = only turns with history)
    min_turn: int = 0
    #: samples per micro-batch (per process)
    batch_size: int = 1
    #: seed of the tier draws and the per-epoch shuffle
    seed: int = 0


@dataclass
class OptimSection:
    #: AdamW learning rate (the paper: 1e-5)
    lr: float = 1e-5
    #: AdamW weight decay
    weight_decay: float = 0.0
    #: share of optimizer steps spent in linear warm-up before the decay (optim.warmup_steps, when set, wins)
    warmup_ratio: float = 0.03
    #: warm-up length in optimizer steps instead of a share (null = optim.warmup_ratio)
    warmup_steps: int | None = None
    #: "cosine" (warm-up from 0, then cosine decay to 0 at the last step, the paper's) or "constant" (linear
    #: warm-up reaching the full rate at step warmup_steps, then constant; see rhea.training.schedule)
    schedule: str = "cosine"
    #: with schedule "constant": the rate falls linearly to 0 over the last N optimizer steps (0 = no fall)
    cooldown_steps: int = 0
    #: micro-batches per optimizer step
    grad_accum: int = 128
    #: passes over the samples (the paper: 2); null = as many as optim.max_steps needs
    epochs: int | None = 2
    #: stop after this many optimizer steps (None = run all epochs)
    max_steps: int | None = None
    #: gradient clipping by global norm (None = off)
    max_grad_norm: float | None = 1.0
    #: an optimizer step whose gradient norm is not finite is skipped (weights and AdamW state untouched; under fp16
    #: the loss scaler does this instead); this many in a row stop the run with NonFiniteTrainingError (0 = never)
    max_nonfinite_steps: int = 10


@dataclass
class RunSection:
    #: where checkpoints, logs and the final save_pretrained directory go
    output_dir: str = "rhea-train"
    #: "no" (fp32), "bf16" or "fp16" (accelerate mixed precision)
    mixed_precision: str = "no"
    #: recompute activations in backward (less memory, ~30% slower)
    gradient_checkpointing: bool = False
    #: write a resumable checkpoint every N optimizer steps (0 = only at the end)
    save_every: int = 50
    #: keep only the newest N checkpoints (0 = keep all)
    keep_checkpoints: int = 2
    #: log metrics every N optimizer steps
    log_every: int = 1
    #: accelerate trackers: "tensorboard", "wandb", "all" or "none"
    log_with: str = "tensorboard"
    #: seed of torch/numpy/python RNGs (dropout)
    seed: int = 0
    #: "latest" (newest checkpoint in output_dir), a checkpoint directory, or None (fresh run)
    resume_from: str | None = None
    #: weight of the ICAE-style auto-encoding loss (reconstruct each compressed reply from its latents); 0 = off
    autoencode_weight: float = 0.0
    #: weight of the contrastive retrieval loss (reply latents vs needing/unrelated query latents, InfoNCE); 0 = off
    contrastive_weight: float = 0.0
    #: softmax temperature of the contrastive loss over max-cosine scores
    contrastive_temperature: float = 0.05
    #: (reply, needing query, unrelated query) triples drawn per micro-batch (in-batch negatives)
    contrastive_per_step: int = 8
    #: subtract the draw's mean latent before cosine in the contrastive loss (matches centred scoring)
    contrastive_center: bool = True
    #: JSONL of triples (reply, query, unrelated); None = 2000 generated from rhea.calibration.data's train split
    contrastive_triples: str | None = None
    #: torch CPU threads (None = torch's default); 1 keeps a background run from starving the machine
    num_threads: int | None = None
    #: run on CPU even where an accelerator is present
    cpu: bool = False
    #: TF32 matrix products on a CUDA GPU (fp32 weights, 10-bit mantissa inputs to the tensor cores); ignored elsewhere
    tf32: bool = False
    #: stop cleanly after this many minutes of training (a checkpoint and final/ written; resume_from "latest" continues)
    max_minutes: float | None = None
    #: what one step trains: "joint" (compress + generate on conversations, the paper's) or "compressor" (auto-encode
    #: chunks of real replies through frozen-decoder latents, optionally mixed with fact-QA; section compressor)
    stage: str = "joint"


@dataclass
class CompressorSection:
    """Settings of the compressor stage (``run.stage: compressor``, `rhea.training.compressor_stage`)."""

    #: tokens per training text (and per held-apart eval text)
    chunk_tokens: int = 48
    #: start a training text every N tokens of a reply (N < chunk_tokens: overlapping windows); null = chunk_tokens
    chunk_stride: int | None = None
    #: JSONL files of the model's own replies (scripts/generate_replies.py), added to the training texts only
    self_replies: list = field(default_factory=list)
    #: also train the generate adapter (false: the decoder stays frozen, ICAE-style, so the loss falls only through
    #: what the latents carry)
    train_generate: bool = False
    #: share of each batch that is fact-QA through the latents instead of auto-encoding (0 = auto-encoding only)
    qa_share: float = 0.0
    #: bAbI en 1k folder adding its stories' questions to the fact-QA items (null = cloze questions only)
    babi: str | None = None
    #: bAbI task numbers (default: the single-fact lookups)
    babi_tasks: list = field(default_factory=lambda: [1, 4, 5, 11, 12, 13])
    #: weight each reconstructed token by its loss under another chunk's latents, mixed in at this share (0 = plain)
    content_weight: float = 0.0
    #: measure held-apart reconstruction (and fact-QA) every N optimizer steps into OUTPUT_DIR/curve.jsonl (0 = never)
    eval_every: int = 50
    #: held-apart chunks measured at each eval
    eval_n: int = 48
    #: held-apart fact-QA items measured at each eval
    qa_eval_n: int = 32


@dataclass
class TrainConfig:
    """Every setting of `rhea train`, grouped as in the YAML file (sections model/data/optim/run)."""

    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    run: RunSection = field(default_factory=RunSection)
    compressor: CompressorSection = field(default_factory=CompressorSection)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise TrainConfigError(msg)

        d, o, r = self.data, self.optim, self.run
        m = self.model
        need((isinstance(m.base_model, str) and m.base_model.strip() != "") or (m.base_model is None and m.init_from),
             f"model.base_model={m.base_model!r} must name a base model: a model-zoo name, a local path or a hub id")
        from rhea.errors import RheaConfigError
        from rhea.modeling.config import RheaConfig

        try:  # the adapters' settings, as the RheaConfig the run builds will check them, before any model loads
            RheaConfig(n_mem=m.n_mem, lora_r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                       target_modules=m.target_modules, latent_injection=m.latent_injection)
        except RheaConfigError as e:
            raise TrainConfigError(f"model.{e}") from None
        for name in ("grad_accum", "epochs", "max_steps", "save_every"):
            v = getattr(o, name, None) if hasattr(o, name) else getattr(r, name, None)
            need(not isinstance(v, int) or v <= 2 ** 31 - 1,
                 f"{name}={str(v)[:20]}... is too large; pass at most {2 ** 31 - 1:,}")
        need(d.kind in ("conversations", "trajectories"), f"data.kind={d.kind!r} must be 'conversations' or 'trajectories'")
        need(0 <= d.tier_raw <= 1 and 0 <= d.tier_drop <= 1 and d.tier_raw + d.tier_drop <= 1,
             f"data.tier_raw={d.tier_raw} and data.tier_drop={d.tier_drop} must be in [0, 1] with sum <= 1")
        need(d.max_length > 0 and d.max_compress_length > 0 and d.batch_size >= 1 and d.min_turn >= 0,
             "data.max_length, data.max_compress_length and data.batch_size must be >= 1, data.min_turn >= 0")
        need(o.lr > 0, f"optim.lr={o.lr} must be > 0")
        need(0 <= o.warmup_ratio < 1, f"optim.warmup_ratio={o.warmup_ratio} must be in [0, 1)")
        need(isinstance(o.grad_accum, int) and o.grad_accum >= 1, f"optim.grad_accum={o.grad_accum!r} must be an int >= 1")
        need(isinstance(o.max_nonfinite_steps, int) and not isinstance(o.max_nonfinite_steps, bool)
             and o.max_nonfinite_steps >= 0,
             f"optim.max_nonfinite_steps={o.max_nonfinite_steps!r} must be an int >= 0 (0: never stop)")
        need(o.epochs is None or (isinstance(o.epochs, int) and o.epochs >= 1),
             f"optim.epochs={o.epochs!r} must be an int >= 1, or null to run until optim.max_steps")
        need(o.max_steps is None or o.max_steps >= 1, f"optim.max_steps={o.max_steps} must be None or >= 1")
        need(o.epochs is not None or o.max_steps is not None,
             "optim.epochs is null (run until optim.max_steps) but optim.max_steps is not set; set one of them")
        need(o.schedule in ("cosine", "constant"), f"optim.schedule={o.schedule!r} must be 'cosine' or 'constant'")
        need(o.warmup_steps is None or o.warmup_steps >= 0, f"optim.warmup_steps={o.warmup_steps} must be >= 0 or null")
        need(o.cooldown_steps >= 0, f"optim.cooldown_steps={o.cooldown_steps} must be >= 0")
        need(o.cooldown_steps == 0 or o.schedule == "constant",
             f"optim.cooldown_steps={o.cooldown_steps} applies to optim.schedule 'constant' (the cosine schedule "
             "already decays to 0); set optim.schedule: constant or optim.cooldown_steps: 0")
        need(o.cooldown_steps == 0 or (o.max_steps is not None and o.cooldown_steps <= o.max_steps),
             f"optim.cooldown_steps={o.cooldown_steps} needs optim.max_steps >= it (the fall ends at optim.max_steps)")
        need(r.max_minutes is None or r.max_minutes > 0, f"run.max_minutes={r.max_minutes} must be > 0 or null")
        need(r.stage in ("joint", "compressor"), f"run.stage={r.stage!r} must be 'joint' or 'compressor'")
        if r.stage == "compressor":
            self._validate_compressor()
        need(r.mixed_precision in ("no", "bf16", "fp16"), f"run.mixed_precision={r.mixed_precision!r} must be 'no', 'bf16' or 'fp16'")
        need(r.log_with in ("tensorboard", "wandb", "all", "none"), f"run.log_with={r.log_with!r} must be tensorboard, wandb, all or none")
        need(r.save_every >= 0 and r.log_every >= 1 and r.keep_checkpoints >= 0, "run.save_every/keep_checkpoints must be >= 0, run.log_every >= 1")
        need(r.autoencode_weight >= 0, f"run.autoencode_weight={r.autoencode_weight} must be >= 0")
        need(r.contrastive_weight >= 0, f"run.contrastive_weight={r.contrastive_weight} must be >= 0")
        need(r.contrastive_temperature > 0, f"run.contrastive_temperature={r.contrastive_temperature} must be > 0")
        need(isinstance(r.contrastive_per_step, int) and r.contrastive_per_step >= 2,
             f"run.contrastive_per_step={r.contrastive_per_step!r} must be an int >= 2 (in-batch negatives)")

    def _validate_compressor(self) -> None:
        """The rules of ``run.stage: compressor`` (checked before any model loads)."""
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise TrainConfigError(msg)

        c, d, r = self.compressor, self.data, self.run
        need(r.autoencode_weight == 0 and r.contrastive_weight == 0,
             "run.autoencode_weight and run.contrastive_weight add losses to the joint stage; the compressor stage "
             "auto-encodes by itself (compressor.qa_share mixes in fact-QA): set them to 0 or use run.stage: joint")
        need(d.kind == "conversations", "data.kind is for the joint stage; the compressor stage reads data.path as a "
             "directory in the shared/data layout (leave data.kind at 'conversations')")
        need(d.batch_size >= 1, f"data.batch_size={d.batch_size} must be >= 1")
        need(c.chunk_tokens >= 1, f"compressor.chunk_tokens={c.chunk_tokens} must be >= 1")
        need(c.chunk_stride is None or c.chunk_stride >= 1, f"compressor.chunk_stride={c.chunk_stride} must be >= 1 or null")
        need(0.0 <= c.qa_share <= 1.0, f"compressor.qa_share={c.qa_share} must be in [0, 1]")
        n_qa = round(d.batch_size * c.qa_share)
        need(c.qa_share == 0 or n_qa > 0, f"compressor.qa_share={c.qa_share} x data.batch_size={d.batch_size} rounds "
             "to no fact-QA item per step; raise either")
        need(0.0 <= c.content_weight <= 1.0, f"compressor.content_weight={c.content_weight} must be in [0, 1]")
        need(c.content_weight == 0 or d.batch_size - n_qa >= 2,
             "compressor.content_weight needs at least 2 reconstruction rows per step (the control is another row's "
             "latents); raise data.batch_size or lower compressor.qa_share")
        need(c.eval_every >= 0 and c.eval_n >= 1 and c.qa_eval_n >= 2,
             f"compressor.eval_every={c.eval_every} must be >= 0, compressor.eval_n={c.eval_n} >= 1 and "
             f"compressor.qa_eval_n={c.qa_eval_n} >= 2")
        need(isinstance(c.self_replies, list) and all(isinstance(x, str) for x in c.self_replies),
             f"compressor.self_replies={c.self_replies!r} must be a list of file paths")
        need(isinstance(c.babi_tasks, list) and c.babi_tasks and all(isinstance(t, int) and not isinstance(t, bool)
                                                                      for t in c.babi_tasks),
             f"compressor.babi_tasks={c.babi_tasks!r} must be a non-empty list of bAbI task numbers, e.g. [1, 4, 5]")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        if not isinstance(data, dict):
            raise TrainConfigError(f"a training config must be a mapping of sections, got {type(data).__name__}")
        sections = {f.name: f.default_factory for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise TrainConfigError(f"unknown section(s) {unknown}; known sections: {sorted(sections)}")
        built = {}
        for name, factory in sections.items():
            values = data.get(name) or {}
            if not isinstance(values, dict):
                raise TrainConfigError(f"section {name!r} must be a mapping, got {type(values).__name__}")
            known = {f.name for f in dataclasses.fields(factory)}
            bad = sorted(set(values) - known)
            if bad:
                raise TrainConfigError(f"unknown key(s) {bad} in section {name!r}; known keys: {sorted(known)}")
            for f in dataclasses.fields(factory):
                if f.name in values:
                    _check_kind(name, f, values[f.name])
            built[name] = factory(**values)
        return cls(**built)

    @classmethod
    def from_yaml(cls, path: str) -> "TrainConfig":
        import yaml

        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        except FileNotFoundError as e:
            raise TrainConfigError(f"config file {path} not found") from e
        except IsADirectoryError as e:
            raise TrainConfigError(f"config file {path} is a directory; pass the YAML file") from e
        except UnicodeDecodeError as e:
            from rhea.storage import not_utf8

            raise TrainConfigError(not_utf8(path, e)) from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise TrainConfigError(f"{path} is not valid YAML{where} ({getattr(e, 'problem', None) or type(e).__name__}); "
                                   "write sections model/data/optim/run of plain 'key: value' lines") from None
        except RecursionError:
            raise TrainConfigError(f"{path} nests lists or mappings too deeply to read; write the sections "
                                   "model/data/optim/run as plain 'key: value' lines") from None
        except ValueError as e:  # an integer of more digits than Python converts
            raise TrainConfigError(f"{path} holds a value that cannot be read ({e}); use numbers of ordinary size") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_KINDS = {"bool": ({bool}, "true or false"), "int": ({int}, "an integer"), "float": ({int, float}, "a number"),
          "str": ({str}, "a string"), "None": ({type(None)}, "null")}


def _check_kind(section: str, f: dataclasses.Field, value: Any) -> None:
    """Refuse a value of another kind than the key's annotation takes (a word for a number, a number for a
    name), so the range checks and the trainer never compare a string with a number."""
    names = [n.strip() for n in str(f.type).split("|")]
    if not all(n in _KINDS for n in names):
        return  # Any, lists, mappings: checked by the section's own rules
    allowed = set().union(*(_KINDS[n][0] for n in names))
    if type(value) in allowed:
        return
    default = f.default if f.default is not dataclasses.MISSING else None
    want = " or ".join(_KINDS[n][1] for n in names)
    raise TrainConfigError(f"{section}.{f.name}={value!r} must be {want} (default {default!r}); write e.g. "
                           f"`{section}: {{{f.name}: {default!r}}}` in the YAML, or --set {section}.{f.name}=VALUE")


def _field_docs(cls) -> dict[str, str]:
    """The ``#:`` comment lines above each field of `cls` (the single place a key is documented)."""
    import inspect

    docs, pending = {}, []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
        elif ":" in stripped and not stripped.startswith(("class", "def", "@", '"')):
            docs[stripped.split(":")[0]] = " ".join(pending)
            pending = []
    return docs


def field_lines(cls) -> str:
    """Every key of a config dataclass with its default and ``#:`` comment, one indented line each (for --help)."""
    docs = _field_docs(cls)
    lines = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        lines.append(f"  {f.name}: {default!r}" + (f"  # {docs[f.name]}" if docs.get(f.name) else ""))
    return "\n".join(lines)


def describe_fields() -> str:
    """Every config key with its default and meaning, for ``rhea train --help``."""
    return "\n".join(f"{section.name}:\n{field_lines(section.default_factory)}" for section in dataclasses.fields(TrainConfig))
