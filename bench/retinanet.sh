#!/usr/bin/env bash
# Detection training steps and inference from the OD API's sample configs, Orchard vs
# PyTorch-Python side by side (issues 33, 34).
# MODEL=retinanet (default): the OD API's
# ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco14_sync.config (90 classes, its paths
# filled with placeholders, nothing else changed) through bench/retinanet_bench.cc, and
# torchvision's retinanet_resnet50_fpn (91 classes incl. background) through
# bench/peer_retinanet.py, at the same size (640), batch and groundtruth count, alternating
# which side goes first. Prints each run's JSON line, the medians and the Orchard / PyTorch
# speed ratio (> 1: Orchard faster).
# MODEL=ssdlite: the OD API's ssdlite_mobilenet_v3_large_320x320_coco.config (90 classes) vs
# torchvision's ssdlite320_mobilenet_v3_large, 320x320.
# MODEL=faster_rcnn: the OD API's two-stage faster_rcnn_resnet50_coco.config (keep_aspect_ratio_resizer
# 600..1024: every image fed at SIZE x SIZE, default 600) vs torchvision's fasterrcnn_resnet50_fpn
# at the same size (min_size = max_size = SIZE, no padding to a multiple of 32), with the config's
# post-processing thresholds (score 0.0, 300 detections) and gradient clipping (10).
# MODEL=mask_rcnn: the OD API's mask_rcnn_resnet50_atrous_coco.config (800..1365 resizer, fed at
# SIZE x SIZE, default 600) vs torchvision's maskrcnn_resnet50_fpn, as faster_rcnn; each groundtruth
# box carries the ellipse inscribed in it as its instance mask on both sides.
# MODES="train infer" (default "train"): infer times eval-mode forward + postprocess, no gradient.
# TUNED=1 also runs the peer with the glibc malloc settings Orchard applies to itself
# ("pytorch_tuned", as bench/train.sh): stock glibc returns the freed activations to the OS and
# page-faults them back every step.
#
#   bench/retinanet.sh                       # batch 2, 2 threads, 3 repeats of 3 steps
#   BATCH=4 REPEATS=1 bench/retinanet.sh
#   MODEL=ssdlite bench/retinanet.sh         # batch 8
#   MODEL=faster_rcnn MODES="train infer" bench/retinanet.sh   # batch 1, 600x600
#   MODEL=mask_rcnn MODES="train infer" bench/retinanet.sh     # batch 1, 600x600
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build-bench}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
WORK=${WORK:-${TMPDIR:-/tmp}/orchard-retinanet-bench}
MODEL=${MODEL:-retinanet}
CONFIGS=od_api_configs
PEER_ARGS=()
case "$MODEL" in
  retinanet) SAMPLE=ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco14_sync PEER=retinanet_resnet50_fpn SIZE=640
    BATCH=${BATCH:-2} ;;
  ssdlite) SAMPLE=ssdlite_mobilenet_v3_large_320x320_coco PEER=ssdlite320_mobilenet_v3_large SIZE=320
    BATCH=${BATCH:-8} ;;
  faster_rcnn) SAMPLE=faster_rcnn_resnet50_coco CONFIGS=od_api_two_stage_configs PEER=fasterrcnn_resnet50_fpn
    SIZE=${SIZE:-600} BATCH=${BATCH:-1}
    # The config's gradient_clipping_by_norm and second_stage_post_processing, on the peer too.
    PEER_ARGS=(--size_divisible 1 --clip_norm 10 --box_score_thresh 0 --box_detections_per_img 300) ;;
  mask_rcnn) SAMPLE=mask_rcnn_resnet50_atrous_coco CONFIGS=od_api_two_stage_configs PEER=maskrcnn_resnet50_fpn
    SIZE=${SIZE:-600} BATCH=${BATCH:-1}
    PEER_ARGS=(--size_divisible 1 --clip_norm 10 --box_score_thresh 0 --box_detections_per_img 300) ;;
  *) echo "retinanet.sh: MODEL is retinanet, ssdlite, faster_rcnn or mask_rcnn, not '$MODEL'" >&2; exit 1 ;;
esac
MODES=${MODES:-train}
TUNED=${TUNED:-0}
TUNED_ENV=(MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=67108864)
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
    "$ROOT/tests/fixtures/$CONFIGS/$SAMPLE.config" >"$CONFIG"
RESULTS="$WORK/results-$(date +%Y%m%d-%H%M%S).jsonl"
for ((r = 0; r < REPEATS; ++r)); do
  # Other load on the machine disturbs the repeats: say how much there was.
  echo "# repeat $((r + 1)) of $REPEATS, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  for mode in $MODES; do
    orchard() { OMP_NUM_THREADS=$THREADS "$BUILD/bench/retinanet_bench" --config "$CONFIG" --mode "$mode" --size "$SIZE" \
      --batch "$BATCH" --iters "$ITERS" --threads "$THREADS" --budget_s 600 | tee -a "$RESULTS"; }
    # pytorch IMPL [VAR=VALUE...]: the peer under the environment settings given.
    pytorch() { (cd "$ROOT/bench" && env "${@:2}" OMP_NUM_THREADS=$THREADS "$PY" peer_retinanet.py --impl "$1" \
      --model "$PEER" --mode "$mode" --size "$SIZE" --batch "$BATCH" --iters "$ITERS" --threads "$THREADS" \
      ${PEER_ARGS[@]+"${PEER_ARGS[@]}"}) | tee -a "$RESULTS"; }
    tuned() { if ((TUNED)); then pytorch pytorch_tuned "${TUNED_ENV[@]}"; fi; }
    if ((r % 2 == 0)); then orchard; pytorch pytorch; tuned; else tuned; pytorch pytorch; orchard; fi
  done
done
"$PY" - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for mode in dict.fromkeys(r["bench"] for r in rows):
    med, name = {}, {}
    for impl in ("orchard", "pytorch", "pytorch_tuned"):
        mine = [r for r in rows if r["impl"] == impl and r["bench"] == mode]
        if mine:
            med[impl] = statistics.median(r["median_ms"] for r in mine)
            name[impl] = mine[0]["model"]
    first = rows[0]
    what = "train step" if mode == "train" else "inference"
    line = (f"{what}, batch {first['size']}, {first['height']}x{first['width']}, {first['threads']} threads: "
            f"Orchard {name['orchard']} {med['orchard']:.0f} ms, torchvision {name['pytorch']} {med['pytorch']:.0f} ms, "
            f"ratio {med['pytorch'] / med['orchard']:.2f}x")
    if "pytorch_tuned" in med:
        line += f"; malloc-tuned torchvision {med['pytorch_tuned']:.0f} ms, ratio {med['pytorch_tuned'] / med['orchard']:.2f}x"
    print(line)
PY
