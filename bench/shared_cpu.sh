#!/usr/bin/env bash
# Training throughput on a shared CPU (issue 57): the same `classify train` (synthetic data,
# resnet18_small width 16 at 32 px, batch 128) alone, beside a single-threaded busy loop, and
# beside a second copy of itself; the same for PyTorch-Python eager (bench/peer_train.py) as the
# peer. Prints images/s of each and the ratio to the run alone.
#
#   bash bench/shared_cpu.sh                       # build/orchard, its default threads, 40 steps
#   STEPS=60 THREADS=2 bash bench/shared_cpu.sh    # a fixed --num_threads 2
#   VARIANTS="default GOMP_SPINCOUNT=300000 OMP_WAIT_POLICY=PASSIVE" bash bench/shared_cpu.sh  # other settings
#   ORCHARD=/tmp/orchard-before LABEL=before PEER=0 bash bench/shared_cpu.sh   # another binary
#
# The busy loop is one process spinning on one thread; s, the share of the machine's CPU it took
# during the run, is measured from its CPU time (1/3 on 2 cores beside 2 busy threads of ours,
# 1/2 beside one), and the goal of issue 57 is images/s beside it >= (1 - s) x 0.8 of the run
# alone. Beside a second copy of the same run, s = 1/2 by symmetry: goal 0.40.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCHARD=${ORCHARD:-$ROOT/build/orchard}
# THREADS unset: Orchard's default count (the CPU budget, following the CPU the run gets); set:
# --num_threads THREADS, which stays fixed. The peer gets THREADS, or every core.
THREADS=${THREADS:-}
threads_flag=()
[ -n "$THREADS" ] && threads_flag=(--num_threads "$THREADS")
PEER_THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-40}
VARIANTS=${VARIANTS:-default}
LABEL=${LABEL:-}
PEER=${PEER:-1}
PY=/usr/bin/python3
WORK=$(mktemp -d)
busy_pid=""
trap '[ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; rm -rf "$WORK"' EXIT
warm=5

orchard_run() {  # name env... -> images/s of the steps after the warm-up
  local name=$1
  shift
  env "$@" "$ORCHARD" classify train --use_synthetic_data --model resnet18_small --width 16 --image_size 32 \
    --batch_size 128 --num_classes 10 --train_steps $((warm + STEPS)) --log_steps "$warm" \
    --steps_per_loop $((warm + STEPS)) "${threads_flag[@]}" --model_dir "$WORK/$name" --clean \
    --stats_file "$WORK/$name.json" >"$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log" >&2; exit 1; }
  "$PY" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["avg_exp_per_second"])' "$WORK/$name.json"
}

peer_run() {
  "$PY" "$ROOT/bench/peer_train.py" --model resnet18_small --width 16 --image_size 32 --batch_size 128 \
    --num_classes 10 --steps "$STEPS" --warmup "$warm" --threads "$PEER_THREADS" |
    "$PY" -c 'import json,sys; print("%.1f" % json.loads(sys.stdin.read())["images_per_second"])'
}

start_busy() {
  "$PY" -c 'while True: pass' &
  busy_pid=$!
}
stop_busy() {
  kill "$busy_pid" 2>/dev/null || true
  wait "$busy_pid" 2>/dev/null || true
  busy_pid=""
}

# The busy loop's CPU seconds so far (utime + stime).
busy_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$busy_pid/stat"; }
now() { date +%s.%N; }
# beside_busy CMD...: runs CMD beside the busy loop; sets busy_rate (CMD's output) and busy_share
# (s: the share of the machine's CPU the busy loop took meanwhile) and busy_goal ((1 - s) x 0.8).
beside_busy() {
  start_busy
  sleep 0.2
  local c0 t0 c1 t1
  c0=$(busy_cpu)
  t0=$(now)
  busy_rate=$("$@")
  c1=$(busy_cpu)
  t1=$(now)
  stop_busy
  busy_share=$("$PY" -c "import sys; print('%.2f' % ((float(sys.argv[2]) - float(sys.argv[1])) / ((float(sys.argv[4]) - float(sys.argv[3])) * int(sys.argv[5]))))" "$c0" "$c1" "$t0" "$t1" "$(nproc)")
  busy_goal=$("$PY" -c "import sys; print('%.2f' % ((1 - float(sys.argv[1])) * 0.8))" "$busy_share")
}

ratio() { "$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) / float(sys.argv[1])))" "$1" "$2"; }

echo "| run | alone img/s | beside a busy loop: img/s (ratio; its share s, goal (1-s)x0.8) | beside a second copy: img/s (ratio; goal 0.40) |"
echo "|---|---|---|---|"
for variant in $VARIANTS; do
  envs=()
  [ "$variant" != default ] && envs=("$variant")
  alone=$(orchard_run "alone" "${envs[@]}")
  beside_busy orchard_run "busy" "${envs[@]}"
  # Two copies at once: the first one's rate (both run the same steps).
  orchard_run "pair_b" "${envs[@]}" >"$WORK/pair_b.rate" &
  pair_pid=$!
  pair=$(orchard_run "pair_a" "${envs[@]}")
  wait "$pair_pid"
  echo "| Orchard${LABEL:+ $LABEL} ($variant) | $alone | $busy_rate ($(ratio "$alone" "$busy_rate"); s $busy_share, goal $busy_goal) | $pair ($(ratio "$alone" "$pair")) |"
done
if [ "$PEER" = 1 ]; then
  alone=$(peer_run)
  beside_busy peer_run
  peer_run >"$WORK/peer_b.rate" &
  pair_pid=$!
  pair=$(peer_run)
  wait "$pair_pid"
  echo "| PyTorch $("$PY" -c 'import torch; print(torch.__version__)') eager | $alone | $busy_rate ($(ratio "$alone" "$busy_rate"); s $busy_share, goal $busy_goal) | $pair ($(ratio "$alone" "$pair")) |"
fi
