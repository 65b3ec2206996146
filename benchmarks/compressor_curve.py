"""Learning curve of a compressor pre-training run (scripts/train_compressor.py) as JSON + PNG.

Reads ``RUN/log.jsonl`` (loss per step) and ``RUN/curve.jsonl`` (teacher-forced reconstruction
accuracy of held-apart chunks with own latents / another chunk's latents, every eval step; for a
run with ``--qa-share``, also the held-apart fact-QA answers own / another item's / raw, drawn in
a third panel).

    python benchmarks/compressor_curve.py --run runs/compressor --out benchmarks/results/compressor_curve
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def smooth(values: list[float], k: int = 20) -> list[float]:
    """Trailing mean over `k` steps.

    >>> smooth([1.0, 3.0, 5.0], k=2)
    [1.0, 2.0, 4.0]
    """
    out = []
    for i in range(len(values)):
        window = values[max(0, i - k + 1): i + 1]
        out.append(sum(window) / len(window))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="output directory of scripts/train_compressor.py")
    p.add_argument("--out", default="benchmarks/results/compressor_curve")
    args = p.parse_args(argv)
    run = Path(args.run)
    log, curve = read_jsonl(run / "log.jsonl"), read_jsonl(run / "curve.jsonl")
    if not curve:
        print(f"error: {run / 'curve.jsonl'} is missing or empty; is {run} a scripts/train_compressor.py run?", file=sys.stderr)
        return 2
    # a resumed run may repeat steps: keep the last record of each step
    log = list({r["step"]: r for r in log}.values())
    curve = list({r["step"]: r for r in curve}.values())
    run_args = json.loads((run / "args.json").read_text()) if (run / "args.json").is_file() else {}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"run_args": run_args, "curve": curve,
                                                    "loss": [{"step": r["step"], "loss": r["loss"]} for r in log]}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    qa = [r for r in curve if "qa_own" in r]
    fig, axes = plt.subplots(1, 3 if qa else 2, figsize=(15 if qa else 10, 3.6))
    a, b = axes[0], axes[1]
    if log:
        a.plot([r["step"] for r in log], [r["loss"] for r in log], alpha=0.3, label="loss")
        a.plot([r["step"] for r in log], smooth([r["loss"] for r in log]), label="loss (20-step mean)")
    a.set_xlabel("optimizer step")
    a.set_ylabel("training loss, reconstruction + fact-QA (nats/token)" if qa else "reconstruction loss (nats/token)")
    a.legend(fontsize=8)
    steps = [r["step"] for r in curve]
    b.plot(steps, [r["own"] for r in curve], "o-", label="own latents")
    b.plot(steps, [r["control"] for r in curve], "s-", label="another chunk's latents")
    b.fill_between(steps, [r["control"] + r["gap_lo"] for r in curve], [r["control"] + r["gap_hi"] for r in curve],
                   alpha=0.15, label="control + gap 95% CI")
    b.set_xlabel("optimizer step")
    b.set_ylabel("teacher-forced token accuracy")
    b.set_title(f"held-apart chunks (n={curve[-1]['n']})", fontsize=9)
    b.legend(fontsize=8)
    if qa:
        c, qs = axes[2], [r["step"] for r in qa]
        c.plot(qs, [r["qa_own"] for r in qa], "o-", label="own latents")
        c.plot(qs, [r["qa_control"] for r in qa], "s-", label="another item's latents")
        c.fill_between(qs, [r["qa_control"] + r["qa_gap_lo"] for r in qa], [r["qa_control"] + r["qa_gap_hi"] for r in qa],
                       alpha=0.15, label="control + gap 95% CI")
        raw = next((r["qa_raw"] for r in qa if "qa_raw" in r), None)
        if raw is not None:
            c.axhline(raw, color="grey", ls="--", lw=1, label="reply as text (frozen decoder)")
        c.set_xlabel("optimizer step")
        c.set_ylabel("answer exact (teacher-forced)")
        c.set_title(f"held-apart fact-QA items (n={qa[-1]['qa_n']})", fontsize=9)
        c.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print(json.dumps(curve[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
