// The clocks the engine's hooks time with: a monotonic one for intervals, the wall clock for
// timestamps that go into stats files.
#pragma once

#include <chrono>

namespace orchard::engine {

inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  double seconds() const { return monotonic_seconds() - start_; }
  void reset() { start_ = monotonic_seconds(); }

 private:
  double start_ = monotonic_seconds();
};

}  // namespace orchard::engine
