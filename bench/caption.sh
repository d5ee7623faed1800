#!/usr/bin/env bash
# Captioning benchmarks, Orchard vs PyTorch-Python, side by side in one run (issue 7).
#
#   bench/caption.sh                                   # build-bench/, 1 and 2 threads, 3 repeats
#   THREADS=2 REPEATS=1 WHAT=beam,beam_per_image bench/caption.sh   # beam search only
#   FROZEN_SIZES=299 FINETUNE_SIZES=299 FINETUNE_BATCH=8 bench/caption.sh
#
# (a) builds caption_bench into $BUILD (default build-bench, Release), (b) has it write the
# shared inputs once under $WORK/inputs (the model's weights with torchvision / im2txt names,
# images per size, captions, beam-search embeddings; rewritten when the settings change),
# (c) for each of $REPEATS repeats, thread count in $THREADS and bench in $WHAT runs caption_bench,
# bench/peer_caption.py (/usr/bin/python3) and, for the training steps, the peer again with
# Orchard's glibc malloc settings (pytorch_tuned), alternating which side goes first, one
# process per side and bench, (d) prints the medians over repeats, the Orchard/PyTorch ratios
# and how much CPU other processes used during the runs (other%), and checks that both sides
# have the same parameter counts and losses (two steps of a dropout-free copy, 1e-3 relative)
# and found the same captions. Raw JSON lines go to $WORK/results-<time>.jsonl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build-bench}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
WORK=${WORK:-${TMPDIR:-/tmp}/orchard-caption-bench}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-"1 2"}
WHAT=${WHAT:-train_frozen,train_finetune,beam,beam_per_image}
TUNED_WHAT=${TUNED_WHAT:-train_frozen,train_finetune}  # also run as pytorch_tuned ("" for none)
BATCH=${BATCH:-16}                  # training batch (images and captions)
FROZEN_SIZES=${FROZEN_SIZES:-299,150}
FINETUNE_SIZES=${FINETUNE_SIZES:-150}
FINETUNE_BATCH=${FINETUNE_BATCH:-0} # 0: $BATCH
CAPTION_LENGTH=${CAPTION_LENGTH:-16} # ids per caption, <S> and </S> included
VOCAB=${VOCAB:-12000}
EMBEDDING=${EMBEDDING:-512}         # image and word embeddings
LSTM=${LSTM:-512}
BEAM_IMAGES=${BEAM_IMAGES:-32}
WARMUP=${WARMUP:-1}                 # untimed iterations per measurement
BUDGET=${BUDGET:-15}                # seconds per measurement (timed part; at least 3 iterations)
PY=/usr/bin/python3                 # Debian's python3-torch + python3-torchvision, not pyenv's

if ! "$PY" -c 'import torchvision' 2>/dev/null; then
  echo "caption.sh: $PY lacks torchvision: sudo apt-get install -y python3-torchvision" >&2
  exit 1
fi

BENCH="$BUILD/bench/caption_bench"
INPUTS="$WORK/inputs"
# (a) build
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DORCHARD_BUILD_BENCH=ON \
    -DORCHARD_BUILD_TESTS=OFF >/dev/null
elif ! grep -q '^ORCHARD_BUILD_BENCH:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  cmake -S "$ROOT" -B "$BUILD" -DORCHARD_BUILD_BENCH=ON >/dev/null
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")
[[ "$build_type" == Release ]] || echo "caption.sh: warning: $BUILD is a '$build_type' build, not Release" >&2
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" --target caption_bench -j 2 >/dev/null

# (b) inputs, identical for both sides (caption_bench skips this when they are up to date)
mkdir -p "$INPUTS"
"$BENCH" --inputs "$INPUTS" --make_inputs --batch "$BATCH" --sizes "$FROZEN_SIZES,$FINETUNE_SIZES" \
  --caption_length "$CAPTION_LENGTH" --vocab "$VOCAB" --embedding "$EMBEDDING" --lstm "$LSTM" \
  --beam_images "$BEAM_IMAGES"

