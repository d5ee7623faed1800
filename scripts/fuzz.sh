#!/usr/bin/env bash
# Builds Orchard's libFuzzer targets (fuzz/, issue 31) in a sanitized build directory of their
# own, writes the seed corpus with Orchard's writers, runs each target for a bounded time and
# prints executions, execs/s and findings per target. Exits non-zero when any target found a
# crash, sanitizer report, timeout or out-of-memory.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default 20 s, every target
#
# Environment:
#   ORCHARD_FUZZ_BUILD_DIR  build directory (default build-fuzz/ next to build/)
#   ORCHARD_FUZZ_RUNS       stop each target after this many executions too (-runs), e.g. 1000000
#   ORCHARD_FUZZ_TIMEOUT    seconds one input may take before it counts as a hang (default 10)
#   ORCHARD_JOBS            build parallelism (default: all cores)
# Corpora grow in $ORCHARD_FUZZ_BUILD_DIR/corpus/<target>/; findings go to .../findings/<target>/.
set -euo pipefail

ORCHARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ_DIR="${ORCHARD_FUZZ_BUILD_DIR:-$ORCHARD_ROOT/build-fuzz}"
SECONDS_PER_TARGET="${1:-20}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(tfrecord example image pipeline_config coco_json tf_checkpoint)

if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 2
fi
if [ ! -f "$FUZZ_DIR/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$ORCHARD_ROOT" -B "$FUZZ_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DORCHARD_FUZZ=ON -DORCHARD_BUILD_TESTS=OFF -DORCHARD_BUILD_BENCH=OFF >/dev/null
fi
# Only the fuzz targets (and the libraries they link), not the rest of the project.
build_start=$(date +%s)
cmake --build "$FUZZ_DIR" -j "${ORCHARD_JOBS:-$(nproc)}" --target orchard_fuzz
echo "fuzz.sh: build took $(( $(date +%s) - build_start )) s"

# Scratch files (every input is written to one) on tmpfs when there is one.
scratch=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/orchard-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
seeds="$scratch/seeds"
"$FUZZ_DIR/fuzz/make_seed_corpus" "$seeds" "$ORCHARD_ROOT"

symbolizer=$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2>/dev/null | head -1 || true)
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TMPDIR="$scratch"

failed=0
summary=()
for t in "${TARGETS[@]}"; do
  corpus="$FUZZ_DIR/corpus/$t"
  findings="$FUZZ_DIR/findings/$t"
  mkdir -p "$corpus" "$findings"
  before=$(find "$findings" -type f | wc -l)
  log="$FUZZ_DIR/findings/$t.log"
  args=(-max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=2048
        -timeout="${ORCHARD_FUZZ_TIMEOUT:-10}" -print_final_stats=1 -artifact_prefix="$findings/")
  [ -n "${ORCHARD_FUZZ_RUNS:-}" ] && args+=(-runs="$ORCHARD_FUZZ_RUNS")
  echo "fuzz.sh: $t (${SECONDS_PER_TARGET} s${ORCHARD_FUZZ_RUNS:+ or $ORCHARD_FUZZ_RUNS runs})"
  start=$(date +%s.%N)
  rc=0
  "$FUZZ_DIR/fuzz/${t}_fuzzer" "${args[@]}" "$corpus" "$seeds/$t" >"$log" 2>&1 || rc=$?
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ -z "$execs" ]; then  # a crash ends the run before the final stats: take the last status line
    execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    rate=$(grep -o 'exec/s: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  fi
  found=$(( $(find "$findings" -type f | wc -l) - before ))
  if [ "$rc" -ne 0 ] || [ "$found" -gt 0 ]; then
    failed=1
    echo "fuzz.sh: $t FOUND A PROBLEM (exit $rc); log: $log" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|ALARM|.*out-of-memory|Test unit written)' "$log" |
      head -20 >&2 || true
  fi
  summary+=("$(printf '%-16s %12s %10s %9.1f %9s' "$t" "${execs:-0}" "${rate:-0}" "$wall" "$found")")
done

printf '%-16s %12s %10s %9s %9s\n' target executions exec/s wall_s findings
printf '%s\n' "${summary[@]}"
exit "$failed"
