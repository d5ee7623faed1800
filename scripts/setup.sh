#!/usr/bin/env bash
# Installs Orchard's Debian dependencies (only the missing ones) and builds build/orchard.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail

ORCHARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${ORCHARD_BUILD_DIR:-$ORCHARD_ROOT/build}"

ORCHARD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libgloo-dev            # libtorch 1.13 (CPU) + c10d Gloo
  # libtorch's float matmuls (LSTM, Linear, some 1x1 convolutions) call libblas.so.3, which is
  # Debian's unoptimised reference BLAS unless an optimised one provides it: OpenBLAS built
  # with OpenMP (libtorch's own thread pool) does, 2.2x faster caption training steps here.
  libopenblas0-openmp
  libprotobuf-dev protobuf-compiler   # tf.train.Example, TensorBoard events
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev libsnappy-dev
  libopencv-imgproc-dev libopencv-core-dev
  libonnx-dev                         # the onnx.proto schema for ONNX export
  libopencv-dnn-dev                   # the tests load exported ONNX files with OpenCV's DNN module
  python3-opencv                      # runs OpenCV's tf_text_graph_ssd.py on exported SSD frozen graphs
  flatbuffers-compiler libflatbuffers-dev  # TFLite export: flatc compiles TensorFlow's schema.fbs
  python3-pyarmnn libarmnn-cpuref-backend22  # the tests run exported .tflite files in Arm NN
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libcurl4-openssl-dev                # object storage: HTTP (core/http, core/s3_client)
  libssl-dev                          # SigV4 signing; SHA-256 of the images data voc / pets write (image/key/sha256)
  libpugixml-dev                      # S3's XML answers; PASCAL VOC / Oxford-IIIT Pets annotation xmls
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist               # the demo's data
  python3-torchvision                 # the peer for benchmarks and reference tests
  nodejs                              # runs the independent TFRecord implementation in the tests
  # The fuzz targets (fuzz/, scripts/fuzz.sh, the fuzz_smoke test): clang with libFuzzer and the
  # sanitizer runtimes, which --no-install-recommends would leave out.
  clang libclang-rt-dev
  clang-format                        # scripts/check_format.sh (CTest test `format`)
)

orchard_install_packages() {
  local missing=()
  for p in "${ORCHARD_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # nodejs may come from another source (e.g. nodesource): accept any working node + npm.
  if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=("${missing[@]/nodejs/}")
  fi
  local wanted=()
  for p in "${missing[@]}"; do [ -n "$p" ] && wanted+=("$p"); done
  [ ${#wanted[@]} -eq 0 ] && return 0
  echo "orchard: installing Debian packages: ${wanted[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${wanted[@]}" npm 2>/dev/null \
    || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${wanted[@]}"
}

# orchard_build [TARGET...]: configures build/ once, then builds the targets (default: all).
orchard_build() {
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S "$ORCHARD_ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
}
