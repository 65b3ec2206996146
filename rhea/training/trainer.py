"""`Trainer`: compress/generate LoRA training with accelerate, in one of two stages (``run.stage``).

``joint`` (the paper's): compress the history replies and train both adapters on the next reply.
``compressor``: auto-encode chunks of real replies through frozen-decoder latents, optionally mixed with
fact-QA (`rhea.training.compressor_stage`; the shipped compressors' recipe, ``configs/compressor-<model>.yaml``).

Works unchanged on one CPU, under ``torchrun``/``accelerate launch`` (DDP), and under FSDP2
(``configs/accelerate/fsdp.yaml``, also on CPU processes); the DeepSpeed configs are untested
(docs/guides/training.md says which paths are tested and how). Every ``save_every`` optimizer steps it
writes a checkpoint (trainable weights, optimizer, scheduler, RNG, data position) from which
``run.resume_from`` continues the same loss curve.

>>> from rhea.training import Trainer, TrainConfig
>>> cfg = TrainConfig.from_dict({"data": {"path": "chats.jsonl"}, "run": {"output_dir": "out"}})  # doctest: +SKIP
>>> result = Trainer(cfg).train()      # doctest: +SKIP
>>> result.final_dir                    # doctest: +SKIP
'out/final'
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch.utils.data import DataLoader

from rhea.training.config import TrainConfig
from rhea.training.data import SampleSet, TierMix, build_conversation_samples, build_trajectory_samples, collate
from rhea.training.errors import TrainConfigError
from rhea.training.formats import load_conversations, load_trajectories
from rhea.training.guard import SkipCounter, UpdateOutcome, advance_schedule
from rhea.training.losses import AuxiliaryLoss, ContrastiveRetrievalLoss, autoencode_loss
from rhea.training.recompute import enable_activation_checkpointing
from rhea.training.step import JointStep

CHECKPOINT_PREFIX = "checkpoint-"
PROGRESS_FILE = "progress.json"
TRAINABLE_FILE = "trainable.safetensors"
METRICS_FILE = "metrics.jsonl"
#: the run's settings (TrainConfig.to_dict), written at every start of `Trainer.train`
CONFIG_FILE = "config.json"


@dataclass
class TrainResult:
    """What a run did: per-step metrics, where it saved, how long it took."""

    history: list[dict] = field(default_factory=list)
    global_step: int = 0
    final_dir: str | None = None
    seconds: float = 0.0
    skipped: int = 0


def build_model(config: TrainConfig):
    """A fresh RheaForCausalLM on the configured base, or one continued from ``model.init_from``."""
    from rhea.modeling import RheaConfig, RheaForCausalLM, load_base_model

    m = config.model
    if m.init_from:
        model = RheaForCausalLM.from_pretrained(m.init_from, base_model=m.base_model)
        if m.init_resize:
            resize_capacity(model, n_mem=m.n_mem, compress_rank=m.lora_r, seed=config.run.seed, origin=m.init_from)
        return model
    base, tokenizer = load_base_model(m.base_model)
    rc = RheaConfig(n_mem=m.n_mem, lora_r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                    target_modules=m.target_modules, latent_injection=m.latent_injection)
    return RheaForCausalLM.from_base(base, tokenizer, rc)


def build_trained_model(config: TrainConfig):
    """`build_model` with the parameters the configured stage trains marked trainable (the compressor stage
    freezes the generate adapter), the model a checkpoint's trainable weights are loaded into."""
    model = build_model(config)
    if config.run.stage == "compressor":
        from rhea.training.compressor_stage import freeze_decoder

        freeze_decoder(model, train_generate=config.compressor.train_generate)
    return model


