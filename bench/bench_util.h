// Timing and small helpers shared by the C++ sides of the benchmarks.
#pragma once

#include <malloc.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace orchard::bench {

inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double cpu_now() {  // CPU time of all threads of this process
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The glibc settings `orchard` applies to itself at start-up (src/orchard/cli/main.cc), so that
// a bench binary measures what `orchard` runs. Environment settings take precedence.
inline void keep_freed_memory() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The timing fields of a bench's JSON line: iterations, median / mean / min wall ms, CPU ms and
// units per second per iteration, the median ms of each phase, and every iteration's ms.
inline nlohmann::json timing_json(const std::vector<double>& times, double cpu_seconds,
                                  const std::map<std::string, std::vector<double>>& phases, double units_per_iter) {
  const double med = median(times);
  double sum = 0;
  for (double t : times) sum += t;
  std::vector<double> times_ms;
  for (double t : times) times_ms.push_back(std::round(1e5 * t) / 100);  // 0.01 ms
  nlohmann::json phase_ms = nlohmann::json::object();
  for (const auto& [k, v] : phases) phase_ms[k] = 1e3 * median(v);
  const auto n = static_cast<double>(times.size());
  return {{"iters", static_cast<int64_t>(times.size())},
          {"median_ms", 1e3 * med},
          {"mean_ms", 1e3 * sum / n},
          {"min_ms", 1e3 * *std::min_element(times.begin(), times.end())},
          {"cpu_ms", 1e3 * cpu_seconds / n},
          {"per_s", units_per_iter / med},
          {"phases_ms", phase_ms},
          {"times_ms", times_ms}};
}

// One measurement: seconds per timed iteration, per phase, CPU seconds of the timed part, and the
// bench's check values (what the peer must agree on).
struct TimedResult {
  std::vector<double> times;
  std::map<std::string, std::vector<double>> phases;
  double cpu_seconds = 0;
  nlohmann::json check = nlohmann::json::object();
};

// Seconds the timed part of a measurement may take (--budget_s): the timed loop stops after this
// (at least 3 iterations), so that a slow side still finishes. The warm-up always runs in full:
// the first model steps of a process are several times slower (allocator and oneDNN warm-up).
inline double g_budget_seconds = 15;

// Runs `body` warmup times untimed, then iters times timed (cut by g_budget_seconds). `body`
// records its phases into `phase` (name -> seconds) when it has any. The peers'
// bench/peer_timing.py time_loop measures the same way.
inline TimedResult time_loop(int64_t warmup, int64_t iters,
                             const std::function<void(std::map<std::string, double>*)>& body) {
  TimedResult r;
  std::map<std::string, double> phase;
  for (int64_t i = 0; i < warmup; ++i) body(&phase);
  const double cpu0 = cpu_now(), timed_start = wall_now();
  for (int64_t i = 0; i < iters && (i < 3 || wall_now() - timed_start < g_budget_seconds); ++i) {
    phase.clear();
    const double t0 = wall_now();
    body(&phase);
    r.times.push_back(wall_now() - t0);
    for (const auto& [k, v] : phase) r.phases[k].push_back(v);
  }
  r.cpu_seconds = cpu_now() - cpu0;
  return r;
}

// Prints the result line of one measurement ("impl": "orchard"), with `extra` fields.
inline void emit(const std::string& bench, int64_t size, const std::string& unit, double units_per_iter, int threads,
                 int64_t warmup, const TimedResult& r, const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = {{"impl", "orchard"},       {"bench", bench},     {"size", size},     {"unit", unit},
                      {"units", units_per_iter}, {"threads", threads}, {"warmup", warmup}, {"check", r.check}};
  j.update(timing_json(r.times, r.cpu_seconds, r.phases, units_per_iter));
  for (const auto& [k, v] : extra.items()) j[k] = v;
  std::cout << j.dump() << std::endl;
}

}  // namespace orchard::bench
