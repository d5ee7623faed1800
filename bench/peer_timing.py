"""The timing loop and JSON result rows of the PyTorch peers (peer_caption.py, peer_detect.py): the
same measurement as the Orchard side's time_loop (caption_bench.cc, detect_bench.cc)."""
import json
import time

budget_s = 15.0  # the peers' --budget_s, as the benches' g_budget_seconds


def time_loop(warmup, iters, body):
    """warmup untimed + iters timed calls of body(phases) (cut by budget_s after at least 3)."""
    for _ in range(warmup):
        body({})
    times, phases = [], {}
    cpu0 = time.process_time()
    timed_start = time.perf_counter()
    for i in range(iters):
        if i >= 3 and time.perf_counter() - timed_start >= budget_s:
            break
        phase = {}
        t0 = time.perf_counter()
        body(phase)
        times.append(time.perf_counter() - t0)
        for k, v in phase.items():
            phases.setdefault(k, []).append(v)
    return {"times": times, "phases": phases, "cpu": time.process_time() - cpu0, "check": {}}


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def emit(impl, bench, size, unit, units_per_iter, threads, warmup, r, **extra):
    """One JSON line: the medians the shell summaries read, every time, and `extra` fields."""
    med = median(r["times"])
    j = {
        "impl": impl, "bench": bench, "size": size, "unit": unit, "units": units_per_iter, "threads": threads,
        "warmup": warmup, "iters": len(r["times"]), "median_ms": 1e3 * med,
        "mean_ms": 1e3 * sum(r["times"]) / len(r["times"]), "min_ms": 1e3 * min(r["times"]),
        "cpu_ms": 1e3 * r["cpu"] / len(r["times"]), "per_s": units_per_iter / med,
        "phases_ms": {k: 1e3 * median(v) for k, v in sorted(r["phases"].items())},
        "times_ms": [round(1e3 * t, 2) for t in r["times"]], "check": r["check"],
    }
    j.update(extra)
    print(json.dumps(j, sort_keys=True), flush=True)