# (c) side by side
RESULTS="$WORK/results-$(date +%Y%m%d-%H%M%S).jsonl"
load_before=$(cut -d' ' -f1 /proc/loadavg)
# On a shared 2-core VM a T = 2 run beside any other busy process measures the other process
# (OpenMP threads wait at every barrier for a descheduled peer). So every run is charged with
# what the rest of the machine used meanwhile: other_cpu_pct = (CPU time of all processes, from
# /proc/stat, minus the run's own, from /usr/bin/time) / (wall time x cores); 50 = one other
# busy thread on 2 cores.
stat_busy() {  # busy and total jiffies of all CPUs
  local c u n s i w q sq
  read -r c u n s i w q sq _ </proc/stat
  echo "$((u + n + s + q + sq)) $((u + n + s + i + w + q + sq))"
}
# measured NAME CMD...: runs one side's bench and appends its JSON lines to $RESULTS, each with
# "other_cpu_pct".
measured() {
  local name=$1 out b0 t0 b1 t1
  shift
  out=$(mktemp)
  read -r b0 t0 < <(stat_busy)
  /usr/bin/time -f "%U %S" -o "$out.time" "$@" >"$out"
  read -r b1 t1 < <(stat_busy)
  "$PY" - "$out" "$out.time" "$((b1 - b0))" "$((t1 - t0))" "$name" >>"$RESULTS" <<'ANNOTATE'
import json, sys
out, times, busy, total, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
own = sum(float(x) for x in open(times).read().split()[-2:]) * 100  # seconds -> jiffies
other = round(max(0.0, 100 * (busy - own) / max(total, 1)), 1)
for line in open(out):
    if line.startswith("{"):
        r = json.loads(line)
        r["other_cpu_pct"] = other
        print(json.dumps(r, sort_keys=True))
print(f"  {name}: other processes used {other}% of the CPUs meanwhile", file=sys.stderr)
ANNOTATE
  rm -f "$out" "$out.time"
}
common=(--inputs "$INPUTS" --frozen_sizes "$FROZEN_SIZES" --finetune_sizes "$FINETUNE_SIZES"
  --finetune_batch "$FINETUNE_BATCH" --warmup "$WARMUP" --budget_s "$BUDGET")
run_orchard() { measured "orchard $2 T=$1" "$BENCH" "${common[@]}" --threads "$1" --what "$2"; }
run_pytorch() { measured "pytorch $2 T=$1" "$PY" "$ROOT/bench/peer_caption.py" "${common[@]}" --threads "$1" --what "$2"; }
run_tuned() {
  [[ ",$TUNED_WHAT," == *",$2,"* ]] || return 0
  measured "pytorch_tuned $2 T=$1" env MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824 \
    MALLOC_TOP_PAD_=67108864 "$PY" "$ROOT/bench/peer_caption.py" "${common[@]}" --threads "$1" --what "$2" \
    --impl pytorch_tuned
}
IFS=, read -r -a benches <<<"$WHAT"
for ((r = 1; r <= REPEATS; ++r)); do
  for t in $THREADS; do
    for w in "${benches[@]}"; do
      echo "repeat $r/$REPEATS, $t thread(s), $w, load $(cut -d' ' -f1 /proc/loadavg)..." >&2
      if ((r % 2)); then run_orchard "$t" "$w"; run_pytorch "$t" "$w"; run_tuned "$t" "$w"
      else run_tuned "$t" "$w"; run_pytorch "$t" "$w"; run_orchard "$t" "$w"; fi
    done
  done
done
load_after=$(cut -d' ' -f1 /proc/loadavg)

# (d) medians and ratios
"$PY" - "$RESULTS" "$(nproc)" "$load_before" "$load_after" <<'SUMMARY'
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


def cell(x, width, digits):
    return f"{x:>{width}.{digits}f}" if x is not None else f"{'-':>{width}}"


