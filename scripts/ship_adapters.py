"""Turn a trained compressor into the adapters shipped for a zoo model: shrink, calibrate, measure, install.

    python scripts/ship_adapters.py runs/compressor_states_n24_r16_s16/latest --data ../shared/data \
        --generate-rank 1 --work runs/ship-smollm2

1. `rhea shrink` into ``--work``: each adapter cut to ``--compress-rank`` / ``--generate-rank`` (truncated SVD;
   omitted = kept) and every weight stored in fp16, the size a package can carry; the tokenizer is stored as
   ``tokenizer_changes.json`` (what rhea adds to the base model's tokenizer), not as a copy of it;
2. `rhea calibrate` on it, in place: tau_low / tau_high (and the latent centre) for the compressor's latent
   scorer, recorded with whether the calibration targets were met (a compressor trained only to reconstruct
   may not meet them: the policy's default scorer does not use its latents);
3. `benchmarks/reconstruction.py --write-fidelity` on the held-apart real replies of ``--data``: the measured
   fidelity goes into ``rhea_config.json``, where ``latent_tier="auto"`` reads it, and the JSON/PNG into
   ``--results`` (default benchmarks/results/reconstruction_shipped);
4. unless ``--dry-run``, the work directory replaces ``rhea/data/adapters/<base model>`` (what
   ``load_rhea_model(name)`` loads). With ``--require-fidelity`` (the default) a model whose measured fidelity is
   below the target (`rhea.modeling.config.fidelity_passes`) is not installed.

Nothing is installed before every step has passed; the previous shipped directory is kept beside the new one as
``<name>.previous`` until the copy is complete.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "rhea" / "data" / "adapters"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="a trained Rhea directory (save_pretrained), e.g. the final/ of a `rhea train` run")
    p.add_argument("--data", required=True, help="shared/data directory: the held-apart replies measured in step 3")
    p.add_argument("--work", required=True, help="new or empty directory the shipped candidate is built in")
    p.add_argument("--compress-rank", type=int, default=None)
    p.add_argument("--generate-rank", type=int, default=None)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "reconstruction_shipped"),
                   help="where step 3 writes its JSON + PNG (path without extension)")
    p.add_argument("--dry-run", action="store_true", help="build and measure the candidate, install nothing")
    p.add_argument("--no-require-fidelity", dest="require_fidelity", action="store_false",
                   help="install even when the measured fidelity is below the target")
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def check_inputs(source: Path, data: str) -> str:
    """The zoo name `source` is shipped for; a SystemExit naming the problem before anything is loaded."""
    from rhea.modeling.config import RheaConfig
    from rhea.modeling.zoo import MODEL_ZOO

    if not (source / "rhea_config.json").is_file():
        raise SystemExit(f"{source} has no rhea_config.json: pass a directory written by save_pretrained")
    if not Path(data).is_dir():
        raise SystemExit(f"--data {data} is not a directory (the shared/data layout)")
    base = RheaConfig.load(source).base_model
    if base not in MODEL_ZOO:
        raise SystemExit(f"{source}/rhea_config.json records base_model {base!r}, not a zoo model "
                         f"({', '.join(sorted(MODEL_ZOO))}): only a zoo model's adapters are shipped")
    return base


def install(work: Path, target: Path) -> None:
    """Replace `target` by a copy of `work`; the old directory is kept as ``<target>.previous`` until the copy is done."""
    previous = target.with_name(target.name + ".previous")
    if previous.exists():
        shutil.rmtree(previous)
    if target.exists():
        target.rename(previous)
    shutil.copytree(work, target)
    shutil.rmtree(previous, ignore_errors=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    from rhea.cli import main as rhea
    from rhea.modeling.config import RheaConfig, fidelity_passes
    from rhea.modeling.shrink import shrink_model

    source = Path(args.source)
    base = check_inputs(source, args.data)
    work = Path(args.work)
    report = shrink_model(source, work, compress_rank=args.compress_rank, generate_rank=args.generate_rank,
                          dtype=args.dtype, tokenizer_copy=False)
    print("[ship] shrunk:", json.dumps(report["adapters"]), flush=True)
    if rhea(["calibrate", "--model", str(work)]) != 0:
        raise SystemExit("[ship] rhea calibrate failed; nothing installed")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "reconstruction.py"), "--data", args.data, "--adapters", str(work),
           "--write-fidelity", "--threads", str(args.threads), "--out", args.results]
    print("[ship]", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    cfg = RheaConfig.load(work)
    print("[ship] fidelity:", json.dumps(cfg.fidelity), flush=True)
    if args.require_fidelity and not fidelity_passes(cfg.fidelity):
        raise SystemExit("[ship] the measured fidelity is below the target; nothing installed "
                         "(--no-require-fidelity installs it anyway)")
    if args.dry_run:
        print(f"[ship] dry run: {work} built and measured, nothing installed")
        return 0
    target = SHIPPED / base
    install(work, target)
    print(f"[ship] installed {work} as {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
