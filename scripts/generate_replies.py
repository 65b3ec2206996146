"""The model's own replies to public prompts: varied real text for compressor pre-training.

ICAE-style auto-encoding learns best on the text the compressor will meet at inference: the
replies the model itself writes. This script has a zoo model answer the prompts of a data
directory in the shared/data layout and appends each reply to a JSONL file that
`rhea.training.compressor.load_self_replies` reads (``compressor.self_replies`` of `rhea train`).

Only prompts whose reference replies are *not* among the real replies the compressor is trained
and measured on (`rhea.training.compressor.REPLY_SOURCES`) are used, so no held-apart real
reply has a sibling (the model's answer to the same prompt) in training:

* MT-Bench questions without a GPT-4 reference answer (first turn);
* IFEval prompts (with their instructions) and the same tasks without instructions;
* MT-Eval global-instruction queries.

Each row is ``{"source": "<file>:<id>", "reply": ..., "model": ..., "settings": {...}}``; the
prompt itself is not stored (it stays in shared/data). Resumable: rows already in ``--out`` are
skipped, so the same command continues an interrupted run. Sampling is seeded per prompt.

    nice -n 10 python scripts/generate_replies.py --model smollm2-135m --data /work/shared/data \\
        --out data/self_replies/smollm2-135m.jsonl.gz
"""
from __future__ import annotations

import argparse
import hashlib
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (file under the data directory, how to read its prompts)
PROMPT_SOURCES = ("mt_bench/question.jsonl", "ifeval/input_data.jsonl", "ifeval/msft_input_data_no_instr.jsonl",
                  "mt_eval/raw_global_inst.jsonl")


class PromptDataError(ValueError):
    """The data directory holds no usable prompt file, or a prompt file is malformed."""


def _jsonl(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PromptDataError(f"{path} is not valid JSONL ({e})") from e


def load_prompts(data_dir: str | Path) -> list[tuple[str, str]]:
    """``[(source, prompt)]`` from the files of `PROMPT_SOURCES` present under `data_dir`.

    MT-Bench questions that have a reference answer in ``mt_bench/reference_answer_gpt-4.jsonl``
    are left out (those answers are training/held-apart real replies).
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise PromptDataError(f"data directory {root} does not exist (pass the shared/data folder)")
    ref = root / "mt_bench" / "reference_answer_gpt-4.jsonl"
    with_reference = {r.get("question_id") for r in _jsonl(ref)} if ref.is_file() else set()
    out: list[tuple[str, str]] = []
    for name in PROMPT_SOURCES:
        path = root / name
        if not path.is_file():
            continue
        for i, rec in enumerate(_jsonl(path)):
            if name.startswith("mt_bench/"):
                if rec.get("question_id") in with_reference or not rec.get("turns"):
                    continue
                key, prompt = rec["question_id"], rec["turns"][0]
            elif name.startswith("ifeval/"):
                key, prompt = rec.get("key", i), rec.get("prompt")
            else:
                key, prompt = rec.get("id", i), rec.get("query")
            if isinstance(prompt, str) and prompt.strip():
                out.append((f"{name}:{key}", prompt.strip()))
    if not out:
        raise PromptDataError(f"{root} holds none of {list(PROMPT_SOURCES)}; pass a directory in the shared/data layout")
    return out


def done_sources(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    return {json.loads(line)["source"] for line in _text(path).splitlines() if line.strip()}


def _text(path: Path) -> str:
    """A JSONL file's text, plain or gzipped (``.gz``: appended to as gzip members, read back as one)."""
    return gzip.decompress(path.read_bytes()).decode("utf-8") if path.name.endswith(".gz") else path.read_text(encoding="utf-8")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="zoo name or local model directory")
    p.add_argument("--data", required=True, help="data directory in the shared/data layout")
    p.add_argument("--out", required=True, help="JSONL file to append to (resumed if it exists; gzipped when it ends in .gz)")
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--temperature", type=float, default=0.7, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--limit", type=int, default=None, help="at most this many prompts (a prefix of the list)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for flag in ("max_new_tokens", "batch", "threads"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        p.error("--temperature must be >= 0 and --top-p in (0, 1]")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    prompts = load_prompts(args.data)[: args.limit]  # validated before the model loads
    out = Path(args.out)
    done = done_sources(out)
    todo = [(s, p) for s, p in prompts if s not in done]
    print(f"[replies] {len(prompts)} prompts, {len(done)} already in {out}, {len(todo)} to generate", flush=True)
    if not todo:
        return 0

    import torch

    from rhea.modeling import load_base_model
    from rhea.modeling.loading import resolve_device

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model, tok = load_base_model(args.model)
    model.to(device).eval()
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    rendered = [(s, tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                            add_generation_prompt=True)) for s, p in todo]
    rendered.sort(key=lambda sp: len(sp[1]))  # similar lengths share a batch: less padding
    settings = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
                "seed": args.seed}
    out.parent.mkdir(parents=True, exist_ok=True)
    t0, written = time.perf_counter(), 0
    for b in range(0, len(rendered), args.batch):
        chunk = rendered[b:b + args.batch]
        enc = tok([t for _, t in chunk], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        # one seed per batch, from its first prompt (a resumed run forms its batches anew, so its draws
        # differ from an unbroken run's; each row records the settings, not the draw)
        seed = int(hashlib.sha256(f"{args.seed}:{chunk[0][0]}".encode()).hexdigest()[:8], 16)
        torch.manual_seed(seed)
        kwargs = dict(do_sample=True, temperature=args.temperature, top_p=args.top_p) if args.temperature > 0 \
            else dict(do_sample=False)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id, **kwargs)
        rows = []
        for (source, _), ids in zip(chunk, gen[:, enc["input_ids"].shape[1]:]):
            reply = tok.decode(ids, skip_special_tokens=True).strip()
            if reply:
                rows.append({"source": source, "reply": reply, "model": args.model, "settings": settings})
        with (gzip.open(out, "at", encoding="utf-8") if str(out).endswith(".gz") else open(out, "a", encoding="utf-8")) as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        written += len(rows)
        print(f"[replies] {b + len(chunk)}/{len(rendered)} ({written} written, "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
