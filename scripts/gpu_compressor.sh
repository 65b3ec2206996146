#!/usr/bin/env bash
# Train a zoo model's compressor on a lent GPU: stage its GGUF in pieces, assemble it, train, bring the weights
# back (docs/reports/gpu.md, "Compressor training on a lent GPU"). One subcommand per device call; the machine
# keeps /root only while warm (about 30 s after each call), so make the calls back to back.
#
#   bash scripts/gpu_compressor.sh piece STAGE_DIR            # the carried pieces of STAGE_DIR -> $STAGED; status
#   bash scripts/gpu_compressor.sh assemble                   # concatenate, check SHA-256, convert into $RHEA_CACHE
#   bash scripts/gpu_compressor.sh train NAME RUN MINUTES [--set KEY=VALUE ...]   # rhea train --config
#                                                             # configs/compressor-NAME.yaml (or $CONFIG) for MINUTES,
#                                                             # resuming RUN's newest checkpoint; then that checkpoint's
#                                                             # trainable weights (bf16) into $OUT in parts of <= 15 MiB
#   bash scripts/gpu_compressor.sh finish STAGE_DIR NAME RUN STOP_AT_S ARGS...   # the last call: piece, assemble,
#                                                             # train until STOP_AT_S seconds into the call, measure
#                                                             # (MEASURE_ARGS: extra fact_recall.py arguments, e.g.
#                                                             # "--mode generate --conditions latent --max-new-tokens 40")
#   bash scripts/gpu_compressor.sh measure RUN [ARGS...]      # teacher-forced fact recall of $RUNS/RUN/final on the
#                                                             # device -> $OUT/fact_recall_RUN.tar.gz (one file back)
#   bash scripts/gpu_compressor.sh join DIR DEST              # here: the returned parts -> DEST/trainable.safetensors
#                                                             # (+ progress.json, metrics.jsonl, curve.jsonl)
#   bash scripts/gpu_compressor.sh export DEST DIR [--set KEY=VALUE ...]   # here: a joined DEST -> a loadable
#                                                             # directory DIR (export_checkpoint with the same config),
#                                                             # which a later run continues with --set model.init_from=DIR
#
# STAGED (default /root/stage) is where pieces gather on the machine; RUNS (default /root/runs) holds the runs;
# DEVICE (default cuda; TF32 there, or bf16 autocast with PRECISION=bf16; fp32 elsewhere) lets the same commands be
# tried on the CPU.
# Wheels in .whl/ (gguf, which the GPU image lacks and `assemble` needs) are installed first by every call.
# `train` writes the run under $RUNS/RUN (checkpoints, metrics.jsonl, curve.jsonl, final/) and, when $OUT is set,
# copies the newest checkpoint's trainable weights there in bf16, split into parts (a device call returns files of at
# most 16 MiB; Qwen2.5-Coder-1.5B's compress side is 42 MB in bf16). The optimizer moments stay on the machine: a run
# continued from the returned weights (export, then model.init_from) starts a fresh AdamW and warms up again.
set -euo pipefail
cmd=${1:?usage: gpu_compressor.sh piece STAGE_DIR | assemble | train NAME RUN MINUTES [--set K=V ...] | finish STAGE_DIR NAME RUN STOP_AT_S [--set K=V ...] | measure RUN [ARGS...] | join DIR DEST | export DEST DIR [--set K=V ...]}
shift
STAGED=${STAGED:-/root/stage}
RUNS=${RUNS:-/root/runs}
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ "$cmd" != join ] && [ "$cmd" != export ] && [ "$cmd" != finish ] && ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
PART_BYTES=$((15 * 1024 * 1024))

case "$cmd" in
piece)
    src=${1:?usage: gpu_compressor.sh piece STAGE_DIR (the folder split wrote, carried with this call)}
    [ -f "$src/manifest.json" ] || { echo "gpu_compressor.sh: $src/manifest.json is not here: carry it with each piece" >&2; exit 2; }
    mkdir -p "$STAGED"
    cp "$src/manifest.json" "$STAGED/"
    n=0
    for f in "$src"/piece-*.bin; do
        [ -e "$f" ] || continue
        cp "$f" "$STAGED/" && n=$((n + 1))
    done
    echo "copied $n piece(s) into $STAGED"
    $PY scripts/stage_model.py status --staged "$STAGED" --quick || true   # exits 1 while pieces are missing
    ;;
assemble)
    $PY scripts/stage_model.py status --staged "$STAGED"
    $PY scripts/stage_model.py assemble --staged "$STAGED" --convert
    ;;
