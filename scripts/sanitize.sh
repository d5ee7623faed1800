#!/usr/bin/env bash
# Runs unit tests under sanitizers, each sanitizer in a clang build directory of its own
# (-DORCHARD_SANITIZE=...: only Orchard's code is instrumented; libtorch, protobuf, OpenCV and
# the other Debian libraries are not). `.ci/run` runs it through CTest (test `sanitize`, label
# `sanitize`; `ctest -LE 'fuzz|sanitize'` leaves it out of a developer's fast run).
#
#   scripts/sanitize.sh [address|thread]...     default: both
#
# What runs where, chosen by what a test has to compile (building is nearly all of the cost):
#   address  AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/):
#              orchard_core_tests           records, files, checkpoints, SigV4, thread pool, CPU quota
#              orchard_detect_config_tests  pipeline.config / label map parsing
#              orchard_coco_tests           COCO / VOC metrics, RLE masks
#              orchard_caption_metrics_tests BLEU, CIDEr-D
#              orchard_data_tests           tf.train.Example, image decoding, the input pipeline
#   thread   ThreadSanitizer (build-tsan/): orchard_tsan_tests (tests/CMakeLists.txt), which is
#              tests/core/thread_pool_test.cc   the thread pool
#              tests/data/pipeline_test.cc      the input pipeline: readers, parse workers, the
#                                               batch queue, cancellation, resume
# Cost, measured 2026-12-07 on an otherwise idle 2-core machine, empty build directories and
# ccache: address build 165 s, thread build 89 s, the test runs 30 s: about 5 minutes (the
# CTest test `sanitize`; `.ci/run` runs it beside the other tests). Found on its first run: a
# data race on the input pipeline's stop flag (read by the readers without the lock; now atomic).
# Left out (each would need the libtorch layers above data/ compiled a second time, 150+
# translation units, far over the budget): the models, tasks, train, engine, golden and CLI
# tests, so the data-parallel (c10d Gloo) runs too, which only the CLI tests exercise, in
# separate processes of the `orchard` binary. The fuzz targets (scripts/fuzz.sh, test
# fuzz_smoke) cover the data layer's parsers under ASan + UBSan. For a wider run by hand:
#   ORCHARD_SANITIZE_TARGETS="orchard_train_tests" scripts/sanitize.sh address
#
# Environment:
#   ORCHARD_SANITIZE_BUILD_DIR  parent of build-asan/ and build-tsan/ (default: the source root)
#   ORCHARD_SANITIZE_TARGETS    extra test executables to build and run in full (each sanitizer)
#   ORCHARD_JOBS                build parallelism (default: all cores)
set -euo pipefail

ORCHARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PARENT="${ORCHARD_SANITIZE_BUILD_DIR:-$ORCHARD_ROOT}"
KINDS=("$@")
[ ${#KINDS[@]} -eq 0 ] && KINDS=(address thread)

if ! command -v clang++ >/dev/null; then
  echo "sanitize.sh: clang++ not found (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 2
fi
symbolizer=$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2>/dev/null | head -1 || true)
if [ -n "$symbolizer" ]; then
  export ASAN_SYMBOLIZER_PATH="$symbolizer"
  export TSAN_OPTIONS="external_symbolizer_path=$symbolizer${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
fi
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$ORCHARD_ROOT/scripts/sanitize/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ORCHARD_ROOT/scripts/sanitize/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

failed=0
summary=()
for kind in "${KINDS[@]}"; do
  case "$kind" in
    address)
      dir="$PARENT/build-asan"
      runs=("orchard_core_tests" "orchard_detect_config_tests" "orchard_coco_tests" "orchard_caption_metrics_tests"
        "orchard_data_tests") ;;
    thread)
      dir="$PARENT/build-tsan"
      runs=("orchard_tsan_tests") ;;
    *) echo "sanitize.sh: unknown sanitizer '$kind' (address or thread)" >&2; exit 2 ;;
  esac
  for extra in ${ORCHARD_SANITIZE_TARGETS:-}; do runs+=("$extra"); done
  targets=()
  for r in "${runs[@]}"; do
    t="${r%% *}"
    [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t")
  done
  if [ ! -f "$dir/build.ninja" ]; then
    # -O1: a third of -O3's compile time, still fast enough to run; line tables for the reports.
    CC=clang CXX=clang++ cmake -S "$ORCHARD_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" -DORCHARD_SANITIZE="$kind" \
      -DORCHARD_BUILD_BENCH=OFF -DORCHARD_FUZZ_SMOKE=OFF -DORCHARD_SANITIZE_SMOKE=OFF >/dev/null
  fi
  build_start=$(date +%s)
  cmake --build "$dir" -j "${ORCHARD_JOBS:-$(nproc)}" --target "${targets[@]}"
  build_s=$(( $(date +%s) - build_start ))
  echo "sanitize.sh: $kind build took $build_s s"
  for r in "${runs[@]}"; do
    read -r -a argv <<<"$r"
    start=$(date +%s)
    rc=0
    bin=$(find "$dir/tests" -name "${argv[0]}" -type f -perm -u+x | head -1)
    (cd "$(dirname "$bin")" && "$bin" "${argv[@]:1}") || rc=$?
    summary+=("$(printf '%-8s %-70s %4s s  exit %s' "$kind" "$r" "$(( $(date +%s) - start ))" "$rc")")
    [ "$rc" -eq 0 ] || failed=1
  done
  summary+=("$(printf '%-8s %-70s %4s s' "$kind" "(build)" "$build_s")")
done
printf '%s\n' "${summary[@]}"
exit "$failed"
