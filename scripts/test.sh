#!/usr/bin/env bash
# Installs what is missing, builds everything, runs the whole test suite (CTest).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
orchard_install_packages
orchard_build
# The independent TFRecord implementation (npm @roboflow/tfrecords) used by the compatibility test.
if command -v npm >/dev/null && [ -f "$ORCHARD_ROOT/tests/npm/package.json" ]; then
  # Again whenever package-lock.json changed since the last install (npm keeps its copy of
  # the lock in node_modules/.package-lock.json).
  (cd "$ORCHARD_ROOT/tests/npm" && { [ node_modules/.package-lock.json -nt package-lock.json ] ||
    npm ci --no-audit --no-fund --loglevel=error; })
fi
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" "$@"