train)
    name=${1:?train NAME RUN MINUTES [--set KEY=VALUE ...]}; run=${2:?RUN}; minutes=${3:?MINUTES}; shift 3
    config=${CONFIG:-configs/compressor-$name.yaml}
    [ -f "$config" ] || { echo "gpu_compressor.sh: $config does not exist: pass CONFIG=configs/....yaml" >&2; exit 2; }
    mkdir -p "$RUNS"
    device=${DEVICE:-cuda}
    # PRECISION (cuda only): tf32 (default: fp32 weights and activations, TF32 tensor-core products) or bf16
    # (autocast; a Qwen2.5-Coder-1.5B run at lr 5e-4, batch 32 went to NaN before step 150 under it)
    precision=(--set run.tf32=false)
    if [[ $device == cuda* ]]; then
        case "${PRECISION:-tf32}" in
        tf32) precision=(--set run.tf32=true);;
        bf16) precision=(--set run.mixed_precision=bf16 --set run.tf32=false);;
        *) echo "gpu_compressor.sh: PRECISION=$PRECISION is not tf32 or bf16" >&2; exit 2;;
        esac
    else
        precision+=(--set run.cpu=true)
    fi
    $PY -m rhea.cli train --config "$config" --model "$name" --set "run.output_dir=$RUNS/$run" \
        --set "run.max_minutes=$minutes" --set run.resume_from=latest "${precision[@]}" "$@"
    newest=$(ls "$RUNS/$run" 2>/dev/null | grep -E '^checkpoint-[0-9]+$' | sort -t- -k2 -n | tail -1 || true)
    ckpt=$RUNS/$run/$newest
    if [ -n "${OUT:-}" ] && [ -n "$newest" ] && [ -f "$ckpt/trainable.safetensors" ]; then
        for f in metrics.jsonl curve.jsonl; do if [ -f "$RUNS/$run/$f" ]; then cp "$RUNS/$run/$f" "$OUT/"; fi; done
        cp "$ckpt/progress.json" "$OUT/"
        $PY - "$ckpt/trainable.safetensors" "$RUNS/$run/trainable.bf16.safetensors" <<'PYEOF'
import sys

import torch
from safetensors.torch import load_file, save_file

save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(sys.argv[1]).items()}, sys.argv[2])
PYEOF
        split -b "$PART_BYTES" -d -a 2 "$RUNS/$run/trainable.bf16.safetensors" "$OUT/trainable.part-"
        sha256sum "$RUNS/$run/trainable.bf16.safetensors" | cut -d' ' -f1 > "$OUT/trainable.sha256"
        ls -l "$OUT"
    fi
    ;;
finish)
    # the last call of a staging: the last piece(s), assemble, train until STOP_AT seconds into this call, measure.
    # Everything a drawn session's final call does, so its device command is one short line.
    src=${1:?finish STAGE_DIR NAME RUN STOP_AT_S ARGS...}; name=${2:?NAME}; run=${3:?RUN}
    stop_at=${4:?finish STAGE_DIR NAME RUN STOP_AT_S ARGS... (STOP_AT_S: seconds into this call at which training stops)}
    shift 4
    [[ $stop_at =~ ^[0-9]+$ ]] || { echo "gpu_compressor.sh: STOP_AT_S=$stop_at must be whole seconds" >&2; exit 2; }
    bash "$0" piece "$src" | tail -3
    bash "$0" assemble | tail -4
    minutes=$(awk -v s="$SECONDS" -v t="$stop_at" 'BEGIN { m = int((t - s) / 60 * 100) / 100; if (m < 0.5) m = 0.5; printf "%.2f", m }')
    echo "gpu_compressor.sh finish: training $minutes min from ${SECONDS}s into the call"
    rc=0
    bash "$0" train "$name" "$run" "$minutes" "$@" || rc=$?
    # shellcheck disable=SC2086  # MEASURE_ARGS: extra fact_recall.py arguments, split on spaces on purpose
    bash "$0" measure "$run" ${MEASURE_ARGS:-} || echo "gpu_compressor.sh finish: measure failed; the weights' parts are in \$OUT already" >&2
    echo "gpu_compressor.sh finish: done at ${SECONDS}s"
    exit $rc
    ;;
