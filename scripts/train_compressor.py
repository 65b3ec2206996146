"""Compressor pre-training: auto-encode chunks of real replies through the `<mem>` latents (ICAE-style).

The generate adapter is frozen by default (at a fresh start it is the plain base model), as
ICAE freezes its decoder: the loss can then only fall through what the latents carry, so the
generate side cannot learn to ignore them (shared/design/FINDINGS.md §2). Trains the compress
LoRA, the `<mem>` read-out slots (initialised distinct) and the latent injector.

Resumable: every ``--save-every`` steps ``OUT/checkpoint/`` holds the trainable weights, optimizer,
scheduler, RNG and data position; re-running the same command continues from it. ``OUT`` is
scratch (gitignored ``runs/``); for a run that must survive the machine, ``--snapshot-dir DIR``
writes every ``--snapshot-every`` steps a small committable snapshot: the trainable weights in
bf16 (``trainable.safetensors``, ~10 MB at r=16 on all linear layers), the step and settings
(``state.json``), the learning curve (``curve.jsonl``) and the per-step log (``log.jsonl``, the
earlier snapshot's steps continued). A run with no ``OUT/checkpoint`` but
a snapshot continues from it at the snapshot's step and data position; the optimizer moments
are not in the snapshot, so AdamW restarts and the learning rate warms up again
(``--warmup`` of its steps; a ``--cooldown`` still ends at ``--max-steps``). Every run ends by writing
``OUT/latest/`` (``save_pretrained``), so the same command with ``--max-steps 0`` turns a committed
snapshot into a loadable directory (and leaves the snapshot untouched). Every
``--eval-every`` steps the reconstruction of held-apart chunks is measured (own latents vs
another chunk's) into ``OUT/curve.jsonl`` and the adapters are written to ``OUT/latest/``
(``save_pretrained``).

    nice -n 10 env PYTHONPATH=$PWD OMP_NUM_THREADS=1 python scripts/train_compressor.py \\
        --data /work/shared/data --out runs/compressor > runs/compressor.log 2>&1 &
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

import torch

from rhea.training.factqa import DEFAULT_BABI_TASKS
from rhea.training.guard import SkipCounter, advance_schedule, guarded_update


def parse_args(argv=None):
    from rhea.modeling.config import LATENT_INJECTIONS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="data directory in the shared/data layout (real replies)")
    p.add_argument("--out", default="runs/compressor")
    p.add_argument("--base-model", default="smollm2-135m")
    p.add_argument("--init-from", default=None, help="start from a save_pretrained directory instead of fresh adapters")
    p.add_argument("--injection", default="norm", choices=list(LATENT_INJECTIONS))
    p.add_argument("--n-mem", type=int, default=None,
                   help="<mem> slots per chunk (default 8; with --init-from, the directory's own count, and another "
                        "count resizes its slots: new ones start as copies of the trained ones)")
    p.add_argument("--lora-r", type=int, default=None,
                   help="rank of the compress LoRA (default 16; with --init-from, the directory's own rank, and a larger "
                        "one grows it: trained directions kept, new ones start at zero, alpha/r kept)")
    p.add_argument("--lora-alpha", type=int, default=None,
                   help="LoRA alpha of a fresh run (default 32); with --init-from it follows the rank (alpha/r kept)")
    p.add_argument("--targets", default="all-linear", help="'all-linear' or comma-separated module names")
    p.add_argument("--self-replies", action="append", default=[],
                   help="JSONL of the model's own replies (scripts/generate_replies.py), added to the training texts "
                        "only (the held-apart measure stays on real replies); repeatable")
    p.add_argument("--chunk-tokens", type=int, default=48, help="tokens per training text (and per held-apart eval text)")
    p.add_argument("--chunk-stride", type=int, default=None,
                   help="start a training text every N tokens of a reply (overlapping windows when N < --chunk-tokens: "
                        "more distinct training texts from the same replies); default: --chunk-tokens (consecutive "
                        "pieces). The held-apart texts stay each reply's first --chunk-tokens")
    p.add_argument("--compress-chunk-tokens", type=int, default=None,
                   help="compress each training/eval text in pieces of at most N tokens, n_mem latents each, and "
                        "reconstruct the whole text from all of its blocks (RheaConfig.compress_chunk_tokens, recorded in "
                        "the saved directory so the policy compresses replies the same way); default: one block per text"),
    p.add_argument("--piece-embeddings", type=int, default=None,
                   help="with --compress-chunk-tokens: P learned offsets added to the <mem> read-out queries by piece "
                        "index, an order signal between a text's blocks (RheaConfig.compress_piece_embeddings; with "
                        "--init-from the directory's offsets are kept and grown, new ones copying its last or zero); "
                        "default: the --init-from directory's count, else 0")
    p.add_argument("--piece-lr", type=float, default=None,
                   help="peak learning rate of the piece offsets (--piece-embeddings), which start at zero beside "
                        "trained weights and move too little at a fine-tuning --lr; default: --lr")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3,
                   help="peak learning rate; resuming a checkpoint with another --lr continues at it, AdamW moments kept")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--max-steps", type=int, default=100000)
    p.add_argument("--cooldown", type=int, default=0,
                   help="let the learning rate fall linearly to 0 over the last N steps before --max-steps (a "
                        "resumed run can add one once its curve flattens); default 0: constant after warm-up")
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-n", type=int, default=48)
    p.add_argument("--snapshot-dir", default=None,
                   help="committable snapshot (bf16 trainable weights, step, curve); resumed when OUT has no checkpoint")
    p.add_argument("--snapshot-every", type=int, default=250)
    p.add_argument("--train-generate", action="store_true", help="also train the generate adapter (off: ICAE-style frozen decoder)")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast (on a CPU only where it has native bf16, e.g. AVX512-BF16/AMX: on an AVX2-only "
                        "AMD EPYC a step took 400 s instead of 6 s)")
    p.add_argument("--tf32", action="store_true",
                   help="TF32 matrix products on a CUDA GPU (fp32 weights and activations, 10-bit mantissa inputs to "
                        "the tensor cores); the GPU recipe's precision since bf16 autocast sent a Qwen run to NaN")
    p.add_argument("--max-skipped", type=int, default=10,
                   help="stop with NonFiniteTrainingError after this many steps in a row with a non-finite loss or "
                        "gradient norm (each is skipped, the weights untouched); 0 = never stop")
    p.add_argument("--device", default="auto", help="auto (a CUDA GPU if torch sees one, else the CPU), cpu, cuda, cuda:N")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="stop cleanly after this many minutes of training (checkpoint and snapshot written), e.g. to "
                        "fit a time-limited call on a lent GPU; the same command continues")
    p.add_argument("--rebatch", action="store_true",
                   help="resume a --snapshot-dir written at another --batch (a CPU run at batch 4 continued on a GPU at "
                        "32, or back): its weights and step count carry over, later steps take --batch items each, and "
                        "the snapshot's state.json lists the batch of every stretch (batch_history)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--content-weight", type=float, default=0.0,
                   help="weight each reconstructed token by how badly the frozen decoder predicts it from another "
                        "chunk's latents (its loss under the control, normalised to mean 1 over the batch), mixed in at "
                        "this share: 0 = plain reconstruction (default), 1 = fully weighted. Puts the gradient on the "
                        "tokens the latents must carry (names, numbers) rather than those the prefix already gives")
    p.add_argument("--qa-share", type=float, default=0.0,
                   help="share of each batch that is fact-QA through the latents (ICAE's fine-tuning stage, "
                        "rhea.training.factqa) instead of auto-encoding: 0 = pre-training only, 1 = fine-tuning only")
    p.add_argument("--babi", default=None,
                   help="bAbI en 1k folder (e.g. shared/data/babi_en_1k) adding its stories' questions to the fact-QA "
                        "items; without it the items are cloze questions on the real replies only")
    p.add_argument("--babi-tasks", default=",".join(map(str, DEFAULT_BABI_TASKS)),
                   help="comma-separated bAbI task numbers (default: the single-fact lookups)")
    p.add_argument("--qa-eval-n", type=int, default=32, help="held-apart fact-QA items measured at each eval")
    args = p.parse_args(argv)
    if args.compress_chunk_tokens is not None and args.compress_chunk_tokens < 1:
        p.error(f"--compress-chunk-tokens {args.compress_chunk_tokens} must be >= 1")
    if args.compress_chunk_tokens is not None and args.content_weight > 0:
        p.error("--content-weight reads another row's latents as the control, which needs one block per text; "
                "it cannot be combined with --compress-chunk-tokens")
    if args.compress_chunk_tokens is not None and args.qa_share > 0:
        p.error("--qa-share compresses each fact-QA reply as one block; it cannot be combined with "
                "--compress-chunk-tokens yet")
    if args.piece_lr is not None and not args.piece_embeddings:
        p.error("--piece-lr sets the learning rate of the piece offsets; pass --piece-embeddings as well")
    if args.chunk_stride is not None and args.chunk_stride < 1:
        p.error(f"--chunk-stride {args.chunk_stride} must be >= 1")
    if args.piece_embeddings is not None and args.piece_embeddings < 0:
        p.error(f"--piece-embeddings {args.piece_embeddings} must be >= 0")
    if args.piece_embeddings and args.compress_chunk_tokens is None:
        p.error("--piece-embeddings orders the blocks of a text compressed in pieces; pass --compress-chunk-tokens "
                "as well (without it every text is one block and only offset 0 would be trained)")
    if args.lora_r is not None and args.lora_r < 1:
        p.error(f"--lora-r {args.lora_r} must be >= 1")
    if args.max_skipped < 0:
        p.error(f"--max-skipped {args.max_skipped} must be >= 0 (0: never stop)")
    if not 0 <= args.cooldown <= args.max_steps:
        p.error(f"--cooldown {args.cooldown} must be between 0 and --max-steps {args.max_steps} (the steps over which "
                "the learning rate falls to 0 before --max-steps)")
    if not 0.0 <= args.content_weight <= 1.0:
        p.error(f"--content-weight {args.content_weight} must be in [0, 1]")
    if args.content_weight > 0 and args.batch - round(args.batch * args.qa_share) < 2:
        p.error("--content-weight needs at least 2 reconstruction rows per step (the control is another row's latents); "
                "raise --batch or lower --qa-share")
    if not 0.0 <= args.qa_share <= 1.0:
        p.error(f"--qa-share {args.qa_share} must be in [0, 1]")
    if args.qa_share > 0 and round(args.batch * args.qa_share) == 0:
        p.error(f"--qa-share {args.qa_share} x --batch {args.batch} rounds to no fact-QA item per step; raise either")
    if args.babi and not Path(args.babi).is_dir():
        p.error(f"--babi {args.babi} is not a directory; pass the folder holding qa1_*_test.txt (shared/data/babi_en_1k)")
    try:
        args.babi_tasks = [int(t) for t in str(args.babi_tasks).split(",") if t.strip()]
    except ValueError:
        p.error(f"--babi-tasks {args.babi_tasks!r} must be comma-separated integers, e.g. 1,4,5")
    return args


def build(args):
    """(model, train chunks, eval texts)."""
    from rhea.modeling import RheaConfig, RheaForCausalLM, load_base_model
    from rhea.training.compressor import chunk_texts, load_reply_texts, load_self_replies, split_held_apart

    from rhea.modeling.loading import resolve_device

    device = resolve_device(args.device)
    if args.init_from:
        model = RheaForCausalLM.from_pretrained(args.init_from, base_model=args.base_model)
        if args.n_mem is None:
            args.n_mem = model.n_mem
        elif args.n_mem != model.n_mem:  # a capacity warm start: the new slots start as copies of the trained ones
            print(f"[compressor] --init-from has n_mem {model.n_mem}; resizing its read-out slots to {args.n_mem}",
                  flush=True)
            model.resize_mem_slots(args.n_mem)
        rank = model.lora_rank("compress")
        if args.lora_r is not None and args.lora_r != rank:  # a capacity warm start of the compress LoRA
            if args.lora_r < rank:
                raise SystemExit(f"--lora-r {args.lora_r} is below the rank {rank} of --init-from's compress adapter; "
                                 "a warm start can only grow it (leave --lora-r out to keep it)")
            print(f"[compressor] --init-from has a compress LoRA of rank {rank}; growing it to {args.lora_r}", flush=True)
            model.resize_lora_rank("compress", args.lora_r, seed=args.seed)
        args.lora_r = model.lora_rank("compress")
        alpha = model.peft_model.peft_config["compress"].lora_alpha
        if args.lora_alpha is not None and args.lora_alpha != alpha:
            raise SystemExit(f"--lora-alpha {args.lora_alpha}: with --init-from the compress adapter's alpha follows its "
                             f"rank (alpha/r kept), which gives {alpha}; leave --lora-alpha out")
        args.lora_alpha = alpha
        pieces = model.config.compress_piece_embeddings
        if args.piece_embeddings is not None and args.piece_embeddings != pieces:  # exact: new offsets copy the old last
            print(f"[compressor] --init-from has {pieces} piece offsets; giving it {args.piece_embeddings}", flush=True)
            model.resize_piece_embeddings(args.piece_embeddings)
        args.piece_embeddings = model.config.compress_piece_embeddings
    else:
        args.lora_r = 16 if args.lora_r is None else args.lora_r
        args.lora_alpha = 32 if args.lora_alpha is None else args.lora_alpha
        base, tok = load_base_model(args.base_model)
        targets = args.targets if args.targets == "all-linear" else args.targets.split(",")
        args.n_mem = 8 if args.n_mem is None else args.n_mem
        args.piece_embeddings = args.piece_embeddings or 0
        rc = RheaConfig(n_mem=args.n_mem, lora_r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                        target_modules=targets, latent_injection=args.injection,
                        compress_piece_embeddings=args.piece_embeddings)
        model = RheaForCausalLM.from_base(base, tok, rc)
    model.to(device)
    texts = load_reply_texts(args.data)
    train_src, test_src = split_held_apart(texts)
    # the model's own replies answer prompts whose real replies are not in `texts` (generate_replies.py),
    # so all of them may train without touching the held-apart set
    train_src = train_src + [t for path in args.self_replies for t in load_self_replies(path)]
    least = min(8, args.chunk_tokens)  # chunk_texts leaves out pieces shorter than this
    train = chunk_texts(model.tokenizer, train_src, max_tokens=args.chunk_tokens, min_tokens=least, stride=args.chunk_stride)
    test = chunk_texts(model.tokenizer, test_src, max_tokens=args.chunk_tokens, min_tokens=least, first_only=True)
    if not train or not test:
        raise SystemExit(f"--data {args.data} gives {len(train)} training and {len(test)} held-apart chunks of at least "
                         f"{least} tokens; both must be non-empty (more replies, or a smaller --chunk-tokens)")
    rng = random.Random(1234)
    rng.shuffle(test)
    qa_train, qa_eval = build_qa(args, train, chunk_texts(model.tokenizer, test_src, max_tokens=args.chunk_tokens,
                                                          min_tokens=least))
    return model, train, [c.text for c in test[: args.eval_n]], qa_train, qa_eval


def build_qa(args, train_chunks, held_chunks) -> tuple[list, list]:
    """(training, held-apart) fact-QA items: cloze questions on the reply chunks of each side, plus bAbI
    questions split by story (at most as many as cloze items, when there are any); the held-apart list alternates the two
    sources. Empty when --qa-share is 0."""
    from rhea.training.factqa import cloze_qa, load_babi_qa, split_items

    if args.qa_share == 0:
        return [], []
    train = cloze_qa(train_chunks, seed=args.seed)
    held = cloze_qa(held_chunks, seed=args.seed)
    babi_train, babi_held = split_items(load_babi_qa(args.babi, args.babi_tasks)) if args.babi else ([], [])
    rng = random.Random(4321)
    # as many bAbI questions as cloze items, so the few places and people of bAbI do not dominate the stage
    if train:
        babi_train = rng.sample(babi_train, min(len(babi_train), len(train)))
    rng.shuffle(held)
    rng.shuffle(babi_held)
    alternating = itertools.chain.from_iterable(itertools.zip_longest(held, babi_held))
    qa_eval = [it for it in alternating if it is not None][: args.qa_eval_n]
    if not train + babi_train or len(qa_eval) < 2:
        raise SystemExit(f"--qa-share {args.qa_share}: {len(train)} training and {len(qa_eval)} held-apart fact-QA "
                         "items; need training items and at least 2 held apart (more replies, or --babi)")
    return train + babi_train, qa_eval


def fresh_init(model, train, seed: int) -> None:
    """Distinct `<mem>` read-out queries (embeddings of distinct random tokens) and the injector centre."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.base_vocab_size or model.base_model.get_input_embeddings().weight.shape[0]
    rows = torch.randperm(vocab, generator=g)[: model.n_mem]
    with torch.no_grad():
        model.mem_slot_embeds.copy_(model.base_model.get_input_embeddings().weight[rows].to(model.mem_slot_embeds.dtype))
        if model.latent_injector is not None:
            lat = model.compress([c.text for c in train[:32]], batch_size=8)
            model.latent_injector.fit_center(model.score_view(lat))


