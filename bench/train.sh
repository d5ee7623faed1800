#!/usr/bin/env bash
# Training throughput and peak memory, Orchard vs PyTorch-Python eager (issue 3), side by
# side in one run: same model, batch, image size, threads, synthetic data, SGD + momentum,
# cross entropy + L2 on non-BN weights.
#
#   bench/train.sh                    # the three configurations below, 2 threads
#   THREADS=2 STEPS=20 BUILD=build bench/train.sh
#
# Prints one table: images/s for each side, the ratio Orchard/PyTorch, and peak RSS.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-12}
PY=/usr/bin/python3
ORCHARD="$BUILD/orchard"
[ -x "$ORCHARD" ] || cmake --build "$BUILD" --target orchard
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# model image_size batch width data_format
CONFIGS=${CONFIGS-resnet50:224:8:0 resnet18:112:32:0 resnet18_small:32:128:16}
FORMATS=${FORMATS:-"channels_first channels_last"}

# pytorch_tuned: the peer with the same glibc malloc settings Orchard applies to itself
# (freed memory kept in the heap), to separate that effect from the rest.
TUNED_ENV=(MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=67108864)
[ -n "$CONFIGS" ] && printf '%-16s %5s %5s %-15s %12s %12s %7s %12s %7s %9s %9s\n' model size batch format orchard_img/s pytorch_img/s ratio pt_tuned_img/s ratio orch_MB torch_MB
for cfg in $CONFIGS; do
  IFS=: read -r model size batch width <<<"$cfg"
  for fmt in $FORMATS; do
    warm=3
    # Orchard: steps warm+STEPS, log every STEPS so the first (warm-up) window is excluded.
    /usr/bin/time -f '%M' -o "$WORK/orch.rss" "$ORCHARD" classify train --use_synthetic_data \
      --model "$model" --width "$width" --image_size "$size" --batch_size "$batch" --num_classes 1000 \
      --train_steps $((warm + STEPS)) --log_steps "$warm" --steps_per_loop $((warm + STEPS)) \
      --num_threads "$THREADS" --data_format "$fmt" --model_dir "$WORK/m" --clean \
      --stats_file "$WORK/orch.json" >"$WORK/orch.log" 2>&1 || { cat "$WORK/orch.log"; exit 1; }
    orch=$("$PY" -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["avg_exp_per_second"])' "$WORK/orch.json")
    cl=""; [ "$fmt" = channels_last ] && cl="--channels_last"
    /usr/bin/time -f '%M' -o "$WORK/torch.rss" "$PY" "$ROOT/bench/peer_train.py" --model "$model" --width "$width" \
      --image_size "$size" --batch_size "$batch" --steps "$STEPS" --warmup "$warm" --threads "$THREADS" $cl \
      >"$WORK/torch.json"
    torch=$("$PY" -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["images_per_second"])' "$WORK/torch.json")
    env "${TUNED_ENV[@]}" "$PY" "$ROOT/bench/peer_train.py" --model "$model" --width "$width" \
      --image_size "$size" --batch_size "$batch" --steps "$STEPS" --warmup "$warm" --threads "$THREADS" $cl \
      >"$WORK/tuned.json"
    tuned=$("$PY" -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["images_per_second"])' "$WORK/tuned.json")
    ratio=$("$PY" -c "print('%.2f' % ($orch / $torch))")
    ratio_t=$("$PY" -c "print('%.2f' % ($orch / $tuned))")
    printf '%-16s %5s %5s %-15s %12s %12s %7s %12s %7s %9d %9d\n' "$model" "$size" "$batch" "$fmt" "$orch" "$torch" "$ratio" \
      "$tuned" "$ratio_t" $(($(cat "$WORK/orch.rss") / 1024)) $(($(cat "$WORK/torch.rss") / 1024))
  done
done

# End-to-end: the real input pipeline (TFRecord JPEG photos made by bench/pipeline.sh's
# make_photos.py, ResNet train preprocessing) vs synthetic data, same model and steps.
E2E_RECORDS=${E2E_RECORDS:-${TMPDIR:-/tmp}/orchard-pipeline-bench/records-512}
if [ -d "$E2E_RECORDS" ] && [ "${E2E:-1}" = 1 ]; then
  echo
  printf '%-16s %5s %5s %14s %14s %7s\n' model size batch pipeline_img/s synthetic_img/s ratio
  E2E_CONFIGS=${E2E_CONFIGS:-resnet18:112:32 resnet50:224:8}
  for cfg in $E2E_CONFIGS; do
    IFS=: read -r model size batch <<<"$cfg"
    for src in real synthetic; do
      extra=(--data_dir "$E2E_RECORDS"); [ "$src" = synthetic ] && extra=(--use_synthetic_data --num_classes 10)
      "$ORCHARD" classify train "${extra[@]}" --skip_eval --model "$model" --image_size "$size" \
        --batch_size "$batch" --train_steps $((3 + STEPS)) --log_steps 3 --steps_per_loop $((3 + STEPS)) \
        --num_threads "$THREADS" --data_format channels_first --model_dir "$WORK/e2e" --clean \
        --stats_file "$WORK/$src.json" >"$WORK/e2e.log" 2>&1 || { cat "$WORK/e2e.log"; exit 1; }
    done
    real=$("$PY" -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["avg_exp_per_second"])' "$WORK/real.json")
    syn=$("$PY" -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["avg_exp_per_second"])' "$WORK/synthetic.json")
    printf '%-16s %5s %5s %14s %14s %7s\n' "$model" "$size" "$batch" "$real" "$syn" "$("$PY" -c "print('%.2f' % ($real / $syn))")"
  done
else
  echo "(end-to-end table skipped: run bench/pipeline.sh first to make $E2E_RECORDS)"
fi
