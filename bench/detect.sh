#!/usr/bin/env bash
# Detection benchmarks, Orchard vs PyTorch-Python, side by side in one run (issue 6).
#
#   bench/detect.sh                                  # build-bench/, 1 and 2 threads, 3 repeats
#   REPEATS=1 THREADS=2 WHAT=model MODEL_BATCHES=24 bench/detect.sh   # the config's batch
#   WHAT=nms,postprocess,loss bench/detect.sh        # the fast ones only (~2 minutes)
#
# (a) builds detect_bench into $BUILD (default build-bench, Release), (b) writes the shared
# random inputs once (anchors, NMS boxes/scores, one image's [1917, 90] scores, a batch of
# model outputs and groundtruth) under $WORK/inputs, (c) for each of $REPEATS repeats and each
# thread count in $THREADS runs detect_bench, bench/peer_detect.py (/usr/bin/python3), and the peer again with Orchard's
# glibc malloc settings (pytorch_tuned, only for the allocation-heavy benches), alternating
# which side goes first, (d) prints the medians over repeats and the Orchard/PyTorch ratios,
# and checks that both sides kept the same boxes and computed the same losses.
# Raw JSON lines go to $WORK/results-<time>.jsonl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build-bench}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
WORK=${WORK:-${TMPDIR:-/tmp}/orchard-detect-bench}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-"1 2"}
WHAT=${WHAT:-nms,postprocess,loss,model,train,eval}
TUNED_WHAT=${TUNED_WHAT:-model,train}  # benches also run as pytorch_tuned ("" for none)
MODEL_BATCHES=${MODEL_BATCHES:-8}   # e.g. 8,24 (24: the config's batch; slow on the peer)
BATCH=${BATCH:-8}            # loss, train and eval batch
BUDGET=${BUDGET:-15}         # seconds per measurement (timed part; at least 3 iterations)
CONFIG=${CONFIG:-$ROOT/configs/ssd_mobilenet_v2_coco.config}
PY=/usr/bin/python3          # Debian's python3-torch + python3-torchvision, not pyenv's

if ! "$PY" -c 'import torchvision' 2>/dev/null; then
  echo "detect.sh: $PY lacks torchvision: sudo apt-get install -y python3-torchvision" >&2
  exit 1
fi

# (a) build
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCH=ON \
    -DORCHARD_BUILD_TESTS=OFF >/dev/null
elif ! grep -q '^ORCHARD_BUILD_BENCH:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  cmake -S "$ROOT" -B "$BUILD" -DORCHARD_BUILD_BENCH=ON >/dev/null
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")
[[ "$build_type" == Release ]] || echo "detect.sh: warning: $BUILD is a '$build_type' build, not Release" >&2
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" --target detect_bench -j 2 >/dev/null
BENCH="$BUILD/bench/detect_bench"

# (b) inputs, identical for both sides
INPUTS="$WORK/inputs"
mkdir -p "$INPUTS"
[[ -f "$INPUTS/meta.json" ]] || "$BENCH" --config "$CONFIG" --inputs "$INPUTS" --make_inputs --batch "$BATCH"

# (c) side by side
RESULTS="$WORK/results-$(date +%Y%m%d-%H%M%S).jsonl"
load_before=$(cut -d' ' -f1 /proc/loadavg)
common=(--inputs "$INPUTS" --batch "$BATCH" --model_batches "$MODEL_BATCHES" --budget_s "$BUDGET")
run_orchard() { "$BENCH" --config "$CONFIG" "${common[@]}" --threads "$1" --what "$WHAT" >>"$RESULTS"; }
run_pytorch() { "$PY" "$ROOT/bench/peer_detect.py" "${common[@]}" --threads "$1" --what "$WHAT" >>"$RESULTS"; }
run_tuned() {
  local what
  what=$("$PY" -c 'import sys; a, b = (s.split(",") for s in sys.argv[1:]); print(",".join(x for x in a if x in b))' \
    "$WHAT" "$TUNED_WHAT")
  [[ -n "$what" ]] || return 0
  env MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=67108864 \
    "$PY" "$ROOT/bench/peer_detect.py" "${common[@]}" --threads "$1" --what "$what" --impl pytorch_tuned >>"$RESULTS"
}
for ((r = 1; r <= REPEATS; ++r)); do
  for t in $THREADS; do
    echo "repeat $r/$REPEATS, $t thread(s)..." >&2
    if ((r % 2)); then run_orchard "$t"; run_pytorch "$t"; run_tuned "$t"; else run_tuned "$t"; run_pytorch "$t"; run_orchard "$t"; fi
  done
