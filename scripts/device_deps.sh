#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the Debian packages Orchard builds
# against into .devdeps/, for a machine that cannot install them: the GPU machine of
# bench/gpu.sh has CUDA, PyTorch, CMake and ninja but no network and none of these.
# bench/gpu.sh unpacks them into a prefix there (dpkg -x), never into /.
#
#   scripts/device_deps.sh        # then: device run with carry [".devdeps"], bench/gpu.sh
#
# Only what the `orchard` binary needs (no tests, no benchmarks): the dev packages, their
# shared libraries, and the libraries OpenCV's core loads (BLAS, LAPACK, TBB, GLX and X11,
# which a minimal image lacks). The C and C++ runtimes are the machine's own (Debian 12's
# glibc 2.36 and GCC 12 libraries need nothing newer than the image's).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST="$ROOT/.devdeps"
PACKAGES=(
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev
  libonnx-dev libonnx1 libonnxifi
  libpugixml-dev libpugixml1v5 libssl-dev libssl3
  libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16 zlib1g-dev zlib1g
  libopencv-core-dev libopencv-core406 libopencv-imgproc-dev libopencv-imgproc406
  libtbb-dev libtbb12 libtbbmalloc2 libblas3 liblapack3 libgfortran5 libquadmath0 libgomp1
  libglx0 libglvnd0 libx11-6 libx11-data libxcb1 libxau6 libxdmcp6 libbsd0 libmd0 libxext6
)
mkdir -p "$DEST"
exclude="$ROOT/.git/info/exclude"
if [ -d "$ROOT/.git" ] && ! grep -qx '/.devdeps/' "$exclude" 2>/dev/null; then
  mkdir -p "$(dirname "$exclude")"
  echo '/.devdeps/' >>"$exclude"
fi
apt-get update -q >/dev/null || true
(cd "$DEST" && apt-get download -q "${PACKAGES[@]}")
echo "device_deps: $(ls "$DEST"/*.deb | wc -l) packages, $(du -sh "$DEST" | cut -f1) in $DEST"
