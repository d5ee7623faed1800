#!/usr/bin/env bash
# Data-parallel scaling on one machine (issue 5): resnet18 @112, synthetic data, the same
# global batch, 1 process x all cores vs N processes x (cores / N) threads, launched with
# `orchard launch` over Gloo on loopback. Prints images/s for each, the ratio, and the
# gradient all-reduce time per step that the backward pass did not hide (Orchard logs it).
#
#   bench/scaling.sh                       # 1 vs 2 processes, batch 32, 20 timed steps
#   PROCS=2 BATCH=64 STEPS=30 bench/scaling.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ORCHARD="$BUILD/orchard"
[ -x "$ORCHARD" ] || cmake --build "$BUILD" --target orchard
CORES=$(nproc)
PROCS=${PROCS:-2}
BATCH=${BATCH:-32}
STEPS=${STEPS:-20}
MODEL=${MODEL:-resnet18}
SIZE=${SIZE:-112}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
warm=4
run() {  # name, then the launcher prefix
  local name=$1; shift
  "$@" classify train --use_synthetic_data --model "$MODEL" --image_size "$SIZE" --batch_size "$BATCH" \
    --num_classes 1000 --num_train_examples $((BATCH * 1000)) --data_format channels_first \
    --train_steps $((warm + STEPS)) --log_steps "$warm" --steps_per_loop $((warm + STEPS)) \
    --model_dir "$WORK/$name" --stats_file "$WORK/$name.json" >"$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; exit 1; }
  python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["avg_exp_per_second"])' "$WORK/$name.json"
}
one=$(OMP_NUM_THREADS=$CORES run one "$ORCHARD")
many=$(run many "$ORCHARD" launch --nproc_per_node "$PROCS" --master_port $((29800 + RANDOM % 100)) --)
reduce=$(sed -n 's/.*gradient all-reduce: \(.*\)/\1/p' "$WORK/many.log" | head -1)
printf '%s @%s, global batch %s, %s cores\n' "$MODEL" "$SIZE" "$BATCH" "$CORES"
printf '%-28s %10s img/s\n' "1 process x $CORES threads" "$one" "$PROCS processes x $((CORES / PROCS)) threads" "$many"
python3 -c 'import sys; print("scaling ratio (N processes / 1 process): %.2f" % (float(sys.argv[2]) / float(sys.argv[1])))' "$one" "$many"
echo "all-reduce (rank 0): $reduce"
