#!/bin/bash
# The torch engine's generation figures of two versions of the code, measured in one session
# on one machine, so that new/old is a same-run ratio. From the repository root:
#
#   git archive OLD workers bench | tar -x -C .old-tree    # (mkdir both first)
#   git archive NEW workers bench | tar -x -C .new-tree
#   bash bench/gpu/ab.sh OUT [.old-tree .new-tree]
#
# Runs rollout.py (static and dynamic decode, batch 256, 128 prompt + 48 new tokens) on old
# then new, and longtail.py (512 heavy-tailed rows through 128 static slots: continuous
# batching, rows leaving the batch, every row to the end) on new then old; one model on disk
# (random init, --shape's default) serves all four. Each run's log and JSON land in OUT.
# NEW=, LNEW= change the new-token budgets; TWICE=1 adds a second rollout pair.
set -u
out=$(realpath -m "$1")
mkdir -p "$out"
old=${2:-.old-tree}
new=${3:-.new-tree}
root=$PWD
export PYTHONUNBUFFERED=1
md=/tmp/paddock-ab-model
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader 2>/dev/null
one() { # tree script name args...
  local tree=$1 script=$2 name=$3
  shift 3
  local t0=$SECONDS
  (cd "$root/$tree" && PYTHONPATH="$root/$tree:${PYTHONPATH:-}" python3 "bench/gpu/$script" \
    --model-dir $md --out "$out/$name" "$@") >"$out/$name.log" 2>&1
  echo "== $name rc=$? $((SECONDS - t0))s"
  grep -E "^(engine|  engine|long tail|what|static|dynamic|adapter sync)" "$out/$name.log" |
    sed 's/^/   /'
}
R="--decodes static,dynamic --no-baseline --batch 256 --prompt-len 128 --new-tokens ${NEW:-48} --reps 2"
L="--decodes static --batch 512 --slots 128 --prompt-len 128 --new-tokens ${LNEW:-128} --reps 2"
one "$old" rollout.py roll-old1 $R
one "$new" rollout.py roll-new1 $R
one "$new" longtail.py long-new1 $L
one "$old" longtail.py long-old1 $L
if [ "${TWICE:-0}" = 1 ]; then
  one "$old" rollout.py roll-old2 $R
  one "$new" rollout.py roll-new2 $R
fi