def resize_capacity(model, *, n_mem: int, compress_rank: int, seed: int = 0, origin: str = "the model") -> None:
    """A capacity warm start: `n_mem` `<mem>` slots (new ones start as copies of the trained ones) and the compress
    LoRA grown to `compress_rank` (trained directions kept, new ones zero, alpha/r kept). A smaller rank is a cut,
    which ``rhea shrink`` makes by truncated SVD: refused here with that advice."""
    if n_mem != model.n_mem:
        print(f"[rhea train] {origin} has n_mem {model.n_mem}; resizing its read-out slots to {n_mem}", flush=True)
        model.resize_mem_slots(n_mem)
    rank = model.lora_rank("compress")
    if compress_rank < rank:
        raise TrainConfigError(f"model.lora_r {compress_rank} is below the rank {rank} of {origin}'s compress adapter; "
                               "model.init_resize only grows it (cut it with `rhea shrink --compress-rank`, or set "
                               f"model.lora_r: {rank})")
    if compress_rank > rank:
        print(f"[rhea train] {origin} has a compress LoRA of rank {rank}; growing it to {compress_rank}", flush=True)
        model.resize_lora_rank("compress", compress_rank, seed=seed)


def build_samples(config: TrainConfig, model) -> SampleSet:
    """Training samples from ``data.path`` as the config describes."""
    d = config.data
    if not d.path:
        raise TrainConfigError("data.path is not set; point it at a JSONL file or a datasets directory")
    if d.kind == "trajectories":
        return build_trajectory_samples(load_trajectories(d.path), model.tokenizer, max_length=d.max_length)
    return build_conversation_samples(
        load_conversations(d.path), model.tokenizer, n_mem=model.n_mem, tiers=TierMix(d.tier_raw, d.tier_drop),
        max_length=d.max_length, max_compress_length=d.max_compress_length, min_turn=d.min_turn, seed=d.seed,
    )


def contrastive_loss_from_config(config: TrainConfig) -> ContrastiveRetrievalLoss:
    """The contrastive retrieval loss on ``run.contrastive_triples`` (or generated train-split triples)."""
    from rhea.calibration.data import read_triples_jsonl, triples

    r = config.run
    pool = read_triples_jsonl(r.contrastive_triples) if r.contrastive_triples else triples("train", 2000, seed=r.seed)
    return ContrastiveRetrievalLoss(pool, per_step=r.contrastive_per_step, temperature=r.contrastive_temperature,
                                    center=r.contrastive_center)


