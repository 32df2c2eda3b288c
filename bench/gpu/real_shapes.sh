#!/usr/bin/env bash
# One shape's figures in one call (docs/performance.md, "Real shapes on one H200"): the train
# step at 16x1024 tokens against plain PEFT (OOM is a row), then generation at batch 256
# against HF generate + PEFT and the adapter sync. Each script is capped, so a slow part
# cannot take the others' time; logs and JSON land in $OUT (default bench-gpu-out).
#
#   bash bench/gpu/real_shapes.sh llama-3.1-8b [MODEL_DIR] [TRAIN_S] [ROLLOUT_S]
#
# TRAIN_FLAGS and ROLLOUT_FLAGS, if set, replace the default variants.
set -u
shape=$1
dir=${2:-${TMPDIR:-/tmp}/$shape}
train_s=${3:-300}
rollout_s=${4:-240}
out=${OUT:-bench-gpu-out}
mkdir -p "$out"
here=$(dirname "$0")
train_flags=${TRAIN_FLAGS:---checkpointing --compile-checkpointed}
rollout_flags=${ROLLOUT_FLAGS:---decodes static+compile,static}
export PYTHONUNBUFFERED=1
# the progress bars of transformers' loader are one line each: left out of the logs
timeout "$train_s" python3 "$here/train.py" --shape "$shape" --model-dir "$dir" --out "$out" \
    --seqs 16 --micro-batches 16 --no-cast-row --warmup 1 --reps 3 $train_flags 2>&1 \
    | grep -av 'Loading weights' | tee "$out/train-$shape.log"
mv -f "$out/train.json" "$out/train-$shape.json" 2>/dev/null
timeout "$rollout_s" python3 "$here/rollout.py" --shape "$shape" --model-dir "$dir" \
    --out "$out" --reps 5 $rollout_flags 2>&1 \
    | grep -av 'Loading weights' | tee "$out/rollout-$shape.log"
mv -f "$out/rollout.json" "$out/rollout-$shape.json" 2>/dev/null
true
