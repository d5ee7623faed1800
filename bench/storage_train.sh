#!/usr/bin/env bash
# A training run with its data on S3 vs on the local disk (issue 53): the same
# `orchard classify train` on the same Fashion-MNIST shards, once with --data_dir on the local
# disk and once with --data_dir s3://... served by npm s3rver on loopback, alternating which goes
# first. Goal: examples/s with data on S3 at least 0.95 of local.
#
#   bench/storage_train.sh                      # 3 repeats, 150 steps of batch 128
#   REPEATS=5 STEPS=300 LIMIT=30000 bench/storage_train.sh
#
# Also times the whole process with --model_dir on S3 vs local (checkpoint every loop), so the
# cost of uploading checkpoints, config and events shows in the wall time.
# Prints one line per run and the medians with their ratio. Needs tests/npm's node_modules
# (scripts/test.sh installs them).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ORCHARD="$BUILD/orchard"
[ -x "$ORCHARD" ] || cmake --build "$BUILD" --target orchard
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-150}
LIMIT=${LIMIT:-20000}
THREADS=${THREADS:-$(nproc)}
WORK=${WORK:-$(mktemp -d)}
PY=/usr/bin/python3
S3RVER="$ROOT/tests/npm/node_modules/s3rver/bin/s3rver.js"
[ -f "$S3RVER" ] || { echo "missing $S3RVER: run npm ci in tests/npm" >&2; exit 1; }

PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$WORK/s3"
node --openssl-legacy-provider "$S3RVER" -d "$WORK/s3" -a 127.0.0.1 -p "$PORT" --configure-bucket bench \
  >"$WORK/s3rver.log" 2>&1 &
S3PID=$!
trap 'kill $S3PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$WORK/s3rver.log" && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 \
  AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"

"$ORCHARD" data fashion-mnist --out_dir "$WORK/local" --limit "$LIMIT" >/dev/null 2>&1
"$ORCHARD" data fashion-mnist --out_dir s3://bench/fm --limit "$LIMIT" >/dev/null 2>&1

train() {  # data_dir model_dir stats_file
  rm -rf "$WORK/m"
  local start end
  start=$(date +%s.%N)
  "$ORCHARD" classify train --data_dir "$1" --model_dir "$2" --clean --model resnet18_small --width 16 \
    --image_size 28 --data_format channels_first --batch_size 128 --train_steps "$STEPS" \
    --steps_per_loop 50 --enable_checkpoint_and_export --skip_eval --num_threads "$THREADS" \
    --stats_file "$3" >"$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; exit 1; }
  end=$(date +%s.%N)
  "$PY" -c 'import json,sys; print("%.1f %.2f" % (json.load(open(sys.argv[1]))["avg_exp_per_second"], float(sys.argv[3]) - float(sys.argv[2])))' \
    "$3" "$start" "$end"
}

: >"$WORK/results.txt"
for r in $(seq "$REPEATS"); do
  order="local s3"; [ $((r % 2)) = 0 ] && order="s3 local"
  for side in $order; do
    if [ "$side" = local ]; then
      data="$WORK/local"; model="$WORK/m"
    else
      data=s3://bench/fm; model=s3://bench/m
    fi
    read -r eps wall < <(train "$data" "$model" "$WORK/stats.json")
    echo "$side $eps $wall" | tee -a "$WORK/results.txt"
  done
done
"$PY" - "$WORK/results.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {s: (statistics.median(float(r[1]) for r in rows if r[0] == s),
           statistics.median(float(r[2]) for r in rows if r[0] == s)) for s in ("local", "s3")}
print("median examples/s: local %.1f, s3 %.1f, ratio s3/local %.3f" % (med["local"][0], med["s3"][0], med["s3"][0] / med["local"][0]))
print("median wall s (data + model_dir there, start-up, record count, checkpoints): local %.1f, s3 %.1f, ratio %.3f"
      % (med["local"][1], med["s3"][1], med["s3"][1] / med["local"][1]))
EOF
