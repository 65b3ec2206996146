"""Training throughput: the joint compress/generate step vs a plain single-LoRA SFT step.

Both variants train on the SAME conversation turns, in the same micro-batches, with the same LoRA
(rank, alpha, dropout, target modules: the trainer's `ModelSection` defaults unless flags say
otherwise), the same AdamW settings and gradient clipping (`OptimSection` defaults):

* ``joint``: what `rhea train` runs per micro-batch. Samples come from the trainer's own
  `build_samples` (``TierMix(raw=0.2, drop=0.1)`` by default: past replies become latents, stay raw or
  are dropped), and one step is `JointStep` forward (compress the latent replies with the compress
  adapter, with gradient → generate pass with the latents at the `<mem>` slots, LM loss on the reply
  b_t; + the auxiliary losses that ``--autoencode-weight`` / ``--contrastive-weight`` switch on; both
  are 0 in `TrainConfig`'s defaults, so by default there are none) → backward → clip → AdamW → LR schedule.
* ``sft``: a plain PEFT model with ONE LoRA adapter of the same settings, on the same turns rendered
  with the full raw history (no latents, no compress pass), loss on the same reply tokens; forward →
  backward → clip → AdamW → LR schedule.

Per variant: seconds per step (median of --steps timed steps after --warmup, split into forward /
backward / optimizer), and throughput over the timed steps as

* **conversation tokens/s**: tokens of the raw conversation each step covers (the sft variant's input
  length). Identical for both variants, so the joint/sft ratio is a like-for-like throughput ratio;
* **target tokens/s**: tokens carrying loss (the replies b_t), also identical for both;
* **processed tokens/s**: tokens the decoder actually ran (every pass: compress, generate, aux), with
  padding counted separately, which shows why the ratio is what it is.

Clocks: on CPU the process CPU time (`time.process_time`, robust to other jobs on a shared machine)
and the wall time; on CUDA the wall time with the device synchronised, plus peak allocated memory.
``--dtype bf16`` is autocast over fp32 weights, as accelerate's ``mixed_precision: bf16`` does.

    # CPU, real weights
    python benchmarks/train_throughput.py --model smollm2-135m --threads 1 --warmup 1 --steps 3 --batch-size 2
    # GPU, the real model's shape with random weights (needs the Qwen2.5 tokenizer directory, see efficiency_shapes.py)
    python benchmarks/train_throughput.py --shape qwen2.5-coder-1.5b --device cuda --dtype bf16 \\
        --out benchmarks/results/train_throughput_h100
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))
from benchmarks.efficiency_shapes import SHAPES, random_base  # noqa: E402
from rhea.storage import output_file  # noqa: E402

DEFAULT_DATA = _ROOT / "data" / "chats.jsonl"
#: the target: the joint step reaches at least this share of plain SFT's throughput (on a GPU)
TARGET_RATIO = 0.8
VARIANTS = ("joint", "sft")


def parse_args(argv=None) -> argparse.Namespace:
    from rhea.training.config import DataSection, ModelSection, RunSection

    m, d, r = ModelSection(), DataSection(), RunSection()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", default=None, help="model-zoo name (real weights), default smollm2-135m")
    src.add_argument("--shape", default=None, help=f"random weights in a real model's shape: {', '.join(sorted(SHAPES))}")
    ap.add_argument("--tokenizer", default=None, help="--shape only: directory with the Qwen2.5 tokenizer.json and "
                    "config.json (default: the zoo cache of qwen2.5-coder-1.5b)")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="fp32", help="fp32, or bf16 (autocast over fp32 weights; very slow on CPUs "
                    "without native bf16 matmul)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="conversations in a format the trainer reads "
                    "(OpenAI messages / ShareGPT / UltraChat JSONL, or a datasets directory)")
    ap.add_argument("--batch-size", type=int, default=d.batch_size, help="samples per micro-batch (= per step)")
    ap.add_argument("--max-length", type=int, default=d.max_length, help="samples longer than this are skipped (trainer's rule)")
    ap.add_argument("--min-turn", type=int, default=d.min_turn, help="first turn index that becomes a sample")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--lora-r", type=int, default=m.lora_r)
    ap.add_argument("--lora-alpha", type=int, default=m.lora_alpha)
    ap.add_argument("--lora-dropout", type=float, default=m.lora_dropout)
    ap.add_argument("--target-modules", default=m.target_modules,
                    help='"all-linear" or a comma-separated list such as q_proj,k_proj,v_proj,o_proj')
    ap.add_argument("--n-mem", type=int, default=m.n_mem, help="latent vectors per compressed reply")
    ap.add_argument("--autoencode-weight", type=float, default=r.autoencode_weight,
                    help="> 0 adds the auto-encoding loss to the joint step (off in the trainer's defaults)")
    ap.add_argument("--contrastive-weight", type=float, default=r.contrastive_weight,
                    help="> 0 adds the contrastive retrieval loss to the joint step (off in the trainer's defaults)")
    ap.add_argument("--interleave", action="store_true",
                    help="hold both models and alternate the variants step by step (fairer on a shared machine whose "
                         "load drifts; on CUDA each peak memory then includes the other model's weights)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--note", default="", help="free text stored in the JSON meta (e.g. the machine's load)")
    ap.add_argument("--out", default="benchmarks/results/train_throughput_cpu", help="writes OUT.json and OUT.png")
    return ap.parse_args(argv)


class Checked:
    """What `check_args` resolved: everything the run needs, decided before any model loads.

    (Plain classes, not dataclasses: tests load this script with `load_script`, outside ``sys.modules``.)
    """

    def __init__(self, device, autocast_dtype, rhea_config, train_config, conversations: int, tokenizer_dir):
        self.device = device
        self.autocast_dtype = autocast_dtype  # None = fp32
        self.rhea_config = rhea_config  # RheaConfig of both variants' LoRA
        self.train_config = train_config  # TrainConfig the samples and the optimizer follow
        self.conversations = conversations
        self.tokenizer_dir = tokenizer_dir


def check_args(args) -> Checked:
    """Refuse bad input with a named error (`rhea.errors`) before any model loads."""
    from rhea.errors import RheaConfigError, UnknownModelError
    from rhea.modeling import RheaConfig
    from rhea.modeling.loading import resolve_device
    from rhea.modeling.zoo import MODEL_ZOO, cache_dir, check_model_path, get_model
    from rhea.training.config import TrainConfig
    from rhea.training.errors import TrainingDataError
    from rhea.training.formats import load_conversations

    for name, least in (("steps", 1), ("warmup", 0), ("batch_size", 1), ("max_length", 1), ("min_turn", 0)):
        value = getattr(args, name)
        if not isinstance(value, int) or value < least:
            raise RheaConfigError(f"--{name.replace('_', '-')} {value!r} must be an int >= {least}")
    if args.threads is not None and args.threads < 1:
        raise RheaConfigError(f"--threads {args.threads} must be >= 1")
    if args.dtype not in ("fp32", "bf16"):
        raise RheaConfigError(f"--dtype {args.dtype!r} must be fp32 or bf16 (bf16 = autocast over fp32 weights)")
    tokenizer_dir = None
    if args.shape is not None:
        if args.shape not in SHAPES:
            raise UnknownModelError(f"--shape {args.shape!r} is not a known shape; known: {', '.join(sorted(SHAPES))}")
        tokenizer_dir = args.tokenizer or str(cache_dir() / "models" / "qwen2.5-coder-1.5b")
        if not os.path.isfile(os.path.join(tokenizer_dir, "tokenizer.json")):
            raise RheaConfigError(f"--shape needs the Qwen2.5 tokenizer: no tokenizer.json in {tokenizer_dir}; run "
                                  "`rhea models install qwen2.5-coder-1.5b` and load it once, or pass --tokenizer DIR")
    else:
        args.model = args.model or "smollm2-135m"
        check_model_path(args.model)
        if args.model not in MODEL_ZOO and not os.path.isdir(args.model):
            get_model(args.model)  # UnknownModelError listing the zoo (with a did-you-mean)
    targets = args.target_modules
    if isinstance(targets, str) and targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    rc = RheaConfig(n_mem=args.n_mem, lora_r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                    target_modules=targets)
    tc = TrainConfig.from_dict({
        "model": {"base_model": args.model or f"random-weights:{args.shape}", "n_mem": args.n_mem, "lora_r": args.lora_r,
                  "lora_alpha": args.lora_alpha, "lora_dropout": args.lora_dropout, "target_modules": targets},
        "data": {"path": str(args.data), "batch_size": args.batch_size, "max_length": args.max_length,
                 "min_turn": args.min_turn},
        "run": {"autoencode_weight": args.autoencode_weight, "contrastive_weight": args.contrastive_weight,
                "seed": args.seed, "log_with": "none"},
    })
    convs = load_conversations(args.data)  # TrainingDataError for a missing file or a malformed record
    if not any(len(conv) > args.min_turn for _, conv in convs):
        raise TrainingDataError(f"--data {args.data}: no conversation has a turn at index >= --min-turn {args.min_turn}")
    device = resolve_device(args.device)  # DeviceError for a device this machine lacks
    return Checked(device, torch.bfloat16 if args.dtype == "bf16" else None, rc, tc, len(convs), tokenizer_dir)


# ------------------------------------------------------------------ models
class Models:
    """How to build each variant's model (the test passes tiny ones).

    `make_rhea(rc)`: a `RheaForCausalLM` with fresh compress/generate adapters of `rc`, on the device;
    `make_base()`: (plain Hugging Face causal LM, tokenizer) with the same base weights, on the device.
    """

    def __init__(self, label: str, make_rhea: Callable, make_base: Callable):
        self.label, self.make_rhea, self.make_base = label, make_rhea, make_base


def default_models(args, checked: Checked) -> Models:
    from rhea.modeling import RheaForCausalLM
    from rhea.modeling.zoo import load_base_model
    from rhea.training.trainer import build_model

    device = checked.device
    if args.shape is not None:
        def make_base():
            return random_base(args.shape, checked.tokenizer_dir, device, torch.float32, seed=args.seed)

        def make_rhea(rc):
            return RheaForCausalLM.from_base(*make_base(), rc).to(device)

        return Models(f"random-weights:{args.shape}", make_rhea, make_base)

    def make_base():
        base, tok = load_base_model(args.model)
        return base.to(device), tok

    def make_rhea(rc):
        return build_model(checked.train_config).to(device)  # the trainer's own model builder

    return Models(args.model, make_rhea, make_base)


def plain_lora(base, rc):
    """`base` with ONE LoRA adapter of `rc`'s settings (the same `LoraConfig` Rhea gives each of its two)."""
    from peft import get_peft_model

    from rhea.modeling.adapters import lora_config as _lora_config, quiet_peft as _quiet_peft

    with _quiet_peft():
        return get_peft_model(base, _lora_config(rc))


