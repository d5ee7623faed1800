#!/usr/bin/env bash
# The GPU check (issue 5) as one prepared run on the device machine (one H200; CUDA,
# PyTorch 2.x, CMake and ninja there, no network, no Debian dev packages):
#   1. what the machine has (GPU, torch and its C++ ABI, compilers, torch's headers);
#   2. Orchard built against the CUDA libtorch inside that PyTorch install, with the Debian
#      packages carried in .devdeps/ (scripts/device_deps.sh) unpacked into a prefix;
#   3. ResNet-50 @224 synthetic training, bf16 autocast + channels_last, batch 256:
#      Orchard vs PyTorch-Python eager (bench/peer_train.py) on the same GPU, and fp32;
#   4. short real-data runs of every task on the GPU (shapes sets made there).
#
#   here:    scripts/device_deps.sh
#   device:  run(command="bash bench/gpu.sh", carry=[".devdeps"], timeout_s=540)
# Everything goes to $OUT/gpu.log (and stdout), the compiler's output to $OUT/build.log, the
# table to $OUT/gpu_table.txt.
# STEPS, BATCH, JOBS override the defaults; SKIP_TASKS=1 leaves out part 4.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu.log") 2>&1
section() { echo; echo "== $* ($(date +%T))"; }
STEPS=${STEPS:-40}
BATCH=${BATCH:-256}
JOBS=${JOBS:-$(nproc)}
PY=${PY:-python3}

section "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$PY - <<'EOF' || true
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11_abi", torch._C._GLIBCXX_USE_CXX11_ABI,
      "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
inc = os.path.join(os.path.dirname(torch.__file__), "include")
print("torch include:", " ".join(sorted(os.listdir(inc))))
print("cmake prefix:", torch.utils.cmake_prefix_path)
EOF
grep PRETTY_NAME /etc/os-release || true
for t in g++ cmake ninja nvcc; do echo "$t: $(command -v $t) $($t --version 2>/dev/null | grep -m1 -i 'version\|g++\|^[0-9]')"; done

