// Process-wide runtime settings: intra-op threads, device, autocast.
#pragma once

#include <string>

namespace c10 {
struct Device;
}

namespace orchard::train {

// Sets libtorch's intra-op threads: `num_threads` when > 0, else OMP_NUM_THREADS when set (the
// user's, or orchard launch's share per process), else cpu_budget() (the affinity mask and the
// cgroup CPU quota). Logs the number and where it came from once ("threads: 1 intra-op (the cgroup
// CPU quota, ...)"). Returns the number set, and whether the user set it (--num_threads,
// OMP_NUM_THREADS) rather than Orchard (the CPU budget).
struct ThreadCount {
  int count = 1;
  bool user_set = false;
};
ThreadCount configure_threads(int num_threads);

// How OpenMP threads wait, for the start-up log: "OMP_WAIT_POLICY=PASSIVE (the environment)", or
// libgomp's default (spin, then sleep). Orchard leaves the policy to libgomp: with the thread
// count following the CPU a run gets (engine ThreadGovernorHook), a bounded spin gained nothing
// beside a competitor and cost 4-7% alone (bench/README.md "Shared CPUs").
std::string omp_wait_policy();

// Scoped mixed-precision autocast for dtype "fp32" (no-op), "bf16" or "fp16".
class AutocastGuard {
 public:
  AutocastGuard(const std::string& dtype, bool cuda);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool cpu_ = false, cuda_ = false;
};

// Validates --dtype for the device; throws Error with the supported choices.
void check_dtype(const std::string& dtype, bool cuda);

}  // namespace orchard::train