done
load_after=$(cut -d' ' -f1 /proc/loadavg)

# (d) medians and ratios
"$PY" - "$RESULTS" "$(nproc)" "$load_before" "$load_after" <<'EOF'
import json, statistics, sys
path, cores, lb, la = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.startswith("{")]
keys = []
for r in sorted(rows, key=lambda r: r["threads"]):
    k = (r["bench"], r["size"], r["threads"])
    if k not in keys:
        keys.append(k)

def pick(impl, k):
    return [r for r in rows if r["impl"] == impl and (r["bench"], r["size"], r["threads"]) == k]

def med(rs, f):
    return statistics.median(f(r) for r in rs) if rs else None

print(f"\nDetection, medians over {len(pick('orchard', keys[0]))} runs; {cores} cores, "
      f"load average {lb} before, {la} after.")
print("ms = median wall time of one call (nms, postprocess: one image), one batch (loss) or one step (model, train,")
print("eval); per_s = calls, batches or images per second; ratio = Orchard speed / PyTorch speed (>1: Orchard faster).\n")
hdr = (f"{'bench':<12} {'size':>5} {'T':>2} {'unit':>5} | {'orchard ms':>10} {'per_s':>8} | {'pytorch ms':>10} {'per_s':>8} "
       f"{'ratio':>7} | {'pt_tuned ms':>11} {'ratio':>7} | check")
print(hdr)
print("-" * len(hdr))
for k in keys:
    o, p, t = pick("orchard", k), pick("pytorch", k), pick("pytorch_tuned", k)
    om, pm, tm = (med(x, lambda r: r["median_ms"]) for x in (o, p, t))
    ops, pps = med(o, lambda r: r["per_s"]), med(p, lambda r: r["per_s"])
    unit = (o or p)[0]["unit"]
    ratio = f"{pm / om:6.2f}x" if om and pm else "      -"
    tr = f"{tm / om:6.2f}x" if om and tm else "      -"
    # Same boxes kept / same loss on both sides?
    chk = ""
    if o and p:
        oc, pc = o[-1]["check"], p[-1]["check"]
        same = []
        for f in sorted(set(oc) & set(pc)):
            a, b = oc[f], pc[f]
            if isinstance(a, float) or isinstance(b, float):
                same.append(f"{f} {'=' if abs(a - b) <= 1e-4 * max(1.0, abs(a)) else '!='}")
            else:
                same.append(f"{f} {'=' if a == b else '!='}")
        chk = ", ".join(s for s in same if not s.startswith("total_loss"))
    print(f"{k[0]:<12} {k[1]:>5} {k[2]:>2} {unit:>5} | {om or 0:>10.2f} {ops or 0:>8.2f} | {pm or 0:>10.2f} {pps or 0:>8.2f} "
          f"{ratio:>7} | {tm or 0:>11.2f} {tr:>7} | {chk}")

print("\nPhases (median ms of the per-run medians):")
for k in keys:
    for impl in ("orchard", "pytorch", "pytorch_tuned"):
        rs = pick(impl, k)
        if rs and rs[0]["phases_ms"]:
            names = rs[0]["phases_ms"].keys()
            print(f"  {k[0]:<6} {k[1]:>5} T={k[2]} {impl:<14} " +
                  "  ".join(f"{n} {statistics.median(r['phases_ms'][n] for r in rs):.1f}" for n in names))
print(f"\nraw results: {path}")
EOF