class SFTStep(torch.nn.Module):
    """``forward(batch) -> (loss, {"lm": loss})`` of a plain causal-LM SFT step, in `JointStep`'s batch format."""

    def __init__(self, peft_model):
        super().__init__()
        self.model = peft_model

    def forward(self, batch: dict):
        from rhea.modeling.rhea_model import positions_from_mask

        device = next(self.model.parameters()).device
        mask = batch["attention_mask"].to(device)
        out = self.model(input_ids=batch["input_ids"].to(device), attention_mask=mask,
                         position_ids=positions_from_mask(mask), labels=batch["labels"].to(device))
        return out.loss, {"lm": out.loss}


# ------------------------------------------------------------------ data
def paired_samples(model, train_config):
    """(joint samples, sft samples) for the same turns, in the same order, plus a report.

    The joint samples are the trainer's (`build_samples`); the sft ones are the same turns built by the
    same function with every past reply kept raw (``TierMix(raw=1, drop=0)``). A turn whose all-raw
    rendering exceeds max_length is left out of both (counted in the report).
    """
    from rhea.training.data import TierMix, build_conversation_samples
    from rhea.training.formats import load_conversations
    from rhea.training.trainer import build_samples

    d = train_config.data
    joint = build_samples(train_config, model)
    raw = build_conversation_samples(load_conversations(d.path), model.tokenizer, n_mem=model.n_mem,
                                     tiers=TierMix(raw=1.0, drop=0.0), max_length=d.max_length,
                                     max_compress_length=d.max_compress_length, min_turn=d.min_turn, seed=d.seed)
    by_source = {s.source: s for s in raw.samples}
    pairs = [(s, by_source[s.source]) for s in joint.samples if s.source in by_source]
    mismatched = sum(_targets(a) != _targets(b) for a, b in pairs)
    report = {"trainer_samples": joint.report(), "pairs": len(pairs),
              "left_out_raw_too_long": len(joint.samples) - len(pairs),
              "pairs_with_compression": sum(bool(a.compress_texts) for a, _ in pairs),
              "compressed_replies": sum(len(a.compress_texts) for a, _ in pairs),
              "pairs_with_different_targets": mismatched}
    return [a for a, _ in pairs], [b for _, b in pairs], report