measure)
    # teacher-forced fact recall (benchmarks/fact_recall.py) on the run's final adapters, on the device, in the same
    # call as the training: latent vs another reply's latents (the number to watch), dropped and raw. One file back.
    run=${1:?measure RUN [fact_recall.py ARGS...]}; shift
    model=$RUNS/$run/final
    [ -d "$model" ] || { echo "gpu_compressor.sh: $model is not here: train the run first (in this machine's life)" >&2; exit 2; }
    tmp=$(mktemp -d)
    $PY benchmarks/fact_recall.py --model "$model" --device "${DEVICE:-cuda}" --mode teacher-forced \
        --conditions latent,latent_other,dropped,raw --threads 4 --out "$tmp/fact_recall_$run" "$@"
    dest=${OUT:-$RUNS}
    tar czf "$dest/fact_recall_$run.tar.gz" -C "$tmp" .
    rm -rf "$tmp"
    echo "fact recall of $run: $dest/fact_recall_$run.tar.gz"
    ;;
join)
    dir=${1:?join DIR DEST (DIR: the files_at folder of the last train call, read-only; DEST: a new folder)}
    dest=${2:?join DIR DEST: DEST is where the weights go (files_at is read-only)}
    ls "$dir"/trainable.part-* >/dev/null 2>&1 || { echo "gpu_compressor.sh: no trainable.part-* in $dir" >&2; exit 2; }
    mkdir -p "$dest"
    cat "$dir"/trainable.part-* > "$dest/trainable.safetensors.tmp"
    want=$(cat "$dir/trainable.sha256")
    got=$(sha256sum "$dest/trainable.safetensors.tmp" | cut -d' ' -f1)
    if [ "$want" != "$got" ]; then
        rm -f "$dest/trainable.safetensors.tmp"
        echo "gpu_compressor.sh: the joined parts hash to $got, not $want: a part is missing or damaged" >&2; exit 3
    fi
    mv "$dest/trainable.safetensors.tmp" "$dest/trainable.safetensors"
    for f in progress.json metrics.jsonl curve.jsonl; do if [ -f "$dir/$f" ]; then cp "$dir/$f" "$dest/"; fi; done
    echo "joined into $dest/trainable.safetensors (SHA-256 $got): 'export $dest DIR' makes a loadable directory"
    ;;
export)
    src=${1:?export DEST DIR [--set KEY=VALUE ...] (DEST: a joined folder; DIR: the directory to write)}
    dir=${2:?export DEST DIR: DIR is the loadable directory to write}; shift 2
    [ -f "$src/trainable.safetensors" ] || { echo "gpu_compressor.sh: $src/trainable.safetensors is not here: join the returned parts first" >&2; exit 2; }
    [ -f "$src/progress.json" ] || [ -f "$src/state.json" ] || { echo "gpu_compressor.sh: $src has neither progress.json nor state.json: join the returned parts first" >&2; exit 2; }
    config=${CONFIG:?export needs CONFIG=configs/compressor-NAME.yaml (the config of the run; its --set overrides follow)}
    $PY - "$src" "$dir" "$config" "$@" <<'PYEOF'
import json
import sys
import tempfile
from pathlib import Path

import yaml
from safetensors.torch import load_file, save_file

from rhea.training.config import TrainConfig
from rhea.training.trainer import PROGRESS_FILE, TRAINABLE_FILE, export_checkpoint

src, dest, path, sets = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
data = TrainConfig.from_yaml(path).to_dict()
for flag, kv in zip(sets[::2], sets[1::2]):
    if flag != "--set":
        raise SystemExit(f"gpu_compressor.sh export: expected --set KEY=VALUE, got {flag!r}")
    key, _, value = kv.partition("=")
    section, _, name = key.partition(".")
    data[section][name] = yaml.safe_load(value)
config = TrainConfig.from_dict(data)
if (src / PROGRESS_FILE).is_file():
    print("exported", export_checkpoint(src, config, dest))
else:  # a snapshot parked before the trainer stage: the model's own parameter names and its step in state.json
    step = json.loads((src / "state.json").read_text())["step"]
    with tempfile.TemporaryDirectory() as tmp:
        weights = load_file(str(src / TRAINABLE_FILE))
        save_file({n if n.startswith("model.") else f"model.{n}": w for n, w in weights.items()},
                  str(Path(tmp) / TRAINABLE_FILE))
        (Path(tmp) / PROGRESS_FILE).write_text(json.dumps({"global_step": step}))
        print("exported", export_checkpoint(tmp, config, dest), f"(a parked snapshot, step {step})")
PYEOF
    ;;
*)
    echo "gpu_compressor.sh: unknown subcommand '$cmd' (piece, assemble, train, finish, measure, join, export)" >&2; exit 2;;
esac
