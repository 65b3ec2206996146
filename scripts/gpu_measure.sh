#!/usr/bin/env bash
# The kernel and training measurements that need a GPU, in one device call of 4-8 minutes (docs/reports/gpu.md, "One call").
#
#   bash scripts/gpu_measure.sh OUTDIR [TOKENIZER_DIR]
#   PACK=$OUT/results.tar.gz bash scripts/gpu_measure.sh /tmp/gm .gpu/tok     # the device call (docs/reports/gpu.md)
#   STEPS="tests_kernels attention" bash scripts/gpu_measure.sh /tmp/gm       # a subset
#
# Steps (STEPS, default all), each under its own time limit so one hang cannot eat the others':
#   tests_kernels  the CUDA kernel tests (split route, turn-scoring variants, transformers hook)
#   attention      prefix-anchored attention: Triton kernel, split route (cuDNN / FA2 passes), SDPA
#   turn_scores    the turn-scoring tile sweep with the copy roofline (--write-default)
#   decode         decoding cost per token: unmerged / merged generate LoRA vs the base model
#   train          the joint compress/generate step vs single-LoRA SFT (batch 1, 8 and 32)
#   reply          every-turn cost of vanilla and rhea, merged decoding off and on
#   tests_model    the GPU session and device tests
# TOKENIZER_DIR holds the Qwen2.5 tokenizer.json (or tokenizer.json.gz) + config.json: decode, train
# and reply build Qwen2.5-Coder-1.5B's shape with random weights, and are skipped without it. Wheels
# in .whl/ (bm25s, for the bm25 session test) are installed first. Results land in OUTDIR (logs,
# JSON, PNG), packed after every step into $PACK (default OUTDIR/results.tar.gz), so a call stopped
# at its limit still returns what finished; the last lines printed are a summary.
set -u
OUT=${1:?usage: gpu_measure.sh OUTDIR [TOKENIZER_DIR]}
TOK=${2:-}
STEPS=${STEPS:-tests_kernels attention turn_scores decode train reply tests_model}
mkdir -p "$OUT/res"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
if [ -n "$TOK" ] && [ -f "$TOK/tokenizer.json.gz" ] && [ ! -f "$TOK/tokenizer.json" ]; then  # carried compressed
    mkdir -p /tmp/rhea_tok && cp "$TOK"/*.json "$TOK"/*.jinja /tmp/rhea_tok/ 2>/dev/null
    gunzip -c "$TOK/tokenizer.json.gz" > /tmp/rhea_tok/tokenizer.json && TOK=/tmp/rhea_tok
fi
PACK=${PACK:-$OUT/results.tar.gz}
START=$(date +%s)
declare -a SUMMARY=()

want() { [[ " $STEPS " == *" $1 "* ]]; }

step() {  # step NAME SECONDS CMD...: run with a limit, log to OUT/NAME.log, record rc and seconds
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    echo "=== $name (limit ${limit}s, at +$((t0 - START))s)"
    timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$OUT/$name.log"
    SUMMARY+=("$name rc=$rc $(( $(date +%s) - t0 ))s")
    printf '%s\n' "${SUMMARY[@]}" > "$OUT/summary.txt"
    tar -czf "$PACK" -C "$OUT" --exclude=results.tar.gz . 2>/dev/null
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    $PY -c "import torch, triton, transformers, peft; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__, 'peft', peft.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/env.txt"

PYTEST=($PY -m pytest -q -rfEs -n 8 -p no:cacheprovider -o addopts="")
want tests_kernels && step tests_kernels 100 "${PYTEST[@]}" \
    tests/kernels/test_cuda.py tests/kernels/test_triton_compile.py tests/kernels/test_hf.py
want attention && step attention 80 $PY benchmarks/kernel_ops.py --device cuda --only attention \
    --attn-ns ${ATTN_NS:-4096,8192,16384} --no-flex --out "$OUT/res"
want turn_scores && step turn_scores 90 $PY benchmarks/turn_scores_tiles.py --budget-s ${TILES_BUDGET:-45} \
    ${TILES_ARGS:-} --write-default --out "$OUT/res"
if [ -n "$TOK" ]; then
    want decode && step decode 100 $PY benchmarks/decode_overhead.py --shape qwen2.5-coder-1.5b --tokenizer "$TOK" \
        --device cuda --prompt 1024 --new-tokens 64 --repeats 4 --out "$OUT/res/decode_overhead_h100"
    if want train; then
        for bs in 1 8 32; do
            step train_b$bs 50 $PY benchmarks/train_throughput.py --shape qwen2.5-coder-1.5b --tokenizer "$TOK" \
                --device cuda --dtype bf16 --batch-size $bs --warmup 2 --steps 6 \
                --out "$OUT/res/train_throughput_h100_b$bs"
        done
    fi
    if want reply; then
        for m in off on; do
            step reply_$m 40 $PY benchmarks/efficiency_shapes.py --shape qwen2.5-coder-1.5b --tokenizer "$TOK" \
                --device cuda --policies vanilla,rhea --turns 8 --max-new-tokens 32 --quiet --decode-merged $m \
                --out "$OUT/res/reply_$m"
        done
    fi
fi
want tests_model && step tests_model 40 "${PYTEST[@]}" tests/session/test_cuda_session.py tests/modeling/test_device.py \
    tests/modeling/test_merged_decode.py

echo "=== summary (total $(( $(date +%s) - START ))s)"
printf '%s\n' "${SUMMARY[@]}"