section "dependencies"
DEPS=/tmp/orchard-deps
rm -rf "$DEPS" && mkdir -p "$DEPS"
shopt -s nullglob
debs=("$ROOT"/.devdeps/*.deb)
[ ${#debs[@]} -gt 0 ] || { echo "no .devdeps/*.deb: run scripts/device_deps.sh here and carry .devdeps"; exit 2; }
unpack() {  # dpkg -x, or ar + tar where the image has no dpkg
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$DEPS"; return; fi
  ar p "$1" data.tar.xz | tar -x --xz -C "$DEPS"  # Debian 12's packages are all xz
}
for f in "${debs[@]}"; do unpack "$f" || { echo "cannot unpack $f"; exit 2; }; done
# Development symlinks that point at /lib/... (zlib's libz.so) point into the prefix instead.
find "$DEPS" -type l -lname '/*' | while read -r l; do
  t=$(readlink "$l"); [ -e "$DEPS$t" ] && ln -sfn "$DEPS$t" "$l"
done
echo "unpacked ${#debs[@]} packages into $DEPS"
LIBDIR="$DEPS/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$LIBDIR:$DEPS/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export PATH="$DEPS/usr/bin:$PATH"
TORCH_PREFIX=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')
# The carried headers come before torch's (which are -isystem): a PyTorch install may ship
# its own fmt or protobuf headers of other versions than the carried libraries.
TORCH_INC=$($PY -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"include"))')
for d in fmt google spdlog gloo; do [ -d "$TORCH_INC/$d" ] && echo "torch ships include/$d"; done
EXTRA_INC="-I$DEPS/usr/include"
# The Gloo (CPU) process group needs gloo's headers as torch was built with them: only where
# torch ships them (pip's wheels do not; one GPU needs no process group at all).
GLOO=OFF
[ -d "$TORCH_INC/gloo" ] && GLOO=ON

section "configure"
BUILD=/tmp/orchard-build
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DORCHARD_BUILD_TESTS=OFF -DORCHARD_BUILD_BENCH=OFF -DORCHARD_GLOO=$GLOO \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$DEPS/usr" -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu \
  -DProtobuf_PROTOC_EXECUTABLE="$DEPS/usr/bin/protoc" \
  -DCMAKE_CXX_FLAGS="$EXTRA_INC" -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$LIBDIR:$DEPS/lib/x86_64-linux-gnu -Wl,-rpath,$LIBDIR:$DEPS/lib/x86_64-linux-gnu" \
  || { echo "configure failed"; exit 3; }

section "build"
SECONDS=0
if ! cmake --build "$BUILD" -j "$JOBS" --target orchard >"$OUT/build.log" 2>&1; then
  grep -B2 -A12 -m20 'error' "$OUT/build.log" | head -150
  echo "build failed (whole log: build.log)"
  exit 4
fi
echo "built in ${SECONDS}s; $(grep -c 'warning:' "$OUT/build.log") warnings (build.log)"
ORCHARD="$BUILD/orchard"

section "ResNet-50 @224, batch $BATCH, synthetic data: Orchard vs PyTorch eager"
WORK=/tmp/orchard-gpu
mkdir -p "$WORK"
table="$OUT/gpu_table.txt"
printf '%-6s %-14s %14s %14s %7s\n' dtype format orchard_img/s pytorch_img/s ratio | tee "$table"
for dtype in bf16 fp32; do
  fmt=channels_last
  # Orchard: steps 20 + STEPS, logged every 20: the first window (warm-up, cuDNN choices) is left out.
  "$ORCHARD" classify train --use_synthetic_data --model resnet50 --image_size 224 --batch_size "$BATCH" \
    --num_classes 1000 --num_gpus 1 --dtype "$dtype" --data_format "$fmt" --train_steps $((20 + STEPS)) \
    --log_steps 20 --steps_per_loop $((20 + STEPS)) --skip_eval --model_dir "$WORK/m-$dtype" --clean \
    --stats_file "$WORK/orchard-$dtype.json" >"$WORK/orchard-$dtype.log" 2>&1 \
    || { echo "orchard $dtype failed:"; tail -30 "$WORK/orchard-$dtype.log"; continue; }
  tail -3 "$WORK/orchard-$dtype.log"
  $PY "$ROOT/bench/peer_train.py" --device cuda --dtype "$dtype" --channels_last --model resnet50 --image_size 224 \
    --batch_size "$BATCH" --steps "$STEPS" --warmup 20 --threads "$JOBS" >"$WORK/pytorch-$dtype.json" \
    || { echo "pytorch $dtype failed"; continue; }
  cat "$WORK/pytorch-$dtype.json"
  orch=$($PY -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["avg_exp_per_second"])' "$WORK/orchard-$dtype.json")
  torch=$($PY -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["images_per_second"])' "$WORK/pytorch-$dtype.json")
  printf '%-6s %-14s %14s %14s %7s\n' "$dtype" "$fmt" "$orch" "$torch" "$($PY -c "print('%.2f' % ($orch / $torch))")" | tee -a "$table"
done
nvidia-smi --query-gpu=memory.used,clocks.sm --format=csv,noheader || true

if [ "${SKIP_TASKS:-0}" != 1 ]; then
  section "every task on the GPU (short runs on made shapes sets)"
  D="$WORK/data"
  "$ORCHARD" data shapes --task detection --out_dir "$D/det" --num_train 512 --num_validation 64 --seed 5 >/dev/null 2>&1
  "$ORCHARD" data shapes --task multilabel --out_dir "$D/ml" --num_train 512 --num_validation 64 --seed 5 >/dev/null 2>&1
  "$ORCHARD" data shapes --task captioning --out_dir "$D/cap" --num_train 512 --num_validation 32 --seed 5 >/dev/null 2>&1
  run_task() {
    local name=$1; shift
    if timeout 120 "$ORCHARD" "$@" >"$WORK/$name.log" 2>&1; then
      echo "$name: ok; $(grep -E 'final|step [0-9]+/' "$WORK/$name.log" | tail -1)"
    else
      echo "$name: FAILED"; tail -15 "$WORK/$name.log"
    fi
  }
  run_task detect detect train --pipeline_config_path "$D/det/pipeline.config" --model_dir "$WORK/det" \
    --num_train_steps 100 --log_steps 50 --save_checkpoints_steps 100
  run_task multilabel multilabel train --data_dir "$D/ml" --model_dir "$WORK/ml" --model resnet_tiny --class_num 6 \
    --image_size 32 --batch_size 32 --max_iter 100 --log_interval 50 --test_interval 100
  run_task caption caption train --input_file_pattern "$D/cap/train-*" --eval_file_pattern "$D/cap/validation-*" \
    --train_dir "$WORK/cap" --train_steps 50 --train_batch_size 16 --image_size 75 --train_inception \
    --log_every_n_steps 25 --dtype bf16
fi
section "done"
sleep 1  # lets tee write the last lines
