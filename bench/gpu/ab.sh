#!/bin/bash
# Two versions of the code side by side in one call, so that new/old is a same-run ratio
# (issue 33's "no speed lost": each new/old >= 0.98). From the repository root:
#
#   mkdir -p .old-tree && git archive OLD workers bench | tar -x -C .old-tree
#   bash bench/gpu/ab.sh [--parts P,...] [--rounds N] [--limit S] [--dry-run] [--small] \
#       OUT .old-tree .
#
# A tree is a folder holding workers/ and bench/ (the repository root is one; so is a
# `git worktree add DIR REV`); each script runs from its own tree with that tree first on
# PYTHONPATH. The parts (--parts, default all four of issue 33's acceptance):
#
#   rollout    decode at batch 256 (rollout.py: static+compile and static, 128 prompt +
#              256 new tokens, median of 3 generates; then the adapter sync)
#   train      the 0.6B train step, 16x1024 (train.py: eager and train.compile, 5 steps)
#   pool       8 adapters in one torch engine against 1 (pool.py; a tree from before the
#              segmented kernel's removal also runs it, rows of their own)
#   pool_runs  8 runs in one pool (pool_runs.py, 3 steps each; one run alone beside it)
#   longtail   512 heavy-tailed rows through 128 static slots (longtail.py)
#
# Each part runs old then new (the next part new then old, and so on: the order alternates
# pair by pair, so that a drift within the call falls on both sides), --rounds times; each
# run's log and JSON land in OUT/PART-SIDE<round>/, and bench/gpu/spread.py then prints
# every figure of both sides and the same-run ratios new/old. spread.py over two calls'
# OUT folders (two fresh machines) gives their spread. Before anything runs the script
# prints each part's estimated seconds (from docs/performance.md's figures: process start
# and model load, compiles, warm-ups, the timed runs) and refuses a plan over --limit
# seconds (560: a device call has 600), naming what fits. --small checks every path on a
# CPU with the tiny model (bench/gpu/README.md). PYTHON picks the interpreter (python3).
set -u
parts=rollout,train,pool,pool_runs
rounds=1
limit=560
dry=0
small=0
while [ $# -gt 0 ]; do
  case $1 in
    --parts) parts=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --small) small=1; shift ;;
    -*) echo "unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -ne 3 ]; then
  echo "usage: bash bench/gpu/ab.sh [--parts P,...] [--rounds N] [--limit S] [--dry-run] [--small] OUT OLD NEW" >&2
  exit 2
fi
out=$(realpath -m "$1")
old=$(realpath "$2") || exit 2
new=$(realpath "$3") || exit 2
for tree in "$old" "$new"; do
  [ -d "$tree/workers" ] && [ -d "$tree/bench/gpu" ] || { echo "$tree: no workers/ and bench/gpu/" >&2; exit 2; }