def trainable(model, train_generate: bool):
    for name, p in model.peft_model.named_parameters():
        if "lora_" in name and ".generate." in name:
            p.requires_grad_(train_generate)
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def generate_is_identity(model) -> bool:
    """True when every generate-adapter LoRA B matrix is zero (a fresh adapter): the generate pass is then
    the plain base model, and skipping its LoRA branches gives the same loss ~10% cheaper on CPU."""
    return all(not p.any() for n, p in model.peft_model.named_parameters() if ".generate." in n and "lora_B" in n)


def lr_factor(step: int, args, start: int = 0) -> float:
    """The learning-rate multiplier at this optimizer's step `step` (its own count: a run resumed from a snapshot
    starts a fresh AdamW at training step `start`): linear warm-up over ``--warmup`` of the optimizer's steps, then 1,
    then (``--cooldown N``) a linear fall to 0 over the last N *training* steps before ``--max-steps`` (training step
    ``start + step``).

    >>> import argparse
    >>> a = argparse.Namespace(warmup=10, cooldown=100, max_steps=1000)
    >>> [round(lr_factor(s, a), 3) for s in (0, 9, 500, 900, 950, 999)]
    [0.1, 1.0, 1.0, 1.0, 0.5, 0.01]
    >>> [round(lr_factor(s, a, start=900), 3) for s in (0, 4, 9, 50, 99)]  # resumed at 900: warm-up inside the fall
    [0.1, 0.48, 0.91, 0.5, 0.01]
    """
    factor = min(1.0, (step + 1) / max(1, args.warmup))
    if getattr(args, "cooldown", 0):
        factor *= min(1.0, max(0.0, (args.max_steps - start - step) / args.cooldown))
    return factor


