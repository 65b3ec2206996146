"""Choose the compressor's capacity by measurement: several `train_compressor.py` runs
side by side, one per variant, and their held-apart learning curves in one table and plot.

Each variant is a comma list of `train_compressor.py` settings (``n_mem=16,lora_r=32``,
``targets=q_proj,k_proj,v_proj,o_proj`` — a value may itself hold commas when it is the last
item); the flags in ``--common`` go to every run. Runs go to ``OUT/<variant>/`` and are started
``--parallel`` at a time (a 135M-parameter model leaves most of a GPU idle, so 3-4 runs share
one); each stops at ``--max-minutes`` (or its ``--max-steps``) and, rerun, continues where it
stopped. The summary compares the variants at the same step (the last step all of them reached)
and at their last measurement (``--no-train`` only summarises runs already in ``OUT``):

    python scripts/compressor_sweep.py --data DATA --out /root/runs/sweep --max-minutes 8 \\
        --common "--device cuda --bf16 --batch 32 --injection projector --eval-every 250 --eval-n 144" \\
        --variant n_mem=8,lora_r=16 --variant n_mem=16,lora_r=16 --variant n_mem=8,lora_r=32 \\
        --summary $OUT/compressor_capacity

Writes ``SUMMARY.json`` and ``SUMMARY.png`` (own-latent accuracy and the own − control gap
against steps, one line per variant).
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "scripts" / "train_compressor.py"


class SweepError(ValueError):
    """A variant or an option the sweep cannot run."""


def parse_variant(text: str) -> dict[str, str]:
    """``"n_mem=16,lora_r=32"`` -> ``{"n_mem": "16", "lora_r": "32"}``; a value may hold commas
    only as the last item (``targets=q_proj,v_proj``).

    >>> parse_variant("n_mem=16,targets=q_proj,v_proj")
    {'n_mem': '16', 'targets': 'q_proj,v_proj'}
    """
    out: dict[str, str] = {}
    key = None
    for part in text.split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            key = key.strip().replace("-", "_")
            if not re.fullmatch(r"[a-z_]+", key):
                raise SweepError(f"variant {text!r}: {key!r} is not a train_compressor.py setting name")
            out[key] = value.strip()
        elif key is None:
            raise SweepError(f"variant {text!r} must be name=value items separated by commas")
        else:
            out[key] += "," + part.strip()
    if not out:
        raise SweepError("an empty variant; give e.g. --variant n_mem=16")
    return out


def variant_name(settings: dict[str, str]) -> str:
    """A directory name for a variant: ``n_mem-16_lora_r-32``."""
    return "_".join(f"{k}-{re.sub(r'[^A-Za-z0-9.]+', '+', v)}" for k, v in settings.items())


def command(args, settings: dict[str, str], out: Path) -> list[str]:
    cmd = [sys.executable, str(TRAIN), "--data", args.data, "--out", str(out)] + shlex.split(args.common)
    for key, value in settings.items():
        cmd += [f"--{key.replace('_', '-')}", value]
    if args.max_minutes is not None:
        cmd += ["--max-minutes", str(args.max_minutes)]
    if args.snapshot_root:
        cmd += ["--snapshot-dir", str(Path(args.snapshot_root) / out.name)]
    return cmd


def read_curve(run: Path) -> list[dict]:
    path = run / "curve.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarise(variants: dict[str, dict], curves: dict[str, list[dict]]) -> dict:
    """Per variant: the last measurement and the one at the last step every variant reached."""
    reached = [max((r["step"] for r in c), default=-1) for c in curves.values()]
    common = min(reached) if reached else -1
    rows = []
    for name, curve in curves.items():
        last = curve[-1] if curve else None
        at_common = max((r for r in curve if r["step"] <= common), key=lambda r: r["step"], default=None)
        rows.append({"variant": name, "settings": variants[name], "last": last, "at_common_step": at_common})
    return {"common_step": common, "variants": rows}


def plot(summary: dict, curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, curve in curves.items():
        steps = [r["step"] for r in curve]
        a.plot(steps, [r["own"] for r in curve], marker="o", label=name)
        b.plot(steps, [r["gap"] for r in curve], marker="o", label=name)
        b.fill_between(steps, [r["gap_lo"] for r in curve], [r["gap_hi"] for r in curve], alpha=0.15)
    a.set(title="held-apart reconstruction: own latents", xlabel="step", ylabel="teacher-forced token accuracy")
    b.set(title="own − another chunk's latents (95% CI)", xlabel="step", ylabel="accuracy gap")
    a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="data directory in the shared/data layout")
    p.add_argument("--out", required=True, help="folder holding one run per variant")
    p.add_argument("--variant", action="append", required=True, help="name=value,... (repeat per variant)")
    p.add_argument("--common", default="", help="flags for every run, one string")
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--snapshot-root", default=None,
                   help="each variant's committable snapshot goes to SNAPSHOT_ROOT/<variant> (e.g. under $OUT)")
    p.add_argument("--summary", default=None, help="stem of SUMMARY.json / SUMMARY.png (default OUT/summary)")
    p.add_argument("--no-train", action="store_true",
                   help="start no run: summarise the curves already in OUT/<variant>/ (e.g. runs made one by one)")
    args = p.parse_args(argv)
    if args.parallel < 1:
        p.error("--parallel must be >= 1")
    if args.max_minutes is not None and args.max_minutes <= 0:
        p.error("--max-minutes must be > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    variants = {}
    for text in args.variant:  # checked before anything runs
        settings = parse_variant(text)
        name = variant_name(settings)
        if name in variants:
            raise SweepError(f"variant {text!r} is given twice")
        variants[name] = settings
    common = shlex.split(args.common)
    if any(f"--{k.replace('_', '-')}" in common for s in variants.values() for k in s):
        raise SweepError("a setting appears both in a variant and in --common; give it in one place")
    for own in ("--out", "--snapshot-dir", "--max-minutes"):
        if own in common:
            raise SweepError(f"{own} in --common would be shared by every variant; the sweep sets it per run "
                             "(--out, --snapshot-root, --max-minutes)")
    out = Path(args.out)
    if args.no_train:
        missing = [name for name in variants if not (out / name / "curve.jsonl").is_file()]
        if missing:
            raise SweepError(f"--no-train: no curve.jsonl in {[str(out / m) for m in missing]}; run those variants "
                             "first (without --no-train) or name the variants whose runs are in OUT")
    out.mkdir(parents=True, exist_ok=True)
    pending = [] if args.no_train else list(variants.items())
    running: list[tuple[str, subprocess.Popen]] = []
    failed = []
    while pending or running:
        while pending and len(running) < args.parallel:
            name, settings = pending.pop(0)
            log = open(out / f"{name}.log", "a")
            print(f"[sweep] start {name}", flush=True)
            running.append((name, subprocess.Popen(command(args, settings, out / name), stdout=log,
                                                   stderr=subprocess.STDOUT, cwd=ROOT)))
        time.sleep(0.2)
        for item in list(running):
            code = item[1].poll()
            if code is not None:
                running.remove(item)
                print(f"[sweep] {item[0]} exited {code}", flush=True)
                if code:
                    failed.append(item[0])
    curves = {name: read_curve(out / name) for name in variants}
    summary = summarise(variants, curves)
    summary["failed"] = failed
    stem = Path(args.summary) if args.summary else out / "summary"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(summary, curves, stem.with_suffix(".png"))
    for row in summary["variants"]:
        at = row["at_common_step"]
        print(f"[sweep] {row['variant']}: at step {summary['common_step']} own "
              f"{at['own'] if at else float('nan'):.3f} gap {at['gap'] if at else float('nan'):+.3f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
