"""Learning curve of a compressor training run (`rhea train`, ``run.stage: compressor``) as JSON + PNG.

Reads ``RUN/metrics.jsonl`` (loss per step, ``loss/total``) and ``RUN/curve.jsonl`` (teacher-forced
reconstruction accuracy of held-apart chunks with own latents / another chunk's latents, every eval step;
for a run with ``compressor.qa_share``, also the held-apart fact-QA answers own / another item's / raw,
drawn in a third panel). The per-step ``log.jsonl`` of runs recorded before the trainer stage is read too.

    python benchmarks/compressor_curve.py --run runs/compressor-smollm2-135m --out benchmarks/results/compressor_curve

``--compare LABEL=DIR[@STEP]`` (repeatable) draws other runs' held-apart reconstruction beside it in
a last panel, e.g. a capacity warm start (``model.init_from`` another run's step 1,800 with more
``model.n_mem`` and ``model.init_resize``) placed at that step of the first run's axis with ``@1800``:

    python benchmarks/compressor_curve.py --run runs/compressor_states_lr \
        --compare "n_mem 16=runs/compressor_states_n16@1800" --out benchmarks/results/compressor_capacity
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from rhea.storage import output_file


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


def parse_compare(spec: str) -> tuple[str, Path, int]:
    """``LABEL=DIR[@STEP]`` -> (label, run directory, step offset).

    >>> parse_compare("n_mem 16=runs/x@1800")
    ('n_mem 16', PosixPath('runs/x'), 1800)
    >>> parse_compare("runs/y")
    Traceback (most recent call last):
    ...
    ValueError: --compare 'runs/y' must be LABEL=DIR or LABEL=DIR@STEP, e.g. "n_mem 16=runs/compressor_n16@1800"
    """
    label, sep, rest = spec.partition("=")
    where, _, offset = rest.rpartition("@") if "@" in rest else (rest, "", "0")
    if not sep or not label.strip() or not where or not offset.isdigit():
        raise ValueError(f"--compare {spec!r} must be LABEL=DIR or LABEL=DIR@STEP, e.g. "
                         '"n_mem 16=runs/compressor_n16@1800"')
    return label.strip(), Path(where), int(offset)


def step_losses(run: Path) -> list[dict]:
    """``{"step", "loss"}`` per optimizer step: the trainer's ``metrics.jsonl`` (``loss/total``), or the
    ``log.jsonl`` of an earlier run."""
    rows = read_jsonl(run / "metrics.jsonl")
    if rows:
        return [{"step": r["step"], "loss": r["loss/total"]} for r in rows if "loss/total" in r]
    return read_jsonl(run / "log.jsonl")


def run_settings(run: Path) -> dict:
    """The run's settings: the trainer's ``config.json`` (or an earlier run's ``args.json``); {} when neither."""
    for name in ("config.json", "args.json"):
        if (run / name).is_file():
            return json.loads((run / name).read_text())
    return {}


def last_per_step(rows: list[dict]) -> list[dict]:
    """A resumed run may repeat steps: keep the last record of each step."""
    return list({r["step"]: r for r in rows}.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="run.output_dir of a compressor-stage `rhea train` run")
    p.add_argument("--out", default="benchmarks/results/compressor_curve")
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=DIR[@STEP]",
                   help="another run's held-apart reconstruction in a last panel, its steps shifted by STEP")
    args = p.parse_args(argv)
    run = Path(args.run)
    try:
        compare = [parse_compare(c) for c in args.compare]
    except ValueError as e:
        p.error(str(e))
    others = []
    for label, where, offset in compare:
        other = last_per_step(read_jsonl(where / "curve.jsonl"))
        if not other:
            p.error(f"--compare {label!r}: {where / 'curve.jsonl'} is missing or empty")
        others.append({"label": label, "run": str(where), "offset": offset,
                       "run_args": run_settings(where),
                       "curve": other})
    log, curve = step_losses(run), read_jsonl(run / "curve.jsonl")
    if not curve:
        print(f"error: {run / 'curve.jsonl'} is missing or empty; is {run} a compressor-stage `rhea train` run "
              "(run.stage: compressor, compressor.eval_every > 0)?", file=sys.stderr)
        return 2
    log, curve = last_per_step(log), last_per_step(curve)
    run_args = run_settings(run)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"run_args": run_args, "curve": curve, "loss": [{"step": r["step"], "loss": r["loss"]} for r in log]}
    if others:
        record["compare"] = others
    output_file(out, ".json").write_text(json.dumps(record, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    qa = [r for r in curve if "qa_own" in r]
    panels = 2 + bool(qa) + bool(others)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.6))
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
    if others:
        d = axes[-1]
        first = run_args.get("n_mem")
        d.plot(steps, [r["own"] for r in curve], "o-", ms=3, label=f"{run.name}" + (f" (n_mem {first})" if first else ""))
        for o in others:
            d.plot([r["step"] + o["offset"] for r in o["curve"]], [r["own"] for r in o["curve"]], "o-", ms=3,
                   label=o["label"])
        d.set_xlabel("optimizer step (a warm start drawn from its --init-from step)")
        d.set_ylabel("own-latent token accuracy")
        d.set_title("held-apart chunks, by run", fontsize=9)
        d.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output_file(out, ".png"), dpi=120)
    print(json.dumps(curve[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
