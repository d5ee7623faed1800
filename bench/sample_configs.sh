#!/usr/bin/env bash
# The OD API's SSD sample configs (tests/fixtures/od_api_configs, Apache-2.0) as a new user runs
# them: PATH_TO_BE_CONFIGURED filled with the synthetic shapes set, num_classes 3, the
# fine_tune_checkpoint line removed (no zoo checkpoint here) and, so that 640x640 models fit a
# laptop, train_config.batch_size 2; nothing else changed. Each config trains 2 steps and
# evaluates; the table (config -> result: "trains + evaluates" or the one-line error) goes to
# stdout in Markdown, the logs to $OUT/<config>.log.
#
#   bash bench/sample_configs.sh [ORCHARD_BIN] [OUT_DIR] [NAME_GLOB]   # e.g. 'ssdlite_mobilenet_v3*'
#   CONFIGS=tests/fixtures/od_api_two_stage_configs bash bench/sample_configs.sh   # the 29 two-stage ones
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/orchard}
out=${2:-/tmp/orchard-sample-configs}
configs=${CONFIGS:-$here/tests/fixtures/od_api_configs}
mkdir -p "$out"
data=$out/shapes-masks  # with each object's mask, for the Mask R-CNN configs
[ -d "$data" ] || "$bin" data shapes --task detection --include_masks --out_dir "$data" --num_train 16 --num_validation 4 \
  --seed 1 >/dev/null 2>&1
echo "| config | result |"
echo "|---|---|"
for cfg in "$configs"/${3:-*}.config; do
  name=$(basename "$cfg" .config)
  filled=$out/$name.config
  python3 - "$cfg" "$filled" "$data" <<'PY'
import re, sys
src, dst, data = sys.argv[1:4]
text = open(src).read()
text = re.sub(r'label_map_path:\s*"[^"]*"', f'label_map_path: "{data}/label_map.pbtxt"', text)
def reader(block, pattern):
    return re.sub(r'input_path:\s*"[^"]*"', f'input_path: "{data}/{pattern}"', block)
i = text.find('train_input_reader'); j = text.find('eval_config')
if i >= 0:
    end = text.find('\n}', i)
    text = text[:i] + reader(text[i:end], 'train-*') + text[end:]
k = text.find('eval_input_reader')
if k >= 0:
    text = text[:k] + reader(text[k:], 'validation-*')
text = re.sub(r'num_classes:\s*\d+', 'num_classes: 3', text)
text = re.sub(r'\n\s*fine_tune_checkpoint:\s*"[^"]*"', '', text)
text = re.sub(r'batch_size:\s*\d+', 'batch_size: 2', text, count=1)
open(dst, 'w').write(text)
PY
  log=$out/$name.log
  if OMP_NUM_THREADS=2 "$bin" detect train --pipeline_config_path "$filled" --model_dir "$out/$name" --clean \
      --num_train_steps 2 --num_threads 2 >"$log" 2>&1; then
    ap=$(grep -oE '[A-Za-z0-9]+_Precision/mAP(@0.5IOU)?=[0-9.na-]+' "$log" | tail -1)
    warn=$(grep -c ' W ' "$log")
    echo "| \`$name\` | trains + evaluates ($ap; $warn warnings) |"
  else
    reason=$(grep -v '^\s*$' "$log" | tail -1 | sed 's/|/\\|/g' | cut -c1-400)
    echo "| \`$name\` | $reason |"
  fi
done