def save_checkpoint(out: Path, params: dict, opt, sched, step: int) -> None:
    tmp = out / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"params": {n: p.detach().cpu() for n, p in params.items()}, "opt": opt.state_dict(),
                "sched": sched.state_dict(), "step": step, "torch_rng": torch.get_rng_state()}, tmp / "state.pt")
    # (the optimizer state is saved on the parameters' device; torch.load maps it back with map_location)
    final = out / "checkpoint"
    old = out / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


#: settings a snapshot must share with the run that resumes it (others, e.g. --threads, may change)
SNAPSHOT_KEYS = ("base_model", "injection", "n_mem", "lora_r", "lora_alpha", "targets", "chunk_tokens", "chunk_stride", "compress_chunk_tokens",
                 "piece_embeddings", "batch",
                 "train_generate", "seed", "self_replies", "qa_share", "babi", "babi_tasks", "content_weight")


def content_weighted_loss(model, batch: dict, latents: torch.Tensor, share: float) -> torch.Tensor:
    """Reconstruction loss with each target token weighted by its loss under the control (every row reads the
    next row's latents, no gradient): ``w = (1 - share) + share * c / mean(c)`` over the batch's target tokens.
    A token the decoder predicts from the prompt and prefix alone (a function word, the reply's opening) weighs
    little; one only the right latents can give (a name, a number) weighs more. The mean weight is 1, so the
    loss keeps the plain loss's scale."""
    import torch.nn.functional as F

    ids, mask = batch["input_ids"].to(model.device), batch["attention_mask"].to(model.device)
    labels = batch["labels"].to(model.device)[:, 1:]
    keep = labels != -100
    with torch.no_grad():
        control = model(input_ids=ids, latent_embeds=latents.detach().roll(1, dims=0), attention_mask=mask).logits
        c = F.cross_entropy(control[:, :-1].float().transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
        weight = (1.0 - share) + share * c / c.mean().clamp(min=1e-6)
    logits = model(input_ids=ids, latent_embeds=latents, attention_mask=mask).logits
    own = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), labels.clamp(min=0), reduction="none")[keep]
    return (weight * own).sum() / weight.sum()