def preflight(config: TrainConfig, *, needs_data: bool = True) -> None:
    """Check what a run reads and writes before any model loads: ``data.path`` is a readable UTF-8 JSONL
    file (or a `datasets` directory; for the compressor stage a shared/data-layout directory, with its other
    inputs) and ``run.output_dir`` a directory that can be written."""
    from rhea.storage import StorageError, check_writable_directory, not_utf8

    try:
        check_writable_directory(config.run.output_dir, "run.output_dir")
    except StorageError as e:
        raise TrainConfigError(str(e)) from None
    if config.run.stage == "compressor":
        if needs_data:
            from rhea.training import compressor_stage

            compressor_stage.preflight(config)
        return
    path = config.data.path
    if not needs_data or path is None:
        return
    if not os.path.exists(path):
        raise TrainConfigError(f"data.path {path} does not exist; pass a JSONL file of conversations or a `datasets` "
                               "directory (saved with save_to_disk)")
    if os.path.isdir(path):
        if not any(os.path.isfile(os.path.join(path, n)) for n in ("dataset_info.json", "state.json", "dataset_dict.json")):
            raise TrainConfigError(f"data.path {path} is a directory without a saved `datasets` dataset (no "
                                   "dataset_info.json or dataset_dict.json); pass a JSONL file or a save_to_disk directory")
        return
    try:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise TrainConfigError("data.path " + not_utf8(f"{path}:{lineno}", e)) from None
    except PermissionError:
        raise TrainConfigError(f"data.path {path} cannot be read: permission denied") from None
    from rhea.training.errors import TrainingDataError
    from rhea.training.formats import _iter_jsonl

    records = 0
    try:
        for where, record in _iter_jsonl(Path(path)):
            if not isinstance(record, dict):
                raise TrainConfigError(f"data.path {where} holds a JSON {type(record).__name__}, not an object; write one "
                                       "conversation object per line")
            records += 1
    except TrainingDataError as e:
        raise TrainConfigError(f"data.path {e}") from None
    if not records:
        raise TrainConfigError(f"data.path {path} holds no records; write one conversation per line")


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The newest ``checkpoint-N`` directory holding a complete checkpoint, or None."""
    root = Path(output_dir)
    done = [p for p in root.glob(f"{CHECKPOINT_PREFIX}*") if (p / PROGRESS_FILE).is_file()]
    return max(done, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):])) if done else None


def _flat_hparams(config: TrainConfig) -> dict:
    # TensorBoard's hparams take scalars and strings only.
    out = {}
    for section, values in config.to_dict().items():
        for k, v in values.items():
            out[f"{section}.{k}"] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


class Trainer:
    """Runs the joint step over the samples with AdamW + cosine warm-up and gradient accumulation.

    `model` and `samples` default to what the config describes; `aux_losses` are added to
    the LM loss in every step (``run.autoencode_weight > 0`` adds the auto-encoding loss).
    """

    def __init__(self, config: TrainConfig, *, model=None, samples: SampleSet | None = None,
                 aux_losses: Sequence[AuxiliaryLoss] = (), accelerator=None):
        self.config = config
        self._global_step = 0
        preflight(config, needs_data=samples is None)
        if config.run.num_threads:
            torch.set_num_threads(config.run.num_threads)
        self.accelerator = accelerator or self._make_accelerator()
        self.sharded = is_fsdp(self.accelerator)
        if self.sharded and model is not None:
            raise TrainConfigError(
                "an FSDP run builds its model from the config (model.base_model / model.init_from): the final "
                "save_pretrained rebuilds it unsharded from there; do not pass model= to Trainer under FSDP"
            )
        if model is None:
            from accelerate.utils import set_seed

            set_seed(config.run.seed)  # every process builds the same fresh LoRA weights (FSDP does not broadcast them)
        self.model = model if model is not None else build_model(config)
        if config.run.stage == "compressor":
            from rhea.training import compressor_stage

            if aux_losses:
                raise TrainConfigError("aux_losses are added to the joint stage's LM loss; the compressor stage "
                                       "(run.stage: compressor) has its own objective")
            self.samples = samples if samples is not None else compressor_stage.CompressorData.build(config, self.model.tokenizer)
            # fresh adapters get distinct <mem> queries and a fitted injector centre (a resume then loads its weights)
            compressor_stage.prepare_model(self.model, self.samples, config, fresh=not config.model.init_from)
            self.step_module = compressor_stage.CompressorStep(self.model, config, self.samples.qa_train)
            self.loss_names = list(compressor_stage.LOSS_NAMES)
            self._collate = compressor_stage.collate_texts
            self._drop_last = True  # every step auto-encodes data.batch_size texts (the epoch's tail waits for the next)
            if not self.samples.samples:
                raise TrainConfigError(f"no training chunks ({self.samples.report()}); check data.path")
            return
        self.samples = samples if samples is not None else build_samples(config, self.model)
        if not self.samples.samples:
            raise TrainConfigError(f"no training samples ({self.samples.report()}); check data.path and the length limits")
        aux = list(aux_losses)
        if config.run.autoencode_weight > 0:
            aux.append(AuxiliaryLoss("autoencode", autoencode_loss, config.run.autoencode_weight))
        if config.run.contrastive_weight > 0:
            aux.append(AuxiliaryLoss("contrastive", contrastive_loss_from_config(config), config.run.contrastive_weight))
        self.step_module = JointStep(self.model, aux)
        self.loss_names = ["lm"] + [a.name for a in aux]
        pad = self.model.tokenizer.pad_token_id
        self._collate = lambda s: collate(s, pad)
        self._drop_last = False

    # ------------------------------------------------------------------ setup
    def _make_accelerator(self):
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

        r = self.config.run
        log_with = None if r.log_with == "none" else r.log_with
        from accelerate.state import PartialState
        from accelerate.utils import DistributedType

        # DeepSpeed's engine does its own accumulation (and loss scaling) from this number;
        # everywhere else the loop below accumulates with no_sync and steps itself.
        deepspeed = PartialState(cpu=r.cpu).distributed_type == DistributedType.DEEPSPEED
        fsdp_plugin = None
        if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
            from accelerate.utils import FullyShardedDataParallelPlugin

            fsdp_plugin = FullyShardedDataParallelPlugin()  # from the FSDP_* variables `accelerate launch` sets
            if fsdp_plugin.fsdp_version != 2:
                raise TrainConfigError(
                    f"fsdp_version {fsdp_plugin.fsdp_version}: rhea trains under FSDP2 only (per-parameter sharding "
                    "of the frozen base next to the trainable LoRA weights); set fsdp_version: 2 in the accelerate "
                    "config (configs/accelerate/fsdp.yaml)"
                )
        acc = Accelerator(
            gradient_accumulation_steps=self.config.optim.grad_accum if deepspeed else 1,
            mixed_precision=r.mixed_precision,
            cpu=r.cpu,
            log_with=log_with,
            project_config=ProjectConfiguration(project_dir=r.output_dir, logging_dir=os.path.join(r.output_dir, "logs")),
            # A batch whose history is all raw text leaves the compress adapter unused.
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
            fsdp_plugin=fsdp_plugin,
        )
        if fsdp_plugin is not None and acc.distributed_type == DistributedType.MULTI_CPU:
            # accelerate keeps FSDP to GPU-like devices and would silently run plain DDP on CPU, although
            # torch's FSDP2 (fully_shard) runs on gloo: switch its state to FSDP so `prepare` shards.
            # Both shared states: every later AcceleratorState() copies PartialState's fields over its own.
            PartialState().distributed_type = DistributedType.FSDP
            acc.state.distributed_type = DistributedType.FSDP
            acc.state.fsdp_plugin = fsdp_plugin
            if acc.mixed_precision != "no":  # accelerate sets FSDP's MixedPrecisionPolicy on its GPU path only
                fsdp_plugin.set_mixed_precision(acc.mixed_precision)
        return acc

    def _epoch_batches(self, epoch: int) -> DataLoader:
        """This process's micro-batches for `epoch`: a seeded shuffle, sharded by rank, equal length per rank."""
        acc, d = self.accelerator, self.config.data
        order = torch.randperm(len(self.samples.samples), generator=torch.Generator().manual_seed(d.seed * 1000 + epoch)).tolist()
        per_rank = math.ceil(len(order) / acc.num_processes)
        order = (order * (acc.num_processes + 1))[: per_rank * acc.num_processes]  # wrap so every rank has as many
        mine = [self.samples.samples[i] for i in order[acc.process_index::acc.num_processes]]
        return DataLoader(mine, batch_size=d.batch_size, shuffle=False, collate_fn=self._collate,
                          drop_last=self._drop_last)

    def _register_checkpoint_hooks(self, unwrapped_step: JointStep) -> None:
        from safetensors.torch import load_file, save_file

        def save_hook(models, weights, output_dir):
            # Only the LoRA weights and <mem> slots change; the frozen base is never copied (under FSDP
            # accelerate also writes its sharded model state, which is what a resume loads there).
            state = full_trainable_state(unwrapped_step)  # a collective under FSDP: every process gathers
            if self.accelerator.is_main_process:
                save_file(state, os.path.join(output_dir, TRAINABLE_FILE))
            weights.clear()

        def load_hook(models, input_dir):
            state = load_file(os.path.join(input_dir, TRAINABLE_FILE))
            names = {n for n, p in unwrapped_step.named_parameters() if p.requires_grad}
            missing = names - set(state)
            if missing:
                raise TrainConfigError(f"checkpoint {input_dir} lacks trainable weights {sorted(missing)[:3]}...; it is from another model")
            if not self.sharded:  # under FSDP accelerate has already loaded the sharded model state
                unwrapped_step.load_state_dict(state, strict=False)
            models.clear()

        self.accelerator.register_save_state_pre_hook(save_hook)
        self.accelerator.register_load_state_pre_hook(load_hook)

    # ------------------------------------------------------------------ loop
    def train(self) -> TrainResult:
        from rhea.training.schedule import build_scheduler

        acc, cfg = self.accelerator, self.config
        o, r = cfg.optim, cfg.run
        from accelerate.utils import set_seed

        set_seed(r.seed)
        t0 = time.perf_counter()
        out_dir = Path(r.output_dir)
        if r.gradient_checkpointing:  # each layer recomputes under the adapter of its forward
            enable_activation_checkpointing(self.model)
        self.model.train()

        params = [p for p in self.step_module.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay)
        micro_per_epoch = len(self._epoch_batches(0))
        if micro_per_epoch == 0:
            raise TrainConfigError(f"{len(self.samples.samples)} samples make no micro-batch of data.batch_size "
                                   f"{cfg.data.batch_size} per process; lower data.batch_size or add data")
        steps_per_epoch = math.ceil(micro_per_epoch / o.grad_accum)
        if o.epochs is None:  # as many passes as optim.max_steps needs
            total_steps, n_epochs = o.max_steps, math.ceil(o.max_steps / steps_per_epoch)
        else:
            n_epochs = o.epochs
            total_steps = steps_per_epoch * o.epochs if o.max_steps is None else min(o.max_steps, steps_per_epoch * o.epochs)
        scheduler = build_scheduler(optimizer, o, total_steps)
        if r.tf32 and acc.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        from accelerate.utils import DistributedType

        if acc.distributed_type == DistributedType.DEEPSPEED:
            # prepare() gets no DataLoader (the loop shards batches itself), so DeepSpeed needs the micro-batch here.
            ds = acc.state.deepspeed_plugin.deepspeed_config
            ds["train_micro_batch_size_per_gpu"] = cfg.data.batch_size
            ds["gradient_accumulation_steps"] = o.grad_accum  # the rhea config's, not accelerate launch's default
            ds["train_batch_size"] = cfg.data.batch_size * o.grad_accum * acc.num_processes
        step_module, optimizer = acc.prepare(self.step_module, optimizer)
        if self.sharded:
            # fully_shard replaced every parameter by a sharded DTensor (and the optimizer's with it).
            params = [p for p in step_module.parameters() if p.requires_grad]
            # A batch without compressed history leaves the compress adapter without gradients on one
            # process only; reduce-scatter zeros for it so every process runs the same collectives.
            step_module.set_reduce_scatter_unused_params(True)
            self.step_module.uniform_calls = True
        from accelerate.utils import DistributedType

        deepspeed = acc.distributed_type == DistributedType.DEEPSPEED
        acc.register_for_checkpointing(scheduler)  # stepped by us once per optimizer step, not by accelerate
        self._register_checkpoint_hooks(acc.unwrap_model(step_module))

        start_epoch, start_batch, global_step = 0, 0, 0
        resume = latest_checkpoint(out_dir) if r.resume_from == "latest" else (Path(r.resume_from) if r.resume_from else None)
        if r.resume_from and resume is None:
            acc.print(f"resume_from='latest' but {out_dir} has no checkpoint yet: starting fresh")
        if resume is not None:
            progress = json.loads((resume / PROGRESS_FILE).read_text())
            if progress["num_processes"] != acc.num_processes:
                raise TrainConfigError(
                    f"checkpoint {resume} was written by {progress['num_processes']} processes, this run has "
                    f"{acc.num_processes}; resume with the same number so the data position is the same"
                )
            acc.load_state(str(resume))
            start_epoch, start_batch, global_step = progress["epoch"], progress["batch"], progress["global_step"]

        done_batches = start_epoch * micro_per_epoch + start_batch
        unwrapped = acc.unwrap_model(step_module)
        if hasattr(unwrapped, "resume_at"):  # the compressor stage's seeded fact-QA draws continue where they were
            unwrapped.resume_at(done_batches)
        if acc.num_processes > 1:  # each rank its own contrastive triples, continuing where a checkpoint left off
            for aux in getattr(unwrapped, "aux_losses", []):
                if hasattr(aux.fn, "shard"):
                    aux.fn.shard(acc.process_index, acc.num_processes, seed=cfg.run.seed, calls=done_batches)
        metrics_path = out_dir / METRICS_FILE
        history = self._load_history(metrics_path, global_step) if resume is not None else []
        if acc.is_main_process:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / CONFIG_FILE).write_text(json.dumps(cfg.to_dict(), indent=2) + "\n", encoding="utf-8")
            acc.print(f"[rhea train] {self.samples.report()}; {micro_per_epoch} micro-batches/epoch/process, "
                      f"{total_steps} optimizer steps, {acc.num_processes} process(es), {self._parallelism(step_module)}")
            for skip in self.samples.skipped[:5]:
                acc.print(f"[rhea train] skipped {skip.source}: {skip.reason}")
        if acc.trackers == [] and cfg.run.log_with != "none":
            acc.init_trackers("rhea-train", config=_flat_hparams(cfg))

        curve = self._evaluator(out_dir)
        if curve is not None and resume is None:
            curve(0, None)  # the starting point of the held-apart curve
        deadline = time.monotonic() + 60 * r.max_minutes if r.max_minutes else None
        main_loss = f"loss/{self.loss_names[0]}"
        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, initial=global_step, disable=not acc.is_local_main_process, desc="rhea train")
        window: dict[str, list[float]] = {}
        skips = SkipCounter(o.max_nonfinite_steps)
        done = global_step >= total_steps
        for epoch in range(start_epoch, n_epochs):
            if done:
                break
            loader = self._epoch_batches(epoch)
            first = start_batch if epoch == start_epoch else 0
            n_batches = len(loader)
            for i, batch in enumerate(loader):
                if i < first:
                    continue  # already trained before the checkpoint (collation only, no compute)
                window_start = (i // o.grad_accum) * o.grad_accum
                window_size = min(o.grad_accum, n_batches - window_start)
                boundary = i + 1 == window_start + window_size
                ctx = acc.no_sync(step_module) if not boundary else contextlib.nullcontext()
                with ctx:
                    total, parts = step_module(batch)
                    acc.backward(total if deepspeed else total / window_size)
                for k, v in parts.items():
                    window.setdefault(k, []).append(float(v.detach()))
                if not boundary:
                    continue
                # the global norm (clipped only with max_grad_norm); a non-finite one skips the update (rhea.training.guard)
                norm = acc.clip_grad_norm_(params, o.max_grad_norm or float("inf"))
                norm = None if norm is None else float(norm)  # None: DeepSpeed clips inside its own step
                applied = norm is None or math.isfinite(norm) or acc.mixed_precision == "fp16"  # fp16: the scaler skips
                if applied:
                    optimizer.step()
                advance_schedule(scheduler)
                optimizer.zero_grad(set_to_none=True)
                global_step += 1
                record = self._log_step(global_step, epoch, window, scheduler.get_last_lr()[0], t0)
                record["grad_norm"] = norm
                if not applied:
                    record["skipped"] = True
                    acc.print(f"[rhea train] step {global_step}: gradient norm {norm}; update skipped")
                outcome = UpdateOutcome(applied, record.get(main_loss, math.nan), math.nan if norm is None else norm)
                skips.record(outcome, global_step, hint="Lower optim.lr, or train with run.mixed_precision 'no'.")
                window = {}
                history.append(record)
                if acc.is_main_process:
                    with open(metrics_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(record) + "\n")
                bar.update(1)
                bar.set_postfix(loss=f"{record.get(main_loss, math.nan):.4f}")
                if r.save_every and global_step % r.save_every == 0:
                    self.save_checkpoint(epoch, i + 1, global_step)
                if curve is not None and global_step % cfg.compressor.eval_every == 0:
                    losses = [h.get(main_loss) for h in history[-cfg.compressor.eval_every:]]
                    losses = [x for x in losses if x is not None and math.isfinite(x)]
                    curve(global_step, sum(losses) / len(losses) if losses else None)
                if global_step >= total_steps:
                    done = True
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    acc.print(f"[rhea train] run.max_minutes {r.max_minutes} reached at step {global_step}; "
                              "resume_from: latest continues")
                    if not r.save_every:  # the checkpoint a later run continues from
                        self.save_checkpoint(epoch, i + 1, global_step)
                    done = True
                    break
        bar.close()
        if r.save_every and global_step and not (out_dir / f"{CHECKPOINT_PREFIX}{global_step}").exists():
            self.save_checkpoint(epoch, i + 1, global_step)
        self._global_step = global_step
        final_dir = self.save_final(out_dir / "final")
        acc.end_training()
        return TrainResult(history, global_step, final_dir, time.perf_counter() - t0, len(self.samples.skipped))

    def _evaluator(self, out_dir: Path):
        """``curve(step, loss)`` measuring the compressor stage's held-apart texts into ``curve.jsonl`` (main
        process only), or None for the joint stage or ``compressor.eval_every: 0``."""
        cfg = self.config
        if cfg.run.stage != "compressor" or not cfg.compressor.eval_every:
            return None
        from rhea.training.compressor_stage import evaluate

        path = out_dir / "curve.jsonl"
        acc = self.accelerator

        def curve(step: int, loss: float | None) -> None:
            if acc.is_main_process:
                raw = not (path.is_file() and '"qa_raw"' in path.read_text(encoding="utf-8"))
                row = evaluate(self.model, self.samples, step, loss, path, raw_reference=raw)
                acc.print(f"[rhea train] eval {row}")
            acc.wait_for_everyone()

        return curve

    def _parallelism(self, step_module) -> str:
        """How the prepared step is distributed, for the start-up line (e.g. "FSDP2, 5 sharded units")."""
        if self.sharded:
            from torch.distributed.fsdp import FSDPModule

            units = sum(isinstance(m, FSDPModule) for m in step_module.modules())
            return f"FSDP2, {units} sharded units"
        return str(self.accelerator.distributed_type).split(".")[-1]

    def _log_step(self, step: int, epoch: int, window: dict, lr: float, t0: float) -> dict:
        acc = self.accelerator
        record = {"step": step, "epoch": epoch, "lr": lr, "elapsed_s": round(time.perf_counter() - t0, 2)}
        # Every process reduces the same keys in the same order (a key missing on one process, e.g. an
        # aux loss its batches had no input for, would otherwise pair mismatched collectives).
        for k in self.loss_names:
            values = window.get(k, [])
            total = acc.reduce(torch.tensor([sum(values), len(values)], dtype=torch.float64, device=acc.device), reduction="sum")
            if total[1] > 0:
                record[f"loss/{k}"] = float(total[0] / total[1])
        if step % self.config.run.log_every == 0 and self.config.run.log_with != "none":
            acc.log({k: v for k, v in record.items() if k != "step"}, step=step)
        return record

    def _load_history(self, path: Path, up_to_step: int) -> list[dict]:
        """Metrics of the run being resumed, cut at the checkpoint's step (later lines are rewritten)."""
        if not path.is_file():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows = [row for row in rows if row["step"] <= up_to_step]
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return rows

    # ------------------------------------------------------------------ saving
    def save_checkpoint(self, epoch: int, batch: int, global_step: int) -> Path:
        """Write ``checkpoint-<step>``; the progress file is written last, marking it complete."""
        acc, r = self.accelerator, self.config.run
        path = Path(r.output_dir) / f"{CHECKPOINT_PREFIX}{global_step}"
        acc.save_state(str(path))
        if acc.is_main_process:
            progress = {"epoch": epoch, "batch": batch, "global_step": global_step, "num_processes": acc.num_processes}
            (path / PROGRESS_FILE).write_text(json.dumps(progress))
            if r.keep_checkpoints:
                done = sorted((p for p in Path(r.output_dir).glob(f"{CHECKPOINT_PREFIX}*") if (p / PROGRESS_FILE).is_file()),
                              key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):]))
                for old in done[: -r.keep_checkpoints]:
                    shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()
        return path

    def save_final(self, directory: Path) -> str:
        """``save_pretrained`` of the trained model with ``config.extra["adapters_trained"] = True``.

        Under FSDP every process gathers the trainable weights (LoRA, `<mem>` slots) and the main
        process writes them through a model rebuilt unsharded from the config, as `export_checkpoint` does.
        """
        acc = self.accelerator
        acc.wait_for_everyone()
        extra = {"data": self.config.data.path, "samples": len(self.samples.samples)}
        if self.config.run.stage == "compressor":
            from rhea.training.compressor_stage import training_record

            extra = training_record(self.config, self.samples, self._global_step)
        if self.sharded:
            state = full_trainable_state(self.step_module)
            if acc.is_main_process:
                _save_pretrained_with(build_trained_model(self.config), state, directory, extra, origin="the FSDP run")
        elif acc.is_main_process:
            model = self.model  # the same object the prepared wrapper trains
            model.config.extra["adapters_trained"] = True
            model.config.extra["training"] = extra
            model.save_pretrained(directory)
        acc.wait_for_everyone()
        return str(directory)