def _targets(sample) -> list[int]:
    return [t for t in sample.labels if t != -100]


def step_batches(n_samples: int, batch_size: int, n_steps: int, seed: int) -> list[list[int]]:
    """Sample indices of each step's micro-batch: the trainer's epoch-0 shuffle, cycled if the steps need more.

    >>> step_batches(5, 2, 4, seed=0)
    [[4, 0], [1, 3], [2, 4], [0, 1]]
    """
    order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(seed * 1000)).tolist()
    need = batch_size * n_steps
    order = (order * (need // n_samples + 1))[:need]
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(n_steps)]


class PassCounter:
    """Counts the tokens the decoder runs: a forward pre-hook on the backbone's decoder (every pass).

    Mask sums stay tensors until `take` (after the step's clock stopped): no device sync inside a pass.
    """

    def __init__(self, decoder: torch.nn.Module):
        self.passes, self.padded, self._tokens = 0, 0, []
        self._handle = decoder.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        x = kwargs.get("inputs_embeds")
        if x is None:
            x = kwargs.get("input_ids")
        if x is None and args:
            x = args[0]
        mask = kwargs.get("attention_mask")
        self.passes += 1
        self.padded += int(x.shape[0] * x.shape[1])
        self._tokens.append(mask.detach().sum() if mask is not None and mask.dim() == 2 else int(x.shape[0] * x.shape[1]))

    def take(self) -> dict:
        out = {"passes": self.passes, "processed": int(sum(int(t) for t in self._tokens)), "processed_padded": self.padded}
        self.passes, self.padded, self._tokens = 0, 0, []
        return out

    def remove(self) -> None:
        self._handle.remove()


# ------------------------------------------------------------------ timing
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Clock:
    def __init__(self, device):
        self.device = device
        self.marks = []

    def mark(self) -> None:
        _sync(self.device)
        self.marks.append((time.perf_counter(), time.process_time()))

    def spans(self) -> dict:
        """Wall and CPU seconds of forward / backward / optimizer and the whole step."""
        (w0, c0), (w1, c1), (w2, c2), (w3, c3) = self.marks
        return {"wall": {"forward": w1 - w0, "backward": w2 - w1, "optimizer": w3 - w2, "step": w3 - w0},
                "cpu": {"forward": c1 - c0, "backward": c2 - c1, "optimizer": c3 - c2, "step": c3 - c0}}


class VariantRun:
    """One variant's training, a step at a time (so two variants can alternate on a shared machine).

    Each `step` trains one micro-batch as the trainer does with ``grad_accum`` 1: forward (under autocast
    when asked), backward, gradient clipping, AdamW, LR schedule, zero_grad.
    """

    def __init__(self, name: str, step_module: torch.nn.Module, decoder: torch.nn.Module, samples,
                 conv_tokens: list[int], *, n_steps: int, train_config, device: torch.device,
                 autocast_dtype: torch.dtype | None, pad_token_id: int, progress: bool = True):
        from transformers import get_cosine_schedule_with_warmup

        self.name, self.step_module, self.samples, self.conv_tokens = name, step_module, samples, conv_tokens
        self.device, self.autocast_dtype, self.pad, self.progress = device, autocast_dtype, pad_token_id, progress
        self.optim = train_config.optim
        step_module.train()
        self.params = [p for p in step_module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=self.optim.lr, weight_decay=self.optim.weight_decay)
        self.scheduler = get_cosine_schedule_with_warmup(self.optimizer, 0, n_steps)
        self.counter = PassCounter(decoder)
        self.rows: list[dict] = []
        self.peak_mib = None

    def step(self, i: int, idx: list[int], timed: bool) -> dict:
        from rhea.training.data import collate

        batch = collate([self.samples[j] for j in idx], self.pad)
        autocast = (torch.autocast(self.device.type, dtype=self.autocast_dtype) if self.autocast_dtype is not None
                    else contextlib.nullcontext())
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        clock = _Clock(self.device)
        self.counter.take()
        clock.mark()
        with autocast:
            total, parts = self.step_module(batch)
        clock.mark()
        total.backward()  # trainer: acc.backward(total / window_size); a window of one micro-batch here
        clock.mark()
        if self.optim.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.params, self.optim.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        clock.mark()
        if self.device.type == "cuda":
            step_peak = torch.cuda.max_memory_allocated(self.device) / 2**20
            self.peak_mib = max(self.peak_mib or 0.0, step_peak)
        row = {"step": i, "timed": timed, **clock.spans(), **self.counter.take(),
               "target": int((batch["labels"] != -100).sum()), "conversation": sum(self.conv_tokens[j] for j in idx),
               "loss": float(total.detach()), "parts": {k: float(v.detach()) for k, v in parts.items()}}
        self.rows.append(row)
        if self.progress:
            print(f"[{self.name}] step {i}{'' if timed else ' (warm-up)'}: cpu {row['cpu']['step']:.2f} s, "
                  f"wall {row['wall']['step']:.2f} s, loss {row['loss']:.4f}, target {row['target']}, "
                  f"processed {row['processed']} tokens in {row['passes']} passes", file=sys.stderr, flush=True)
        return row

    def finish(self) -> dict:
        self.counter.remove()
        return summarise(self.name, self.rows, self.params, self.device, self.peak_mib)


def summarise(name: str, rows: list[dict], params, device: torch.device, peak_mib) -> dict:
    timed = [r for r in rows if r["timed"]]
    primary = "wall" if device.type == "cuda" else "cpu"
    tokens = {k: sum(r[k] for r in timed) for k in ("target", "conversation", "processed", "processed_padded", "passes")}
    per_s = {}
    for clock in ("cpu", "wall"):
        seconds = sum(r[clock]["step"] for r in timed)
        per_s[clock] = {k: tokens[k] / seconds for k in ("target", "conversation", "processed")}
    return {
        "variant": name,
        "clock": primary,
        "timed_steps": len(timed),
        "seconds_per_step": {c: {part: statistics.median(r[c][part] for r in timed)
                                 for part in ("step", "forward", "backward", "optimizer")} for c in ("cpu", "wall")},
        "tokens": tokens,
        "tokens_per_s": per_s[primary],
        "tokens_per_s_by_clock": per_s,
        "loss_mean": statistics.fmean(r["loss"] for r in timed),
        "trainable_params": sum(p.numel() for p in params),
        "peak_memory_mib": peak_mib,
        "per_step": rows,
    }


# ------------------------------------------------------------------ the benchmark
def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from rhea.eval.environment import cpu_name

    return cpu_name()


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run(args, models: Models | None = None, *, progress: bool = True) -> dict:
    """Check the arguments, time both variants, write OUT.json and OUT.png; returns the JSON's content."""
    checked = check_args(args)
    import peft
    import transformers

    from rhea.training.losses import AuxiliaryLoss, autoencode_loss
    from rhea.training.step import JointStep
    from rhea.training.trainer import contrastive_loss_from_config

    if args.threads:
        torch.set_num_threads(args.threads)
    device, tc = checked.device, checked.train_config
    from rhea.modeling.zoo import native_bf16

    if device.type == "cpu" and args.dtype == "bf16" and not native_bf16(device):
        print("warning: bf16 autocast on a CPU without native bf16 matmul (AVX2-only, no AVX512-BF16/AMX) runs tens "
              "to hundreds of times slower than fp32; use --dtype fp32 there", file=sys.stderr)
    models = models or default_models(args, checked)
    load_avg_start = os.getloadavg()
    t0 = time.perf_counter()

    # joint: the trainer's model, samples and aux losses
    torch.manual_seed(args.seed)
    model = models.make_rhea(checked.rhea_config)
    built_s = time.perf_counter() - t0
    joint_samples, sft_samples, data_report = paired_samples(model, tc)
    if not joint_samples:
        from rhea.training.errors import TrainingDataError

        raise TrainingDataError(f"no sample of {args.data} can be trained by both variants: {data_report}")
    conv_tokens = [len(s.input_ids) for s in sft_samples]
    batches = step_batches(len(joint_samples), args.batch_size, args.warmup + args.steps, tc.data.seed)
    pad = model.tokenizer.pad_token_id
    aux = []
    if tc.run.autoencode_weight > 0:  # as Trainer.__init__ builds them
        aux.append(AuxiliaryLoss("autoencode", autoencode_loss, tc.run.autoencode_weight))
    if tc.run.contrastive_weight > 0:
        aux.append(AuxiliaryLoss("contrastive", contrastive_loss_from_config(tc), tc.run.contrastive_weight))
    n_params = sum(p.numel() for p in model.base_model.parameters() if not p.requires_grad)
    common = dict(n_steps=len(batches), train_config=tc, device=device, autocast_dtype=checked.autocast_dtype,
                  pad_token_id=pad, progress=progress)

    def start_joint():
        return VariantRun("joint", JointStep(model, aux), model.base_model.get_decoder(), joint_samples, conv_tokens,
                          **common)

    def start_sft():
        # a fresh copy of the same base, one LoRA adapter, the full raw history
        torch.manual_seed(args.seed)
        base, _ = models.make_base()
        sft_model = plain_lora(base, checked.rhea_config)
        return VariantRun("sft", SFTStep(sft_model), sft_model.get_base_model().get_decoder(), sft_samples,
                          conv_tokens, **common)

    def train(run_, i, idx):
        torch.manual_seed(args.seed * 7919 + i)  # the same dropout draws whatever the order
        run_.step(i, idx, timed=i >= args.warmup)

    if args.interleave:  # both models held; the variants alternate step by step, each going first every other step
        runs = {"joint": start_joint(), "sft": start_sft()}
        for i, idx in enumerate(batches):
            for name in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
                train(runs[name], i, idx)
        joint, sft = runs["joint"].finish(), runs["sft"].finish()
        del runs
        model = None
    else:  # one model at a time: all joint steps, then all sft steps
        run_ = start_joint()
        for i, idx in enumerate(batches):
            train(run_, i, idx)
        joint = run_.finish()
        del run_
        model = None  # frees the Rhea model before the sft model is built
        _free(device)
        run_ = start_sft()
        for i, idx in enumerate(batches):
            train(run_, i, idx)
        sft = run_.finish()
        del run_
    _free(device)
    joint["aux_losses"] = [a.name for a in aux]

    ratios = {k: joint["tokens_per_s"][k] / sft["tokens_per_s"][k] for k in ("conversation", "target", "processed")}
    ratios["median_step_time_sft_over_joint"] = (sft["seconds_per_step"][joint["clock"]]["step"]
                                                 / joint["seconds_per_step"][joint["clock"]]["step"])
    rc = checked.rhea_config
    meta = {
        "model": models.label, "base_params": n_params, "device": str(device), "device_name": device_name(device),
        "dtype": args.dtype, "autocast": str(checked.autocast_dtype) if checked.autocast_dtype else None,
        "weights": "fp32", "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
        "threads": torch.get_num_threads(), "clock": joint["clock"],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": [round(x, 2) for x in load_avg_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()], "note": args.note,
        "model_built_s": round(built_s, 2), "total_s": round(time.perf_counter() - t0, 1),
        "data": str(args.data), "conversations": checked.conversations, **data_report,
        "tiers": {"raw": tc.data.tier_raw, "drop": tc.data.tier_drop}, "max_length": tc.data.max_length,
        "min_turn": tc.data.min_turn, "batch_size": args.batch_size, "warmup": args.warmup, "steps": args.steps,
        "lora": {"r": rc.lora_r, "alpha": rc.lora_alpha, "dropout": rc.lora_dropout, "target_modules": rc.target_modules},
        "n_mem": rc.n_mem, "latent_injection": tc.model.latent_injection,
        "optim": {"lr": tc.optim.lr, "weight_decay": tc.optim.weight_decay, "max_grad_norm": tc.optim.max_grad_norm,
                  "grad_accum": 1},
        "aux_losses": joint["aux_losses"], "gradient_checkpointing": False,
        "order": ("interleaved: the variants alternate step by step (each first every other step), both models "
                  "held (on CUDA each peak then includes the other model's weights)" if args.interleave
                  else "sequential: all joint steps, then all sft steps, one model at a time"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    result = {"meta": meta, "variants": {"joint": joint, "sft": sft}, "ratio_joint_over_sft": ratios,
              "target_ratio": TARGET_RATIO, "meets_target": ratios["conversation"] >= TARGET_RATIO,
              "target_note": f"the target is >= {TARGET_RATIO}x on a GPU with the real model shape"}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_file(out, ".json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, output_file(out, ".png"))
    return result


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, v = result["meta"], result["variants"]
    clock = meta["clock"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    kinds = ["conversation", "target", "processed"]
    width = 0.38
    for k, name in enumerate(VARIANTS):
        xs = [i + (k - 0.5) * width for i in range(len(kinds))]
        bars = a.bar(xs, [v[name]["tokens_per_s"][kind] for kind in kinds], width, label=name)
        a.bar_label(bars, fmt="%.0f", fontsize=7)
    a.set_xticks(range(len(kinds)), [f"{k}\n(x{result['ratio_joint_over_sft'][k]:.2f})" for k in kinds])
    a.set_ylabel(f"tokens / {clock} second")
    a.set_title("throughput (joint/sft ratio under each group)", fontsize=9)
    a.legend(fontsize=8)
    bottom = [0.0, 0.0]
    for part in ("forward", "backward", "optimizer"):
        vals = [v[name]["seconds_per_step"][clock][part] for name in VARIANTS]
        b.bar(list(VARIANTS), vals, bottom=bottom, label=part)
        bottom = [x + y for x, y in zip(bottom, vals)]
    b.set_ylabel(f"median {clock} seconds per step")
    b.set_title(f"batch {meta['batch_size']}, {meta['steps']} timed steps", fontsize=9)
    b.legend(fontsize=8)
    fig.suptitle(f"joint compress/generate vs plain LoRA SFT: {meta['model']}, {meta['dtype']}, "
                 f"{meta['device_name']}, {meta['threads']} thread(s)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None, models: Models | None = None) -> int:
    from rhea.errors import RheaError

    args = parse_args(argv)
    try:
        result = run(args, models)
    except RheaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    r = result["ratio_joint_over_sft"]
    for name in VARIANTS:
        v = result["variants"][name]
        print(f"{name:5s} {v['seconds_per_step'][v['clock']]['step']:7.2f} {v['clock']} s/step   "
              f"{v['tokens_per_s']['conversation']:8.1f} conversation tok/s   {v['tokens_per_s']['target']:7.1f} target tok/s"
              f"   {v['tokens_per_s']['processed']:8.1f} processed tok/s   loss {v['loss_mean']:.3f}")
    print(f"joint/sft: conversation tok/s x{r['conversation']:.3f}, target tok/s x{r['target']:.3f} "
          f"(target >= {TARGET_RATIO}: {'met' if result['meets_target'] else 'not met'}); wrote {args.out}.json/.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
