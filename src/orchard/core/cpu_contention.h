// Whether other processes are taking the CPU from this one, and how many compute threads to run
// then (issue 57). A parallel region ends when its slowest thread does: with one more runnable
// thread than cores, some thread of every region waits for a core a competitor holds, and the
// whole step waits with it (2 threads beside one busy loop on 2 cores ran at 0.3 of their speed
// alone; 1 thread ran at 0.58: bench/README.md "Shared CPUs"). The kernel counts, per thread, the
// time it was runnable but waited for a CPU (/proc/<pid>/task/<tid>/schedstat's run_delay); the
// share of the compute threads' time spent so says how many cores they really get.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace orchard {

struct ThreadTimes {
  int64_t run_ns = 0;   // on a CPU
  int64_t wait_ns = 0;  // runnable, waiting for a CPU (the kernel's run_delay)
  // The share of the runnable time spent waiting, between two readings: 0 alone, 1/3 for two
  // threads beside one busy loop on two cores.
  static double waited(const ThreadTimes& before, const ThreadTimes& after);
};

// The sum over the threads in `task_dir` (/proc/self/task) that run at the process's own nice
// value: the compute threads (the main thread and OpenMP's); the input pipeline's, started at a
// higher nice value so that they yield to compute, are left out. nullopt where the kernel keeps
// no scheduler statistics (no schedstat files).
std::optional<ThreadTimes> compute_thread_times(const std::string& task_dir = "/proc/self/task");

// The number of compute threads, window by window. Given the share of time the threads waited
// for a CPU, it keeps round(n x (1 - waited)) threads when that is fewer (the cores they really
// got); after `kFirstProbe` calm windows below its maximum it tries one thread more, and keeps it
// if the next window's wait does not take it back (a competitor left); a failed try doubles the
// calm windows before the next (up to kMaxProbe), so a lasting competitor costs a slow window
// only rarely.
class ThreadGovernor {
 public:
  static constexpr int kFirstProbe = 8, kMaxProbe = 64;
  explicit ThreadGovernor(int max_threads);
  int threads() const { return n_; }
  int max_threads() const { return max_; }
  // One window's measure; returns the number of threads for the next window.
  int observe(double waited);

 private:
  int max_, n_;
  int calm_ = 0, probe_after_ = kFirstProbe;
  bool probing_ = false;
};

}  // namespace orchard
