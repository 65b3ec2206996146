#!/usr/bin/env bash
# Train a zoo model's compressor on a lent GPU: stage its GGUF in pieces, assemble it, train, bring the weights
# back (docs/reports/gpu.md, "Compressor training on a lent GPU"). One subcommand per device call; the machine
# keeps /root only while warm (about 30 s after each call), so make the calls back to back.
#
#   bash scripts/gpu_compressor.sh piece STAGE_DIR            # the carried pieces of STAGE_DIR -> $STAGED; status
#   bash scripts/gpu_compressor.sh assemble                   # concatenate, check SHA-256, convert into $RHEA_CACHE
#   bash scripts/gpu_compressor.sh train NAME RUN MINUTES ARGS...   # scripts/train_compressor.py for MINUTES, then
#                                                             # its snapshot into $OUT in parts of <= 15 MiB
#   bash scripts/gpu_compressor.sh finish STAGE_DIR NAME RUN STOP_AT_S ARGS...   # the last call: piece, assemble,
#                                                             # train until STOP_AT_S seconds into the call, measure
#                                                             # (MEASURE_ARGS: extra fact_recall.py arguments, e.g.
#                                                             # "--mode generate --conditions latent --max-new-tokens 40")
#   bash scripts/gpu_compressor.sh measure RUN [ARGS...]      # teacher-forced fact recall of $RUNS/RUN/latest on the
#                                                             # device -> $OUT/fact_recall_RUN.tar.gz (one file back)
#   bash scripts/gpu_compressor.sh seed RUN SNAPSHOT_DIR      # a carried (parked) snapshot -> $RUNS/RUN.snapshot, which
#                                                             # the next `train NAME RUN ...` resumes
#   bash scripts/gpu_compressor.sh join DIR DEST              # here: the returned parts -> DEST/trainable.safetensors
#
# STAGED (default /root/stage) is where pieces gather on the machine; RUNS (default /root/runs) holds the runs;
# DEVICE (default cuda; TF32 there, or bf16 autocast with PRECISION=bf16; fp32 elsewhere) lets the same commands be
# tried on the CPU.
# Wheels in .whl/ (gguf, which the GPU image lacks and `assemble` needs) are installed first by every call.
# `train` writes the run under $RUNS/RUN with its snapshot in $RUNS/RUN.snapshot and, when $OUT is set, copies the
# snapshot there split into parts (a device call returns files of at most 16 MiB; Qwen2.5-Coder-1.5B's is 42 MB).
set -euo pipefail
cmd=${1:?usage: gpu_compressor.sh piece STAGE_DIR | assemble | train NAME RUN MINUTES ARGS... | finish STAGE_DIR NAME RUN STOP_AT_S ARGS... | measure RUN [ARGS...] | seed RUN SNAPSHOT_DIR | join DIR DEST}
shift
STAGED=${STAGED:-/root/stage}
RUNS=${RUNS:-/root/runs}
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ "$cmd" != join ] && [ "$cmd" != seed ] && [ "$cmd" != finish ] && ls .whl/*.whl >/dev/null 2>&1; then
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
    name=${1:?train NAME RUN MINUTES ARGS...}; run=${2:?RUN}; minutes=${3:?MINUTES}; shift 3
    mkdir -p "$RUNS"
    device=${DEVICE:-cuda}
    # PRECISION (cuda only): tf32 (default: fp32 weights and activations, TF32 tensor-core products) or bf16
    # (autocast; a Qwen2.5-Coder-1.5B run at lr 5e-4, batch 32 went to NaN before step 150 under it)
    precision=()
    if [[ $device == cuda* ]]; then
        case "${PRECISION:-tf32}" in
        tf32) precision=(--tf32);;
        bf16) precision=(--bf16);;
        *) echo "gpu_compressor.sh: PRECISION=$PRECISION is not tf32 or bf16" >&2; exit 2;;
        esac
    fi
    $PY scripts/train_compressor.py --base-model "$name" --out "$RUNS/$run" --device "$device" "${precision[@]}" \
        --snapshot-dir "$RUNS/$run.snapshot" --max-minutes "$minutes" "$@"
    if [ -n "${OUT:-}" ] && [ -d "$RUNS/$run.snapshot" ]; then
        snap=$RUNS/$run.snapshot
        for f in state.json curve.jsonl; do if [ -f "$snap/$f" ]; then cp "$snap/$f" "$OUT/"; fi; done
        if [ -f "$RUNS/$run/log.jsonl" ]; then cp "$RUNS/$run/log.jsonl" "$OUT/"; fi   # per-step loss and gradient norm
        split -b "$PART_BYTES" -d -a 2 "$snap/trainable.safetensors" "$OUT/trainable.part-"
        sha256sum "$snap/trainable.safetensors" | cut -d' ' -f1 > "$OUT/trainable.sha256"
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
    bash "$0" measure "$run" ${MEASURE_ARGS:-} || echo "gpu_compressor.sh finish: measure failed; the snapshot's parts are in \$OUT already" >&2
    echo "gpu_compressor.sh finish: done at ${SECONDS}s"
    exit $rc
    ;;
measure)
    # teacher-forced fact recall (benchmarks/fact_recall.py) on the run's latest adapters, on the device, in the same
    # call as the training: latent vs another reply's latents (the number to watch), dropped and raw. One file back.
    run=${1:?measure RUN [fact_recall.py ARGS...]}; shift
    model=$RUNS/$run/latest
    [ -d "$model" ] || { echo "gpu_compressor.sh: $model is not here: train the run first (in this machine's life)" >&2; exit 2; }
    tmp=$(mktemp -d)
    $PY benchmarks/fact_recall.py --model "$model" --device "${DEVICE:-cuda}" --mode teacher-forced \
        --conditions latent,latent_other,dropped,raw --threads 4 --out "$tmp/fact_recall_$run" "$@"
    dest=${OUT:-$RUNS}
    tar czf "$dest/fact_recall_$run.tar.gz" -C "$tmp" .
    rm -rf "$tmp"
    echo "fact recall of $run: $dest/fact_recall_$run.tar.gz"
    ;;
seed)
    run=${1:?seed RUN SNAPSHOT_DIR (a parked snapshot, carried with this call)}
    src=${2:?seed RUN SNAPSHOT_DIR (a parked snapshot, carried with this call)}
    for f in trainable.safetensors state.json; do
        [ -f "$src/$f" ] || { echo "gpu_compressor.sh: $src/$f is not here: carry the whole snapshot folder" >&2; exit 2; }
    done
    if [ -e "$RUNS/$run/checkpoint" ]; then
        echo "gpu_compressor.sh: $RUNS/$run already has a checkpoint, which train would resume instead of the seed" >&2; exit 2
    fi
    mkdir -p "$RUNS/$run.snapshot"
    for f in trainable.safetensors state.json curve.jsonl; do if [ -f "$src/$f" ]; then cp "$src/$f" "$RUNS/$run.snapshot/"; fi; done
    echo "seeded $RUNS/$run.snapshot from $src: the next 'train ... $run ...' resumes it (same settings)"
    ;;
join)
    dir=${1:?join DIR DEST (DIR: the files_at folder of the last train call, read-only; DEST: a snapshot folder)}
    dest=${2:?join DIR DEST: DEST is where the snapshot goes (files_at is read-only)}
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
    for f in state.json curve.jsonl; do if [ -f "$dir/$f" ]; then cp "$dir/$f" "$dest/"; fi; done
    echo "joined into $dest/trainable.safetensors (SHA-256 $got): a snapshot folder for --snapshot-dir, or park it"
    ;;
*)
    echo "gpu_compressor.sh: unknown subcommand '$cmd' (piece, assemble, train, finish, measure, seed, join)" >&2; exit 2;;
esac
