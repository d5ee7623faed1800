#!/usr/bin/env bash
# Whole `train` commands of two Orchard binaries, alternated A B A B on the same data, to check a
# refactoring for speed and memory (bench/README.md, "The detection redesign against the tree
# before it"). Prints, per run, the ratio B/A of each pair's wall time (median, min-max) and the
# median peak RSS of each.
#
#   bash bench/ab_train.sh A_BIN B_BIN [PAIRS] [OUT_DIR]      # PAIRS: counted pairs (default 5)
#   RUNS="classify detect" bash bench/ab_train.sh ...         # a subset of: classify detect
#                                                             #   faster_rcnn caption
# One warm-up pair first (not counted). Two threads per run (--num_threads 2, OMP_NUM_THREADS=2).
set -euo pipefail
set -f  # the commands below are word-split, never globbed (the caption run passes a file pattern)
a_bin=$1
b_bin=$2
pairs=${3:-5}
out=${4:-/tmp/orchard-ab}
runs=${RUNS:-classify detect faster_rcnn caption}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export OMP_NUM_THREADS=2

# The data, written once by A (both binaries read the same records).
[ -d "$out/fmnist" ] || "$a_bin" data fashion-mnist --out_dir "$out/fmnist" --limit 2560 --num_shards 2 \
  --num_validation_shards 1 >/dev/null 2>&1
[ -d "$out/shapes" ] || "$a_bin" data shapes --task detection --out_dir "$out/shapes" --num_train 64 \
  --num_validation 16 --seed 3 >/dev/null 2>&1
[ -d "$out/captions" ] || "$a_bin" data shapes --task captioning --out_dir "$out/captions" --num_train 320 \
  --num_validation 32 --seed 5 >/dev/null 2>&1
# Faster R-CNN: the OD API's faster_rcnn_resnet50_pets sample as bench/sample_configs.sh fills it
# (batch 2, the shapes images at 600x600).
frcnn_cfg=$out/samples/faster_rcnn_resnet50_pets.config
[ -f "$frcnn_cfg" ] || CONFIGS=$here/tests/fixtures/od_api_two_stage_configs \
  bash "$here/bench/sample_configs.sh" "$a_bin" "$out/samples" faster_rcnn_resnet50_pets >/dev/null

command_for() {  # run binary model_dir
  local run=$1 bin=$2 dir=$3
  case "$run" in
    classify)
      echo "$bin" classify train --data_dir "$out/fmnist" --model_dir "$dir" --model resnet18 --width 16 \
        --image_size 28 --batch_size 64 --train_epochs 2 --num_threads 2 --datasets_num_private_threads 1 \
        --enable_checkpoint_and_export --enable_tensorboard --seed 1 ;;
    detect)
      echo "$bin" detect train --pipeline_config_path "$out/shapes/pipeline.config" --model_dir "$dir" \
        --num_train_steps 30 --save_checkpoints_steps 15 --num_threads 2 --num_preprocess_threads 1 --seed 3 ;;
    faster_rcnn)
      echo "$bin" detect train --pipeline_config_path "$frcnn_cfg" --model_dir "$dir" --num_train_steps 4 \
        --save_checkpoints_steps 4 --num_threads 2 --num_preprocess_threads 1 --seed 3 ;;
    caption)
      echo "$bin" caption train --input_file_pattern "$out/captions/train-*" \
        --eval_file_pattern "$out/captions/validation-*" --train_dir "$dir" --train_steps 20 \
        --save_checkpoints_steps 10 --save_checkpoints_secs 0 --image_size 75 --train_batch_size 16 \
        --train_inception --num_preprocess_threads 1 --num_threads 2 --seed 1 ;;
    *) echo "ab_train.sh: unknown run '$run'" >&2; exit 2 ;;
  esac
}

# Runs one command; prints "seconds peak_rss_kib".
timed() {
  local log=$1; shift
  local start end
  start=$(date +%s.%N)
  /usr/bin/time -f '%M' -o "$log.rss" "$@" >"$log" 2>&1 || { echo "ab_train.sh: failed, see $log" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc) $(cat "$log.rss")"
}

echo "| run | wall time B/A, median (min-max) | peak RSS B vs A (MiB) |"
echo "|---|---|---|"
for run in $runs; do
  ratios=() rss_a=() rss_b=()
  for i in $(seq 0 "$pairs"); do
    read -r ta ra < <(timed "$out/$run-a-$i.log" $(command_for "$run" "$a_bin" "$out/model-$run-a"))
    rm -rf "$out/model-$run-a"
    read -r tb rb < <(timed "$out/$run-b-$i.log" $(command_for "$run" "$b_bin" "$out/model-$run-b"))
    rm -rf "$out/model-$run-b"
    [ "$i" -eq 0 ] && continue  # the warm-up pair
    ratios+=("$(echo "scale=4; $tb / $ta" | bc)")
    rss_a+=("$ra") rss_b+=("$rb")
  done
  python3 - "$run" "${ratios[*]}" "${rss_a[*]}" "${rss_b[*]}" <<'PY'
import statistics, sys
run, r, a, b = sys.argv[1], *[list(map(float, s.split())) for s in sys.argv[2:5]]
print(f"| {run} | {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) | "
      f"{statistics.median(b) / 1024:.0f} vs {statistics.median(a) / 1024:.0f} |")
PY
done
