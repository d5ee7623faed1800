#!/usr/bin/env bash
# `orchard classify predict` vs PyTorch-Python eager, ResNet-50 on CPU, side by side in one run
# (issue 8): cold start, warm single-image latency and batch-32 throughput, as users run them.
#
#   bench/predict.sh                          # build/, 1 and 2 threads, 3 repeats
#   THREADS=1 REPEATS=5 bench/predict.sh
#
# (a) builds `orchard` in $BUILD (default build, Release); (b) under $WORK (kept between runs)
# saves a torchvision resnet50 state dict (random weights, seed 0), imports it with
# `orchard import-weights` (so both sides hold the same weights) and makes 64 ImageNet-like
# JPEGs (bench/make_photos.py, 500x375, ~80 KB); (c) for each repeat and thread count runs,
# alternating which side goes first, three commands per side:
#   cold   1 image                   -> wall time from process start to exit (start-up, model
#                                       load, one image: what a one-off `predict` costs)
#   seq   17 images, --batch_size 1  -> warm single-image latency: the median of batches 2-17
#   b64   64 images, --batch_size 32 -> batch-32 throughput: 32 / the second batch's time
# where a batch's time runs from reading its files to printing its results (decode, resize,
# crop, normalise, forward, softmax, top-5), as each side reports it ("predict batch: ..." on
# stderr; `orchard -v` logs it). The peer is bench/peer_predict.py (PIL + torchvision
# transforms + inference_mode); it runs twice, as is and with Orchard's glibc malloc settings
# (pytorch_tuned, as in train.sh: glibc otherwise returns and re-faults the large activations
# on every batch). (d) prints the medians over repeats and the ratios (> 1: Orchard faster), and
# checks that both sides found the same top-1 class (their resize kernels differ slightly).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
WORK=${WORK:-${TMPDIR:-/tmp}/orchard-predict-bench}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-"1 2"}
PY=/usr/bin/python3  # Debian's python3-torch + python3-torchvision

if ! "$PY" -c 'import torchvision' 2>/dev/null; then
  echo "predict.sh: $PY lacks torchvision: apt-get install -y python3-torchvision" >&2
  exit 1
fi

# (a) build
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")
[[ "$build_type" == Release ]] || echo "predict.sh: warning: $BUILD is a '$build_type' build, not Release" >&2
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" --target orchard -j 2 >/dev/null
ORCHARD="$BUILD/orchard"

# (b) inputs
mkdir -p "$WORK"
if [[ ! -f "$WORK/model/config.json" ]]; then
  "$PY" -c 'import sys, torch, torchvision
torch.manual_seed(0)
torch.save(torchvision.models.resnet50().state_dict(), sys.argv[1])' "$WORK/resnet50.pt"
  "$ORCHARD" import-weights --arch resnet50 --state_dict "$WORK/resnet50.pt" --out_dir "$WORK/model" 2>/dev/null
fi
if [[ ! -d "$WORK/photos" ]]; then
  "$PY" "$ROOT/bench/make_photos.py" --out_dir "$WORK/photos" --count 64 >/dev/null
fi

# (c) + (d)
"$PY" - "$ORCHARD" "$ROOT/bench/peer_predict.py" "$WORK" "$REPEATS" "$THREADS" <<'DRIVER'
import glob, json, os, re, statistics, subprocess, sys, time
orchard, peer, work, repeats, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
photos = sorted(glob.glob(os.path.join(work, "photos", "*", "*.jpg")))[:64]
assert len(photos) == 64, f"expected 64 photos under {work}/photos"
cases = {"cold": (photos[:1], 1), "seq": (photos[:17], 1), "b64": (photos, 32)}
TUNED = {"MALLOC_MMAP_THRESHOLD_": "268435456", "MALLOC_TRIM_THRESHOLD_": "1073741824", "MALLOC_TOP_PAD_": "67108864"}
SIDES = ["orchard", "pytorch", "pytorch_tuned"]
BATCH_LINE = re.compile(r"predict batch: (\d+) images in ([0-9.]+) ms")


def command(side, t, files, batch):
    if side == "orchard":
        return [orchard, "-v", "classify", "predict", "--model_dir", os.path.join(work, "model"), "--json",
                "--num_threads", str(t), "--batch_size", str(batch)] + files
    return ["/usr/bin/python3", peer, "--state_dict", os.path.join(work, "resnet50.pt"), "--threads", str(t),
            "--batch_size", str(batch)] + files


def run(side, t, case):
    """Wall seconds, the batches' ms, top-1 class per file."""
    files, batch = cases[case]
    env = dict(os.environ, OMP_NUM_THREADS=str(t), **(TUNED if side == "pytorch_tuned" else {}))
    start = time.perf_counter()
    p = subprocess.run(command(side, t, files, batch), env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    top1 = {os.path.basename(r["file"]): r["predictions"][0]["class_id"] for r in map(json.loads, p.stdout.splitlines())}
    assert len(top1) == len(files), f"{side} printed {len(top1)} of {len(files)} images"
    batches = [float(m.group(2)) for m in BATCH_LINE.finditer(p.stderr)]
    assert len(batches) == -(-len(files) // batch), f"{side}: no per-batch times on stderr"
    return wall, batches, top1


results = {}  # (side, t, measure) -> [values]
agree = []
for r in range(repeats):
    for t in threads:
        got = {}
        for side in SIDES if r % 2 == 0 else SIDES[::-1]:
            wall, _, got[side] = run(side, t, "cold")
            _, seq, _ = run(side, t, "seq")
            _, b64, top1 = run(side, t, "b64")
            got[side].update(top1)
            values = {"cold, 1 image (s)": wall, "warm latency (ms/image)": statistics.median(seq[1:]),
                      "batch-32 (img/s)": 32e3 / b64[1]}
            for k, v in values.items():
                results.setdefault((side, t, k), []).append(v)
            print(f"repeat {r + 1}/{repeats} T={t} {side}: " + ", ".join(f"{k} {v:.3f}" for k, v in values.items()),
                  file=sys.stderr)
        agree += [got["orchard"][f] == got["pytorch"][f] for f in got["orchard"]]

measures = ["cold, 1 image (s)", "warm latency (ms/image)", "batch-32 (img/s)"]
med = {k: statistics.median(v) for k, v in results.items()}
rows = []
print("\nResNet-50 @224 predict (medians of %d repeats); ratio = PyTorch time / Orchard time" % repeats)
print(f"{'T':>2} {'measure':<26} {'orchard':>9} {'pytorch':>9} {'ratio':>6} {'pt_tuned':>9} {'ratio':>6}")
for t in threads:
    for k in measures:
        o, p, q = (med[(s, t, k)] for s in SIDES)
        ratio = lambda peer: o / peer if "img/s" in k else peer / o
        print(f"{t:>2} {k:<26} {o:>9.3f} {p:>9.3f} {ratio(p):>6.2f} {q:>9.3f} {ratio(q):>6.2f}")
        rows.append({"threads": int(t), "measure": k, "orchard": o, "pytorch": p, "ratio": ratio(p),
                     "pytorch_tuned": q, "ratio_tuned": ratio(q)})
print(f"top-1 agreement between Orchard and PyTorch: {sum(agree)}/{len(agree)} images")
path = os.path.join(work, "results-%s.jsonl" % time.strftime("%Y%m%d-%H%M%S"))
with open(path, "w") as f:
    for row in rows:
        f.write(json.dumps(row) + "\n")
    f.write(json.dumps({"raw": {"|".join(k): v for k, v in results.items()}}) + "\n")
print("raw:", path)
DRIVER
