#include "orchard/train/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <cstdlib>
#include <string>

#include "orchard/core/cpu_quota.h"
#include "orchard/core/error.h"
#include "orchard/core/thread_pool.h"

// The device-type autocast functions (set_autocast_dtype(kCUDA, ...)) came with libtorch
// 2.4; before them, per-device names (set_autocast_gpu_dtype, set_cpu_enabled).
#define ORCHARD_TORCH_AT_LEAST_2_4 (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace orchard::train {

ThreadCount configure_threads(int num_threads) {
  int n = 0;
  std::string reason;
  const bool user_set =
      num_threads > 0 || (std::getenv("OMP_NUM_THREADS") && std::atoi(std::getenv("OMP_NUM_THREADS")) > 0);
  if (num_threads > 0) {
    n = num_threads;
    reason = "--num_threads";
  } else if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && std::atoi(omp) > 0) {
    // The user's, or orchard launch's (like torchrun's) share of the cores for each process.
    n = std::atoi(omp);
    reason = std::string("OMP_NUM_THREADS=") + omp;
  } else {
    n = cpu_budget().threads;  // the affinity mask and the cgroup CPU quota
    reason = cpu_budget().reason;
  }
  at::set_num_threads(n);
  static bool logged = false;
  if (!logged) {
    logged = true;
    spdlog::info("threads: {} intra-op ({}{}); OpenMP waits: {}", n, reason,
                 user_set ? "" : "; fewer while another process holds the CPU", omp_wait_policy());
  }
  return {n, user_set};
}

std::string omp_wait_policy() {
  std::string set;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"})
    if (const char* v = std::getenv(name)) set += (set.empty() ? "" : " ") + std::string(name) + "=" + v;
  return set.empty() ? "libgomp's default (spin 300000 rounds, then sleep)" : set + " (the environment)";
}

void check_dtype(const std::string& dtype, bool cuda) {
  if (dtype == "fp32" || dtype == "float32" || dtype == "bf16" || dtype == "bfloat16") return;
  if (dtype == "fp16" || dtype == "float16") {
    if (!cuda) throw Error("--dtype fp16 needs a GPU (CPU autocast supports bf16 only); use --dtype bf16 or fp32");
    return;
  }
  throw Error("--dtype must be fp32, bf16 or fp16, not '" + dtype + "'");
}

AutocastGuard::AutocastGuard(const std::string& dtype, bool cuda) {
  if (dtype == "fp32" || dtype == "float32") return;
  const bool bf16 = dtype == "bf16" || dtype == "bfloat16";
#if ORCHARD_TORCH_AT_LEAST_2_4
  if (cuda) {
    at::autocast::set_autocast_dtype(at::kCUDA, bf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    cuda_ = true;
  } else {
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    cpu_ = true;
  }
#else
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(bf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::set_enabled(true);
    cuda_ = true;
  } else {
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
    cpu_ = true;
  }
#endif
}

AutocastGuard::~AutocastGuard() {
#if ORCHARD_TORCH_AT_LEAST_2_4
  if (cuda_) at::autocast::set_autocast_enabled(at::kCUDA, false);
  if (cpu_) at::autocast::set_autocast_enabled(at::kCPU, false);
#else
  if (cuda_) at::autocast::set_enabled(false);
  if (cpu_) at::autocast::set_cpu_enabled(false);
#endif
  if (cpu_ || cuda_) at::autocast::clear_cache();
}

}  // namespace orchard::train
