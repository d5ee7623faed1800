#!/usr/bin/env bash
# The embedded default: Fashion-MNIST -> TFRecord shards -> trains the small-image ResNet ->
# evaluates -> prints accuracy, where the logs and checkpoints are, and a sample prediction.
# Usage: scripts/demo.sh [WORK_DIR]     (default: ./orchard-demo; extra flags via ORCHARD_DEMO_FLAGS)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
orchard_install_packages
orchard_build orchard
ORCHARD="$BUILD_DIR/orchard"

WORK="${1:-$PWD/orchard-demo}"
DATA="$WORK/fashion-mnist"
MODEL="$WORK/model"
mkdir -p "$WORK"

if [ ! -f "$DATA/labels.txt" ]; then
  echo "== Converting Fashion-MNIST to TFRecord shards in $DATA"
  "$ORCHARD" data fashion-mnist --out_dir "$DATA" --num_shards 8 --num_validation_shards 2
fi
echo "== One record, as JSON:"
"$ORCHARD" data inspect "$DATA/validation-00000-of-00002" --limit 1 --dump_images "$WORK/samples"

echo "== Training (about 10 minutes on 2 cores; a re-run resumes from the last checkpoint)"
# A short version of the ResNet CTL recipe: 8 epochs, warm-up 0.5 epoch, LR x0.1 at epochs 5 and 7,
# with TF Models' CIFAR-10 augmentation (pad, random crop, flip) that suits 28-pixel images.
# shellcheck disable=SC2086
"$ORCHARD" classify train \
  --data_dir "$DATA" --model_dir "$MODEL" \
  --model resnet18_small --width 16 --image_size 28 --data_format channels_first \
  --batch_size 128 --train_epochs 8 --epochs_between_evals 4 \
  --base_learning_rate 0.4 --warmup_epochs 0.5 --lr_boundaries 5,7 --lr_multipliers 1,0.1,0.01 \
  --augmentation pad_crop --pad 2 --label_smoothing 0.1 \
  --enable_checkpoint_and_export --enable_tensorboard --log_steps 100 \
  --stats_file "$WORK/stats.json" ${ORCHARD_DEMO_FLAGS:-}

ACC=$(sed -n 's/.*"accuracy_top_1": \([0-9.]*\).*/\1/p' "$WORK/stats.json")
echo
echo "== Fashion-MNIST test accuracy (top-1): ${ACC:-unknown}"
echo "== Model directory:      $MODEL"
echo "== TensorBoard:          tensorboard --logdir $MODEL"
echo "== Sample prediction (true class: $(sed -n 's/.*"image\/class\/text":{"bytes_list":\["\([^"]*\)".*/\1/p' <("$ORCHARD" data inspect "$DATA/validation-00000-of-00002" --limit 1))):"
"$ORCHARD" classify predict --model_dir "$MODEL" "$WORK/samples/0.png" --top_k 3