def save_snapshot(dir_: Path, out: Path, params: dict, step: int, args) -> None:
    """Write the committable snapshot atomically (a temporary directory renamed over the old one)."""
    from safetensors.torch import save_file

    tmp = dir_.with_name(dir_.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({n: p.detach().to(torch.bfloat16).contiguous().cpu() for n, p in params.items()},
              str(tmp / "trainable.safetensors"))
    state = {"step": step, "settings": {k: getattr(args, k) for k in SNAPSHOT_KEYS},
             "batch_history": batch_history(out, args),
             "note": "bf16 trainable weights of scripts/train_compressor.py; optimizer moments not kept"}
    (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    if (out / "curve.jsonl").is_file():
        shutil.copyfile(out / "curve.jsonl", tmp / "curve.jsonl")
    log = merged_log(dir_ / "log.jsonl", out / "log.jsonl")
    if log:
        (tmp / "log.jsonl").write_text("".join(log))
    old = dir_.with_name(dir_.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dir_.exists():
        dir_.rename(old)
    tmp.rename(dir_)
    shutil.rmtree(old, ignore_errors=True)


def merged_log(earlier: Path, current: Path) -> list[str]:
    """The per-step log a snapshot keeps: the lines of its earlier log before this run's first step, then this run's
    (OUT/log.jsonl, which starts after the step the run resumed from), so a resumed run extends the record."""
    def lines(path: Path) -> list[str]:
        return [x + "\n" for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []

    new = lines(current)
    first = min((json.loads(x)["step"] for x in new), default=math.inf)
    return [x for x in lines(earlier) if json.loads(x)["step"] < first] + new


def load_snapshot(dir_: Path, out: Path, params: dict, args) -> int:
    """Copy a snapshot's weights into `params` (and its curve into OUT); returns its step."""
    from safetensors.torch import load_file

    state = json.loads((dir_ / "state.json").read_text())
    defaults = vars(parse_args(["--data", str(args.data)]))  # a key an older snapshot lacks had its default
    defaults["piece_embeddings"] = 0  # resolved after parsing (None = the --init-from directory's count)
    saved = {k: state["settings"].get(k, defaults[k]) for k in SNAPSHOT_KEYS}
    differ = {k: (v, getattr(args, k)) for k, v in saved.items() if not _same_setting(k, v, getattr(args, k))}
    if args.rebatch:
        differ.pop("batch", None)
    if differ:
        raise SystemExit(f"snapshot {dir_} was trained with other settings (snapshot, now): {differ}; "
                         "pass the snapshot's settings or another --snapshot-dir"
                         + ("; --rebatch continues it at this --batch" if "batch" in differ else ""))
    weights = load_file(str(dir_ / "trainable.safetensors"))
    if set(weights) != set(params):
        raise SystemExit(f"snapshot {dir_} holds {len(weights)} tensors, this model trains {len(params)}; "
                         "the model or adapter layout changed since it was written")
    with torch.no_grad():
        for n, v in weights.items():
            params[n].copy_(v.to(params[n].dtype))
    if (dir_ / "curve.jsonl").is_file() and not (out / "curve.jsonl").is_file():
        shutil.copyfile(dir_ / "curve.jsonl", out / "curve.jsonl")
    history = state.get("batch_history") or [[0, saved["batch"]]]
    if history[-1][1] != args.batch:
        history.append([int(state["step"]), args.batch])
        print(f"[compressor] --rebatch: the snapshot trained at batch {saved['batch']} to step {state['step']}; "
              f"steps after it take {args.batch} items", flush=True)
    (out / "batch_history.json").write_text(json.dumps(history) + "\n")
    return int(state["step"])


def _same_setting(key: str, saved, now) -> bool:
    """Whether a snapshot's setting matches this run's: the bAbI folder by its name (the same data staged at another
    path, e.g. on a lent GPU), the rest exactly."""
    if key == "babi" and saved and now:
        return Path(saved).name == Path(now).name
    return saved == now


def batch_history(out: Path, args) -> list:
    """[[first step, batch], ...] of this run's lineage (one stretch unless a snapshot was resumed with --rebatch)."""
    f = out / "batch_history.json"
    return json.loads(f.read_text()) if f.is_file() else [[0, args.batch]]


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from rhea.training.compressor import autoencode_batch, mean_ci, reconstruction_scores
    from rhea.training.factqa import factqa_loss, factqa_scores

    model, train, eval_texts, qa_train, qa_eval = build(args)
    ckpt = out / "checkpoint" / "state.pt"
    snap = Path(args.snapshot_dir) if args.snapshot_dir else None
    from_snapshot = not ckpt.is_file() and snap is not None and (snap / "state.json").is_file()
    resuming = ckpt.is_file() or from_snapshot
    if not resuming and not args.init_from:
        fresh_init(model, train, args.seed)
    params = trainable(model, args.train_generate)
    # the piece offsets (if any) get their own group: a fresh parameter beside trained ones may need a higher lr
    lrs = [args.lr] + ([args.piece_lr or args.lr] if "mem_piece_embeds" in params else [])
    groups = [{"params": [p for n, p in params.items() if n != "mem_piece_embeds"], "lr": lrs[0]}]
    if len(lrs) > 1:
        groups.append({"params": [params["mem_piece_embeds"]], "lr": lrs[1]})
    opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0.0)
    origin = {"step": 0}  # the training step at which this optimizer (and the scheduler's count) started
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, args, origin["step"]))
    step = 0
    if from_snapshot:
        step = load_snapshot(snap, out, params, args)
        origin["step"] = step
        for g, lr in zip(opt.param_groups, lrs):  # the scheduler set its first rate before the step was known
            g["lr"] = lr * lr_factor(0, args, step)
        print(f"[compressor] resumed from snapshot {snap} at step {step} (fresh AdamW, lr warm-up again)", flush=True)
    elif resuming:
        state = torch.load(ckpt, weights_only=False, map_location=model.device)
        with torch.no_grad():
            for n, v in state["params"].items():
                params[n].copy_(v)
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step = state["step"]
        origin["step"] = step - sched.last_epoch  # a checkpoint of a run that began at a snapshot counts from there
        torch.set_rng_state(state["torch_rng"].cpu())
        if not all(math.isclose(a, b) for a, b in zip(sched.base_lrs, lrs)):  # e.g. a lower lr once the curve flattens
            print(f"[compressor] lr {sched.base_lrs[0]:g} -> {args.lr:g} from step {step} (AdamW moments kept)", flush=True)
            sched.base_lrs = list(lrs)
        for g, lr in zip(opt.param_groups, lrs):  # the factor of this command's schedule (--cooldown may be new)
            g["initial_lr"] = lr
            g["lr"] = lr * lr_factor(sched.last_epoch, args, origin["step"])
    first_step = step
    (out / "args.json").write_text(json.dumps(vars(args), indent=2))
    print(f"[compressor] {len(train)} train chunks, {len(eval_texts)} held-apart eval chunks, "
          f"{len(qa_train)} fact-QA items ({len(qa_eval)} held apart), "
          f"{sum(p.numel() for p in params.values())} trainable params, start step {step}", flush=True)
    n_qa = round(args.batch * args.qa_share)
    # No gradient checkpointing here: at 48-token chunks activations are small, and the recipe's
    # recorded runs were made without it (rhea.training.recompute makes it correct across adapters).

    curve_path = out / "curve.jsonl"
    need_raw = not (curve_path.is_file() and '"qa_raw"' in curve_path.read_text())
    skips = SkipCounter(args.max_skipped)  # updates skipped for a non-finite loss or gradient (this command's)

    def evaluate(at: int, loss: float | None) -> None:
        nonlocal need_raw
        model.eval()
        t = time.perf_counter()
        s = reconstruction_scores(model, eval_texts, chunk_tokens=args.compress_chunk_tokens)
        own, ctl = mean_ci(s["own"]), mean_ci(s["control"])
        gap = mean_ci([a - b for a, b in zip(s["own"], s["control"])])
        row = {"step": at, "loss": loss, "own": own["mean"], "control": ctl["mean"], "gap": gap["mean"],
               "gap_lo": gap["lo"], "gap_hi": gap["hi"], "n": own["n"], "skipped_steps": skips.total}
        if qa_eval:
            q = factqa_scores(model, qa_eval, raw=need_raw)
            qa_gap = mean_ci([float(a["exact"]) - float(b["exact"]) for a, b in zip(q["own"], q["control"])])
            row.update({"qa_own": mean_ci([float(a["exact"]) for a in q["own"]])["mean"],
                        "qa_control": mean_ci([float(b["exact"]) for b in q["control"]])["mean"],
                        "qa_gap": qa_gap["mean"], "qa_gap_lo": qa_gap["lo"], "qa_gap_hi": qa_gap["hi"],
                        "qa_n": qa_gap["n"]})
            if need_raw:  # the reply as text, once a run: what the latents are measured against (frozen decoder)
                row["qa_raw"] = mean_ci([float(r["exact"]) for r in q["raw"]])["mean"]
                need_raw = False
        row["eval_s"] = round(time.perf_counter() - t, 1)
        with open(curve_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"[compressor] eval {row}", flush=True)
        write_latest(at)
        model.train()

    def write_latest(at: int) -> None:
        """The adapters as a `RheaForCausalLM` directory (what benchmarks/reconstruction.py and the policy load)."""
        model.config.extra["adapters_trained"] = at > 0
        model.config.compress_chunk_tokens = args.compress_chunk_tokens  # the policy compresses as trained
        model.config.extra["training"] = {"recipe": "scripts/train_compressor.py", "data": str(args.data),
                                          "self_replies": list(args.self_replies), "optimizer_steps": at,
                                          "chunk_tokens": args.chunk_tokens, "chunk_stride": args.chunk_stride,
                                          "train_generate": args.train_generate,
                                          "qa_share": args.qa_share, "babi": args.babi,
                                          "content_weight": args.content_weight,
                                          "babi_tasks": args.babi_tasks if args.babi else None}
        model.save_pretrained(out / "latest")

    if not resuming:
        evaluate(0, None)
    model.train()
    per_epoch = len(train) // args.batch
    window, t_last = [], time.perf_counter()
    import contextlib

    # A frozen, still-zero generate adapter is the base model: run the reconstruction without its LoRA branches.
    plain_decoder = not args.train_generate and generate_is_identity(model)
    decoder = model.peft_model.disable_adapter if plain_decoder else contextlib.nullcontext
    device_type = model.device.type
    autocast = torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.bf16)
    if args.tf32 and device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    deadline = time.monotonic() + 60 * args.max_minutes if args.max_minutes else None
    while step < args.max_steps:
        if deadline is not None and time.monotonic() >= deadline:
            print(f"[compressor] --max-minutes {args.max_minutes} reached at step {step}; the same command continues",
                  flush=True)
            break
        epoch, pos = divmod(step, per_epoch)
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch)).tolist()
        # the auto-encoding rows keep their place in the epoch's order; the fact-QA rows are drawn by step
        texts = [train[i].text for i in order[pos * args.batch:(pos + 1) * args.batch]][: args.batch - n_qa]
        qa = [qa_train[i] for i in random.Random(args.seed * 7919 + step).sample(range(len(qa_train)), n_qa)] if n_qa else []
        with autocast:
            loss = 0.0
            if texts:
                if args.compress_chunk_tokens is None:
                    latents = model.compress(texts)
                    b = autoencode_batch(model, texts)
                else:  # every piece's block, side by side before the prompt: the whole text from all of them
                    blocks = model.compress_replies(texts, chunk_tokens=args.compress_chunk_tokens)
                    latents = torch.cat(blocks)
                    b = autoencode_batch(model, texts, [x.shape[0] for x in blocks])
                with decoder():
                    if args.content_weight > 0:
                        loss = content_weighted_loss(model, b, latents, args.content_weight) * (len(texts) / args.batch)
                    else:
                        loss = model(input_ids=b["input_ids"].to(model.device), latent_embeds=latents,
                                     attention_mask=b["attention_mask"].to(model.device),
                                     labels=b["labels"].to(model.device)).loss * (len(texts) / args.batch)
            if qa:
                loss = loss + factqa_loss(model, qa, decoder=decoder) * (len(qa) / args.batch)
        outcome = guarded_update(loss, list(params.values()), opt, max_norm=1.0)
        advance_schedule(sched)
        step += 1
        entry = {"step": step, "loss": round(outcome.loss, 4), "grad_norm": round(outcome.grad_norm, 4)}
        if outcome.applied:
            window.append(outcome.loss)
        else:
            entry["skipped"] = True
            print(f"[compressor] step {step}: non-finite loss {outcome.loss} / gradient norm {outcome.grad_norm}; "
                  f"update skipped ({skips.total + 1} so far)", flush=True)
        now = time.perf_counter()
        entry["s"] = round(now - t_last, 2)
        with open(out / "log.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")
        skips.record(outcome, step, hint="Lower --lr, or drop --bf16 (fp32; --tf32 on a GPU).")
        t_last = now
        if step % args.save_every == 0:
            save_checkpoint(out, params, opt, sched, step)
        if snap is not None and step % args.snapshot_every == 0:
            save_snapshot(snap, out, params, step, args)
        if step % args.eval_every == 0:
            evaluate(step, sum(window) / len(window) if window else None)
            window = []
            t_last = time.perf_counter()
    save_checkpoint(out, params, opt, sched, step)
    # a run that trained nothing leaves an existing snapshot as it is (e.g. --max-steps 0 making OUT/latest)
    if snap is not None and (step > first_step or not (snap / "state.json").is_file()):
        save_snapshot(snap, out, params, step, args)
    # also when nothing ran (--max-steps at or below the resumed step): how a committed snapshot
    # becomes a loadable directory on a new machine
    write_latest(step)


if __name__ == "__main__":
    sys.exit(main())