done
py=${PYTHON:-python3}
case $py in */*) py=$(realpath -s "$py") ;; esac # each run starts in its own tree
root=$(cd "$(dirname "$0")/../.." && pwd)

# part NAME SCRIPT SECONDS ARGS SMALL_ARGS: the estimated seconds of a run on an H200 (one
# tree, one round), the arguments there, and those with --small on a CPU. The estimates,
# from docs/performance.md's figures:
#  rollout    ~15 s start and load; static+compile: 7.7 s warm-up (the compile) + 3 x 1.3 s
#             (50k tokens/s) + the trainer's logprob check; static: 4.3 s + 3 x 2 s; sync
#  train      ~15 s start; eager: 6 steps of 0.36 s; compiled: the first step compiles
#             (28 s warm, 70-94 s from a cold cache) + 6 steps of 0.15 s
#  pool       ~15 s start; one adapter, the pool, the pool at rank 64: each ~5 s to build,
#             a warm-up and a timed generate of 65k tokens at 21-33k tokens/s, 40 steps
#  pool_runs  ~15 s start; the pool's 8 runs 35.7 s; one run alone 6.4-7.4 s
#  longtail   ~15 s start; 4 rounds of 512 rows (a few s each)
declare -A script args small_args est
part() { script[$1]=$2 est[$1]=$3 args[$1]=$4 small_args[$1]=$5; }
part rollout rollout.py 60 \
  "--decodes static+compile,static --no-baseline --batch 256 --prompt-len 128 --new-tokens 256 --gen-reps 3 --reps 2" \
  "--decodes static,dynamic --no-baseline --batch 8 --group 4 --prompt-len 8 --new-tokens 8 --gen-reps 2 --reps 2"
part train train.py 125 \
  "--seqs 16 --micro-batches 16 --compile --no-cast-row --no-baseline --reps 5" \
  "--seqs 2 --micro-batches 2 --seq-len 64 --prompt-len 16 --compile --no-cast-row --reps 1 --warmup 0"
part pool pool.py 60 \
  "--adapters 8" \
  "--adapters 2 --batch 8 --group 4 --prompt-len 8 --new-tokens 8"
part pool_runs pool_runs.py 60 \
  "--runs 8 --steps 3 --deadline-s 1" \
  "--runs 2 --steps 2 --groups 2 --group 2 --new-tokens 8 --deadline-s 1"
part longtail longtail.py 45 \
  "--decodes static --batch 512 --slots 128 --prompt-len 128 --new-tokens 128 --reps 2" \
  "--decodes static --batch 8 --group 4 --prompt-len 8 --new-tokens 8 --reps 1"
build=20 # the random-init model, once for every run (a 0.6B model built and saved)

total=$build
echo "plan: ${parts//,/, }; $rounds round(s), each part old and new"
for p in ${parts//,/ }; do
  [ -n "${script[$p]:-}" ] || { echo "unknown part $p (rollout, train, pool, pool_runs, longtail)" >&2; exit 2; }
  if [ "$small" = 1 ]; then a="--small ${small_args[$p]}"; else a=${args[$p]}; fi
  echo "  $p: ${script[$p]} $a: ~${est[$p]} s a run, ~$((2 * rounds * est[$p])) s"
  total=$((total + 2 * rounds * est[$p]))
done
echo "estimate on an H200: ~$total s (model build ~$build s)"
if [ "$small" = 0 ] && [ "$limit" -gt 0 ] && [ "$total" -gt "$limit" ]; then
  echo "over --limit $limit s: run fewer parts a call, e.g. --parts rollout,train and --parts pool,pool_runs (or --limit 0)" >&2
  exit 2
fi
[ "$dry" = 1 ] && exit 0

mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ "$small" = 1 ]; then md=${TMPDIR:-/tmp}/paddock-ab-model-small; else md=${TMPDIR:-/tmp}/paddock-ab-model; fi
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader 2>/dev/null
one() { # part side round
  local p=$1 side=$2 r=$3 tree a t0=$SECONDS rc
  if [ "$side" = old ]; then tree=$old; else tree=$new; fi
  if [ "$small" = 1 ]; then a="--small ${small_args[$p]}"; else a=${args[$p]}; fi
  # capped at four times its estimate: a part that hangs leaves the others their time
  # shellcheck disable=SC2086
  (cd "$tree" && PYTHONPATH="$tree:${PYTHONPATH:-}" timeout $((4 * est[$p] + 60)) \
    "$py" "bench/gpu/${script[$p]}" --model-dir "$md" --out "$out/$p-$side$r" $a) \
    >"$out/$p-$side$r.log" 2>&1
  rc=$?
  echo "== $p-$side$r rc=$rc $((SECONDS - t0)) s (estimate ${est[$p]} s)"
  [ "$rc" = 0 ] || tail -n 5 "$out/$p-$side$r.log" | sed 's/^/   /'
}
pair=0
for r in $(seq 1 "$rounds"); do
  for p in ${parts//,/ }; do
    if [ $((pair % 2)) = 0 ]; then one "$p" old "$r"; one "$p" new "$r"; else one "$p" new "$r"; one "$p" old "$r"; fi
    pair=$((pair + 1))
  done
done
"$py" "$root/bench/gpu/spread.py" "$out"
