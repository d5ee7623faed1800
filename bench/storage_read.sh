#!/usr/bin/env bash
# Object-storage throughput (issue 53): the same TFRecord shards read from the local disk and
# from S3 (npm s3rver on loopback), and a checkpoint-sized object written to each.
#
#   bench/storage_read.sh                       # 8 shards x 25 MiB, 100 MiB checkpoint, 3 repeats
#   SHARDS=8 SHARD_MB=25 CKPT_MB=100 REPEATS=5 BLOCK_MB=8 BLOCKS=4 RTT_MS=20 bench/storage_read.sh
#
# (a) builds storage_bench into $BUILD (default build), (b) makes the shards under $WORK/local
# (kept between runs), (c) starts s3rver from tests/npm on a free loopback port with its store
# under $WORK/s3rver and uploads the shards, (d) each repeat reads all shards locally, from S3
# with prefetching ($BLOCKS blocks of $BLOCK_MB MiB in flight, the next shard started before
# the current one ends) and from S3 one block at a time (blocks=1, no next-shard start: the
# reader before prefetching), then writes $CKPT_MB MiB locally, to S3 with parallel parts and
# with one part at a time; the S3 runs again through a proxy in storage_bench that holds each
# request $RTT_MS ms (a store that far away; RTT_MS=0 skips them), (e) prints medians and
# ratios. Raw JSON lines go to $WORK/results-<time>.jsonl. Every read checks each record's CRCs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
WORK=${WORK:-${TMPDIR:-/tmp}/orchard-storage-bench}
SHARDS=${SHARDS:-8}
SHARD_MB=${SHARD_MB:-25}
CKPT_MB=${CKPT_MB:-100}
REPEATS=${REPEATS:-3}
BLOCK_MB=${BLOCK_MB:-8}
BLOCKS=${BLOCKS:-4}
PART_MB=${PART_MB:-16}
CONCURRENCY=${CONCURRENCY:-6}
RTT_MS=${RTT_MS:-20}
NPM="$ROOT/tests/npm"

# (a) build
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCH=ON >/dev/null
fi
cmake --build "$BUILD" --target storage_bench >/dev/null
BENCH="$BUILD/bench/storage_bench"

# (b) shards
mkdir -p "$WORK/local"
if [[ ! -f "$WORK/local/.made-$SHARDS-$SHARD_MB" ]]; then
  rm -f "$WORK"/local/train-* "$WORK"/local/.made-*
  "$BENCH" make --dir "$WORK/local" --shards "$SHARDS" --shard_mb "$SHARD_MB"
  touch "$WORK/local/.made-$SHARDS-$SHARD_MB"
fi
mapfile -t LOCAL < <(ls "$WORK"/local/train-*)

# (c) s3rver
[[ -d "$NPM/node_modules/s3rver" ]] || (cd "$NPM" && npm ci --no-audit --no-fund --loglevel=error)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -rf "$WORK/s3rver" && mkdir -p "$WORK/s3rver"
node --openssl-legacy-provider "$NPM/node_modules/s3rver/bin/s3rver.js" -d "$WORK/s3rver" -a 127.0.0.1 \
  -p "$PORT" --configure-bucket bench >"$WORK/s3rver.log" 2>&1 &
S3RVER_PID=$!
trap 'kill $S3RVER_PID 2>/dev/null || true' EXIT
export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT" AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  sleep 0.1
done
sleep 1  # the bucket is configured just after the port opens
"$BENCH" copy --from "${LOCAL[@]}" --to s3://bench/shards
S3=()
for f in "${LOCAL[@]}"; do S3+=("s3://bench/shards/$(basename "$f")"); done

# (d) runs
OUT="$WORK/results-$(date +%Y%m%d-%H%M%S).jsonl"
run() {  # label, command...
  local label=$1; shift
  "$@" | python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); j["label"]=sys.argv[1]; print(json.dumps(j))' \
    "$label" >>"$OUT"
}
RTTS="0"
[[ "$RTT_MS" != 0 ]] && RTTS="0 $RTT_MS"
cat "${LOCAL[@]}" >/dev/null  # the page cache holds both copies, as it holds s3rver's store
run warmup "$BENCH" read "${S3[@]}"
for r in $(seq "$REPEATS"); do
  run local_read "$BENCH" read "${LOCAL[@]}"
  for rtt in $RTTS; do
    sfx=$([[ $rtt == 0 ]] || echo "_rtt$rtt")
    run "s3_read_prefetch$sfx" "$BENCH" read "${S3[@]}" --block_mb "$BLOCK_MB" --blocks "$BLOCKS" --rtt_ms "$rtt"
    run "s3_read_one_block$sfx" "$BENCH" read "${S3[@]}" --block_mb "$BLOCK_MB" --blocks 1 --no_next --rtt_ms "$rtt"
  done
  run local_write "$BENCH" write --path "$WORK/ckpt.bin" --mb "$CKPT_MB"
  for rtt in $RTTS; do
    sfx=$([[ $rtt == 0 ]] || echo "_rtt$rtt")
    run "s3_write_parallel$sfx" "$BENCH" write --path s3://bench/ckpt.bin --mb "$CKPT_MB" --part_mb "$PART_MB" \
      --concurrency "$CONCURRENCY" --rtt_ms "$rtt"
    run "s3_write_one_part$sfx" "$BENCH" write --path s3://bench/ckpt.bin --mb "$CKPT_MB" --part_mb "$PART_MB" \
      --concurrency 1 --rtt_ms "$rtt"
  done
done

# (e) summary
python3 - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for label in dict.fromkeys(r["label"] for r in rows):
    if label == "warmup":
        continue
    sel = [r for r in rows if r["label"] == label]
    med[label] = (statistics.median(r["mb_per_s"] for r in sel), statistics.median(r["seconds"] for r in sel),
                  statistics.median(r["cpu_seconds"] for r in sel))
print(f"{'run':<26} {'MB/s':>8} {'seconds':>8} {'cpu s':>7}  (medians of {sys.argv[2]})")
for label, (mbps, s, cpu) in med.items():
    print(f"{label:<26} {mbps:8.1f} {s:8.2f} {cpu:7.2f}")
def ratio(a, b):
    return f"{med[a][0] / med[b][0]:.2f}x" if a in med and b in med else "-"
for sfx in [""] + sorted({l[l.index("_rtt"):] for l in med if "_rtt" in l}):
    print("\nloopback" + (f" + {sfx[4:]} ms per request:" if sfx else ":"))
    print(f"  read:  s3 prefetch / local = {ratio('s3_read_prefetch' + sfx, 'local_read')}, "
          f"s3 prefetch / s3 one block = {ratio('s3_read_prefetch' + sfx, 's3_read_one_block' + sfx)}")
    print(f"  write: s3 parallel / local = {ratio('s3_write_parallel' + sfx, 'local_write')}, "
          f"s3 parallel / s3 one part = {ratio('s3_write_parallel' + sfx, 's3_write_one_part' + sfx)}"
          " (throughput ratios)")
PY