def check(o, p):
    """Do the two sides agree? Losses within 1e-3 relative; the same best caption per image."""
    oc, pc = o["check"], p["check"]
    if "loss_step1" in oc:
        out = [f"params {oc['params']} {'=' if oc['params'] == pc['params'] else '!='} {pc['params']} "
               f"(trained {oc['trainable_params']} {'=' if oc['trainable_params'] == pc['trainable_params'] else '!='} "
               f"{pc['trainable_params']})"]
        for f in ("loss_step1", "loss_step2"):
            rel = abs(oc[f] - pc[f]) / max(1e-12, abs(pc[f]))
            out.append(f"{f} {oc[f]:.5f} {'=' if rel <= 1e-3 else '!='} {pc[f]:.5f} (rel {rel:.1e})")
        return "; ".join(out)
    differ = sum(a != b for a, b in zip(oc["words"], pc["words"]))
    dlp = max(abs(a - b) for a, b in zip(oc["logprobs"], pc["logprobs"]))
    return (f"captions {'same' if differ == 0 else f'DIFFER on {differ} images'} "
            f"({oc['complete']}/{len(oc['words'])} complete, mean length {oc['mean_length']:.2f}), "
            f"max |logprob diff| {dlp:.1e}")


print(f"\nCaptioning, medians over {len(pick('orchard', keys[0]))} runs; {cores} cores, load average {lb} before, "
      f"{la} after.")
print("ms = median wall time of one training step (a batch) or one beam search (all N images); per_s = images or")
print("captions per second; ratio = Orchard speed / PyTorch speed (> 1: Orchard faster); other% = the most CPU")
print("other processes used during one of the runs (50: one busy thread on 2 cores).\n")
hdr = (f"{'bench':<15} {'size':>4} {'T':>2} {'unit':>7} | {'orchard ms':>10} {'per_s':>7} | {'pytorch ms':>10} "
       f"{'per_s':>7} {'ratio':>6} | {'pt_tuned ms':>11} {'per_s':>7} {'ratio':>6} | {'other%':>6}")
print(hdr)
print("-" * len(hdr))
checks = []
for k in keys:
    o, p, t = pick("orchard", k), pick("pytorch", k), pick("pytorch_tuned", k)
    om, pm, tm = (med(x, lambda r: r["median_ms"]) for x in (o, p, t))
    ops, pps, tps = (med(x, lambda r: r["per_s"]) for x in (o, p, t))
    unit = (o or p)[0]["unit"]
    ratio = f"{pm / om:5.2f}x" if om and pm else "-"
    tr = f"{tm / om:5.2f}x" if om and tm else "-"
    other = max(r["other_cpu_pct"] for r in o + p + t)
    print(f"{k[0]:<15} {k[1]:>4} {k[2]:>2} {unit:>7} | {cell(om, 10, 1)} {cell(ops, 7, 2)} | {cell(pm, 10, 1)} "
          f"{cell(pps, 7, 2)} {ratio:>6} | {cell(tm, 11, 1)} {cell(tps, 7, 2)} {tr:>6} | {other:>6.1f}")
    if o and p:
        checks.append(f"  {k[0]:<15} {k[1]:>4} T={k[2]}: {check(o[-1], p[-1])}")

print("\nChecks (Orchard vs PyTorch; train: losses of a dropout-free copy before and after one step):")
print("\n".join(checks))
print("\nPhases (median ms of the per-run medians):")
for k in keys:
    for impl in ("orchard", "pytorch", "pytorch_tuned"):
        rs = pick(impl, k)
        if rs and rs[0]["phases_ms"]:
            names = rs[0]["phases_ms"].keys()
            print(f"  {k[0]:<15} {k[1]:>4} T={k[2]} {impl:<14} " +
                  "  ".join(f"{n} {statistics.median(r['phases_ms'][n] for r in rs):.1f}" for n in names))
print(f"\nraw results: {path}")
SUMMARY