def export_checkpoint(checkpoint: str | os.PathLike, config: TrainConfig, directory: str | os.PathLike,
                      *, dtype: torch.dtype | None = None) -> str:
    """Turn a resumable ``checkpoint-N`` into a ``save_pretrained`` directory (optionally cast, e.g. fp16).

    >>> export_checkpoint("out/checkpoint-40", cfg, "rhea/data/adapters/smollm2-135m", dtype=torch.float16)  # doctest: +SKIP
    """
    from safetensors.torch import load_file

    state = load_file(os.path.join(checkpoint, TRAINABLE_FILE))
    progress = json.loads(Path(checkpoint, PROGRESS_FILE).read_text())
    extra = {"data": config.data.path, "optimizer_steps": progress["global_step"]}
    if config.run.stage == "compressor":
        extra["recipe"] = "rhea train (run.stage compressor)"
    _save_pretrained_with(build_trained_model(config), state, directory, extra, origin=str(checkpoint))
    if dtype is not None:  # floating-point tensors only; the save's manifest keeps the new digests
        from rhea.modeling.shrink import cast_safetensors

        cast_safetensors(directory, dtype)
    return str(directory)


def is_fsdp(accelerator) -> bool:
    """Whether `accelerator` shards the model with FSDP (the trainer supports FSDP2 only)."""
    from accelerate.utils import DistributedType

    return accelerator.distributed_type == DistributedType.FSDP


def full_trainable_state(step: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every trainable tensor of `step` (a `JointStep`) in full, on CPU, keyed by its unwrapped name.

    Under FSDP2 the parameters are sharded DTensors: each is all-gathered (``full_tensor``), so every
    process must call this, in the same order. Unsharded runs return plain copies.
    """
    from torch.distributed.tensor import DTensor

    out = {}
    for name, p in step.named_parameters():
        if not p.requires_grad:
            continue
        t = p.detach()
        if isinstance(t, DTensor):
            t = t.full_tensor()
        out[name] = t.cpu().contiguous()
    return out


def _save_pretrained_with(model, state: dict, directory, extra: dict, *, origin: str) -> None:
    """Load the trainable `state` into a freshly built `model` and ``save_pretrained`` it to `directory`."""
    step = JointStep(model)
    missing, unexpected = step.load_state_dict(state, strict=False)
    if unexpected or any(p.requires_grad for n, p in step.named_parameters() if n in missing):
        raise TrainConfigError(f"{origin} does not match the model built from the config (unexpected {unexpected[:3]})")
    model.config.extra["adapters_trained"] = True
    model.config.extra["training"] = extra
    model.save_pretrained(directory)
