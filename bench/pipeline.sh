#!/usr/bin/env bash
# Input-pipeline benchmark, Orchard vs torchvision, side by side in one run (issue 2).
#
#   bench/pipeline.sh                     # build/, threads 1 and 2, 3 repeats
#   BUILD=build-bench THREADS="1 2 4" REPEATS=5 bench/pipeline.sh
#
# (a) builds pipeline_bench and orchard into $BUILD (default build), (b) makes $COUNT
# ImageNet-like JPEGs from Fashion-MNIST and the same images as TFRecord shards under
# $WORK (kept for later runs), (c) for each repeat and each thread count runs Orchard's
# Pipeline (TFRecord -> decode-and-crop -> ResNet train preprocessing -> batches of 32)
# and torchvision's ImageFolder + RandomResizedCrop + DataLoader(num_workers=T) one after
# the other, (d) prints the medians and the Orchard/torchvision ratios.
# Raw JSON lines go to $WORK/results-<time>.jsonl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
WORK=${WORK:-${TMPDIR:-/tmp}/orchard-pipeline-bench}
COUNT=${COUNT:-512}         # images in the data set
BATCH=${BATCH:-32}
BATCHES=${BATCHES:-40}      # timed batches per run
WARMUP=${WARMUP:-4}         # untimed batches per run (worker start-up excluded)
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-"1 2"}
PY=/usr/bin/python3         # Debian's python3-torch + python3-torchvision, not pyenv's

if ! "$PY" -c 'import torchvision, PIL' 2>/dev/null; then
  echo "pipeline.sh: $PY lacks torchvision: sudo apt-get install -y python3-torchvision" >&2
  exit 1
fi

# (a) build
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCH=ON >/dev/null
elif ! grep -q '^ORCHARD_BUILD_BENCH:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  cmake -S "$ROOT" -B "$BUILD" -DORCHARD_BUILD_BENCH=ON >/dev/null
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")
[[ "$build_type" == Release ]] || echo "pipeline.sh: warning: $BUILD is a '$build_type' build, not Release" >&2
cmake --build "$BUILD" --target pipeline_bench -j "$(nproc)" >/dev/null
BENCH="$BUILD/bench/pipeline_bench"

# (b) data: the same JPEGs as a class-per-folder tree and as TFRecord shards
PHOTOS="$WORK/photos-$COUNT" RECORDS="$WORK/records-$COUNT"
if [[ ! -f "$PHOTOS/.done" ]]; then
  rm -rf "$PHOTOS"
  "$PY" "$ROOT/bench/make_photos.py" --out_dir "$PHOTOS" --count "$COUNT"
  touch "$PHOTOS/.done"
fi
if [[ ! -f "$RECORDS/.done" ]]; then
  rm -rf "$RECORDS"
  cmake --build "$BUILD" --target orchard -j "$(nproc)" >/dev/null
  "$BUILD/orchard" data images --input_dir "$PHOTOS" --out_dir "$RECORDS" --num_shards 8 \
    --validation_fraction 0 >/dev/null
  touch "$RECORDS/.done"
fi
cat "$PHOTOS"/*/*.jpg "$RECORDS"/train-* >/dev/null  # both sides read from the page cache

# (c) side by side: each repeat runs every configuration once, alternating the order
RESULTS="$WORK/results-$(date +%Y%m%d-%H%M%S).jsonl"
load_before=$(cut -d' ' -f1 /proc/loadavg)
run_orchard() {
  "$BENCH" --pattern "$RECORDS/train-*" --threads "$1" --batch_size "$BATCH" --batches "$BATCHES" \
    --warmup_batches "$WARMUP" --num_classes 10 >>"$RESULTS"
}
run_torchvision() {
  "$PY" "$ROOT/bench/peer_torchvision_pipeline.py" --root "$PHOTOS" --workers "$1" --batch_size "$BATCH" \
    --batches "$BATCHES" --warmup_batches "$WARMUP" >>"$RESULTS"
}
for ((r = 1; r <= REPEATS; ++r)); do
  for t in $THREADS; do
    echo "repeat $r/$REPEATS, $t thread(s)..." >&2
    if ((r % 2)); then run_orchard "$t"; run_torchvision "$t"; else run_torchvision "$t"; run_orchard "$t"; fi
  done
done
load_after=$(cut -d' ' -f1 /proc/loadavg)

# (d) table of medians
"$PY" - "$RESULTS" "$(nproc)" "$load_before" "$load_after" "$COUNT" "$BATCH" "$BATCHES" <<'EOF'
import json, statistics, sys
path, cores, lb, la, count, batch, batches = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.startswith("{")]
med = lambda impl, t, k: statistics.median(r[k] for r in rows if r["impl"] == impl and r["threads"] == t)
n = lambda impl, t: sum(1 for r in rows if r["impl"] == impl and r["threads"] == t)
print(f"\nInput pipeline, ResNet train preprocessing to 224x224, batch {batch}, {batches} timed batches,")
print(f"{count} JPEGs (~500x375); medians of {n('orchard', rows[0]['threads'])} runs; {cores} cores, "
      f"load average {lb} before, {la} after.")
print("img/s = wall-clock images per second; /thread = img/s / T; /cpu-s = images per second of CPU time")
print("(all threads and worker processes), the per-core figure least disturbed by other load.\n")
hdr = f"{'T':>2} | {'orchard img/s':>13} {'/thread':>8} {'/cpu-s':>7} | {'torchvision img/s':>17} {'/thread':>8} " \
      f"{'/cpu-s':>7} | {'ratio wall':>10} {'ratio cpu':>9}"
print(hdr)
print("-" * len(hdr))
for t in sorted({r["threads"] for r in rows}):
    o, v = med("orchard", t, "images_per_s"), med("torchvision", t, "images_per_s")
    oc, vc = med("orchard", t, "images_per_cpu_s"), med("torchvision", t, "images_per_cpu_s")
    print(f"{t:>2} | {o:>13.0f} {o / t:>8.0f} {oc:>7.0f} | {v:>17.0f} {v / t:>8.0f} {vc:>7.0f} | "
          f"{o / v:>9.2f}x {oc / vc:>8.2f}x")
print(f"\nraw results: {path}")
EOF
