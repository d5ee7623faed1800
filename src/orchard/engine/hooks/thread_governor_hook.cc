#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>

#include <optional>

#include "orchard/core/cpu_contention.h"
#include "orchard/engine/clock.h"
#include "orchard/engine/hooks/hooks.h"

namespace orchard::engine {

struct ThreadGovernorHook::Impl {
  ThreadGovernor governor;
  double window_secs;
  Stopwatch window;
  std::optional<ThreadTimes> start;
  int logged = 0;  // the count the log last gave
  int changes = 0, lowest = 0;
};

ThreadGovernorHook::ThreadGovernorHook(int max_threads, double window_secs)
    : impl_(new Impl{ThreadGovernor(max_threads), window_secs, {}, {}, max_threads, 0, max_threads}) {}
ThreadGovernorHook::~ThreadGovernorHook() = default;

void ThreadGovernorHook::before_train(TrainState&) {
  auto& m = *impl_;
  m.start = compute_thread_times();
  if (!m.start) spdlog::debug("threads: no scheduler statistics here (/proc/self/task/*/schedstat); the count stays");
  m.window.reset();
}

void ThreadGovernorHook::after_step(TrainState&) {
  auto& m = *impl_;
  if (!m.start || m.window.seconds() < m.window_secs) return;
  const auto now = compute_thread_times();
  if (!now) return;
  const double waited = ThreadTimes::waited(*m.start, *now);
  const int before = m.governor.threads(), after = m.governor.observe(waited);
  if (after != before) {
    at::set_num_threads(after);
    ++m.changes;
    m.lowest = std::min(m.lowest, after);
    // Info when the count falls below the last one logged or is back at the maximum; the tries
    // of one thread more (and their undoing) at debug, so a lasting competitor logs once.
    const bool news = after < m.logged || (after == m.governor.max_threads() && m.logged != after);
    const auto level = news ? spdlog::level::info : spdlog::level::debug;
    if (after < before)
      spdlog::log(level,
                  "threads: {} intra-op (the compute threads waited {:.0f}% of the time for a CPU another "
                  "process held)",
                  after, 100 * waited);
    else spdlog::log(level, "threads: {} intra-op (trying one more: the CPU looks free)", after);
    if (news) m.logged = after;
  }
  // The next window starts after the reading (and after a change, with the new count).
  m.start = compute_thread_times();
  m.window.reset();
}

void ThreadGovernorHook::after_train(TrainState&) {
  auto& m = *impl_;
  if (m.changes > 0)
    spdlog::info("threads: {} changes of the intra-op count while another process held the CPU (lowest {}, now {})",
                 m.changes, m.lowest, m.governor.threads());
  if (m.governor.threads() != m.governor.max_threads()) at::set_num_threads(m.governor.max_threads());
}

}  // namespace orchard::engine
