#!/usr/bin/env bash
# `orchard classify predict` vs PyTorch-Python eager, ResNet-50 on CPU, side by side in one run
# (issue 8): single-image latency and batch-32 throughput, both as whole processes, as users run
# them.
#
#   bench/predict.sh                          # build/, 1 and 2 threads, 3 repeats
#   THREADS=1 REPEATS=5 bench/predict.sh
#
# (a) builds `orchard` in $BUILD (default build, Release); (b) under $WORK (kept between runs)
# saves a torchvision resnet50 state dict (random weights, seed 0), imports it with
# `orchard import-weights` (so both sides hold the same weights) and makes 64 ImageNet-like
# JPEGs (bench/make_photos.py, 500x375, ~80 KB); (c) for each repeat and thread count runs,
# alternating which side goes first, four commands per side and times each from process start
# to exit:
#   cold   1 image                  -> cold latency (start-up, model load, one image)
#   seq    9 images, --batch_size 1 -> warm single-image latency = (seq - cold) / 8
#   b32   32 images, --batch_size 32
#   b64   64 images, --batch_size 32 -> batch-32 throughput = 32 / (b64 - b32)
# The peer runs twice: as is, and with Orchard's glibc malloc settings (pytorch_tuned, as in
# train.sh: glibc otherwise returns and re-faults the large activations on every batch).
# (d) prints the medians over repeats and the ratios (PyTorch time / Orchard time: > 1 means
# Orchard is faster), and checks that both sides found the same top-1 class for most images
# (their resize kernels differ slightly; weights are random, so logits are close together).
# The peer is bench/peer_predict.py (PIL + torchvision transforms + inference_mode).
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
import glob, json, os, statistics, subprocess, sys, time
orchard, peer, work, repeats, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
photos = sorted(glob.glob(os.path.join(work, "photos", "*", "*.jpg")))[:64]
assert len(photos) == 64, f"expected 64 photos under {work}/photos"
cases = {"cold": (photos[:1], 1), "seq": (photos[:9], 1), "b32": (photos[:32], 32), "b64": (photos, 32)}


TUNED = {"MALLOC_MMAP_THRESHOLD_": "268435456", "MALLOC_TRIM_THRESHOLD_": "1073741824", "MALLOC_TOP_PAD_": "67108864"}
SIDES = ["orchard", "pytorch", "pytorch_tuned"]


def command(side, t, files, batch):
    if side == "orchard":
        return [orchard, "classify", "predict", "--model_dir", os.path.join(work, "model"), "--json",
                "--num_threads", str(t), "--batch_size", str(batch)] + files
    return ["/usr/bin/python3", peer, "--state_dict", os.path.join(work, "resnet50.pt"), "--threads", str(t),
            "--batch_size", str(batch)] + files


def timed(side, t, case):
    files, batch = cases[case]
    env = dict(os.environ, OMP_NUM_THREADS=str(t), **(TUNED if side == "pytorch_tuned" else {}))
    start = time.perf_counter()
    out = subprocess.run(command(side, t, files, batch), env=env, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    top1 = {}
    for line in out.splitlines():
        r = json.loads(line)
        top1[os.path.basename(r["file"])] = r["predictions"][0]["class_id"]
    assert len(top1) == len(files), f"{side} printed {len(top1)} of {len(files)} images"
    return wall, top1


walls = {}  # (side, t, case) -> [seconds]
agree = []
for r in range(repeats):
    for t in threads:
        for case in cases:
            got = {}
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                wall, got[side] = timed(side, t, case)
                walls.setdefault((side, t, case), []).append(wall)
            agree += [got["orchard"][f] == got["pytorch"][f] for f in got["orchard"]]
            print(f"repeat {r + 1}/{repeats} T={t} {case}: " +
                  ", ".join(f"{s} {walls[(s, t, case)][-1]:.2f}s" for s in SIDES), file=sys.stderr)

med = {k: statistics.median(v) for k, v in walls.items()}
rows = []
print("\nResNet-50 @224 predict, whole processes (medians of %d); ratio = PyTorch time / Orchard time" % repeats)
print(f"{'T':>2} {'measure':<30} {'orchard':>9} {'pytorch':>9} {'ratio':>6} {'pt_tuned':>9} {'ratio':>6}")
for t in threads:
    def derived(side):
        m = lambda c: med[(side, t, c)]
        return {"cold, 1 image (s)": m("cold"),
                "warm latency (ms/image)": 1e3 * (m("seq") - m("cold")) / 8,
                "batch-32 (img/s)": 32 / (m("b64") - m("b32"))}
    o, p, q = derived("orchard"), derived("pytorch"), derived("pytorch_tuned")
    for k in o:
        ratio = lambda peer: o[k] / peer[k] if "img/s" in k else peer[k] / o[k]
        print(f"{t:>2} {k:<30} {o[k]:>9.3f} {p[k]:>9.3f} {ratio(p):>6.2f} {q[k]:>9.3f} {ratio(q):>6.2f}")
        rows.append({"threads": int(t), "measure": k, "orchard": o[k], "pytorch": p[k], "ratio": ratio(p),
                     "pytorch_tuned": q[k], "ratio_tuned": ratio(q)})
print(f"top-1 agreement between the two: {sum(agree)}/{len(agree)}")
path = os.path.join(work, "results-%s.jsonl" % time.strftime("%Y%m%d-%H%M%S"))
with open(path, "w") as f:
    for row in rows:
        f.write(json.dumps(row) + "\n")
    f.write(json.dumps({"raw_seconds": {"|".join(k): v for k, v in walls.items()}}) + "\n")
print("raw:", path)
DRIVER
