#!/usr/bin/env bash
# SSD-family training steps, Orchard vs PyTorch-Python side by side (issue 33).
# MODEL=retinanet (default): the OD API's
# ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco14_sync.config (90 classes, its paths
# filled with placeholders, nothing else changed) through bench/retinanet_bench.cc, and
# torchvision's retinanet_resnet50_fpn (91 classes incl. background) through
# bench/peer_retinanet.py, at the same size (640), batch and groundtruth count, alternating
# which side goes first. Prints each run's JSON line, the medians and the Orchard / PyTorch
# speed ratio (> 1: Orchard faster).
# MODEL=ssdlite: the OD API's ssdlite_mobilenet_v3_large_320x320_coco.config (90 classes) vs
# torchvision's ssdlite320_mobilenet_v3_large, 320x320.
#
#   bench/retinanet.sh                       # batch 2, 2 threads, 3 repeats of 3 steps
#   BATCH=4 REPEATS=1 bench/retinanet.sh
#   MODEL=ssdlite bench/retinanet.sh         # batch 8
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build-bench}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
WORK=${WORK:-${TMPDIR:-/tmp}/orchard-retinanet-bench}
MODEL=${MODEL:-retinanet}
case "$MODEL" in
  retinanet) SAMPLE=ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco14_sync PEER=retinanet_resnet50_fpn SIZE=640
    BATCH=${BATCH:-2} ;;
  ssdlite) SAMPLE=ssdlite_mobilenet_v3_large_320x320_coco PEER=ssdlite320_mobilenet_v3_large SIZE=320
    BATCH=${BATCH:-8} ;;
  *) echo "retinanet.sh: MODEL is retinanet or ssdlite, not '$MODEL'" >&2; exit 1 ;;
esac
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
ITERS=${ITERS:-3}
PY=/usr/bin/python3
if ! "$PY" -c 'import torchvision' 2>/dev/null; then
  echo "retinanet.sh: $PY lacks torchvision: sudo apt-get install -y python3-torchvision" >&2
  exit 1
fi
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCH=ON \
    -DORCHARD_BUILD_TESTS=OFF >/dev/null
fi
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" --target retinanet_bench -j 2 >/dev/null
mkdir -p "$WORK"
CONFIG="$WORK/$MODEL.config"
sed -e 's#PATH_TO_BE_CONFIGURED/[^"]*label_map[^"]*#'"$WORK"'/label_map.pbtxt#' \
    -e 's#PATH_TO_BE_CONFIGURED/[^"]*record[^"]*#'"$WORK"'/none.record#' \
    -e '/fine_tune_checkpoint:/d' \
    "$ROOT/tests/fixtures/od_api_configs/$SAMPLE.config" >"$CONFIG"
RESULTS="$WORK/results-$(date +%Y%m%d-%H%M%S).jsonl"
for ((r = 0; r < REPEATS; ++r)); do
  orchard() { OMP_NUM_THREADS=$THREADS "$BUILD/bench/retinanet_bench" --config "$CONFIG" --batch "$BATCH" \
    --iters "$ITERS" --threads "$THREADS" | tee -a "$RESULTS"; }
  pytorch() { (cd "$ROOT/bench" && OMP_NUM_THREADS=$THREADS "$PY" peer_retinanet.py --model "$PEER" --size "$SIZE" --batch "$BATCH" \
    --iters "$ITERS" --threads "$THREADS") | tee -a "$RESULTS"; }
  if ((r % 2 == 0)); then orchard; pytorch; else pytorch; orchard; fi
done
"$PY" - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med, name = {}, {}
for impl in ("orchard", "pytorch"):
    mine = [r for r in rows if r["impl"] == impl]
    med[impl] = statistics.median(r["median_ms"] for r in mine)
    name[impl] = mine[0]["model"]
print(f"train step, batch {rows[0]['size']}, {rows[0]['height']}x{rows[0]['width']}, {rows[0]['threads']} threads: "
      f"Orchard {name['orchard']} {med['orchard']:.0f} ms, torchvision {name['pytorch']} {med['pytorch']:.0f} ms, "
      f"ratio {med['pytorch'] / med['orchard']:.2f}x")
PY
