#include "orchard/core/retry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

namespace orchard::retry {

double backoff_seconds(const Options& options, int attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double cap =
      std::min(options.max_backoff_seconds, options.initial_backoff_seconds * std::pow(2.0, attempt - 1));
  return std::uniform_real_distribution<double>(0.0, std::max(cap, 0.0))(rng);
}

bool retryable_status(long status) { return status == 408 || status == 429 || (status >= 500 && status != 501); }

double Backoff::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool Backoff::again(const std::string& what) {
  const double wait = backoff_seconds(options_, attempts_);
  if (attempts_ >= options_.max_attempts || elapsed_seconds() + wait > options_.max_retry_seconds) return false;
  spdlog::warn("{}; retry {} in {:.2f} s", what, attempts_, wait);
  std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  ++attempts_;
  return true;
}

std::string Backoff::gave_up() const {
  char buf[80];
  std::snprintf(buf, sizeof buf, "; gave up after %d attempts in %.1f s", attempts_, elapsed_seconds());
  return buf;
}

}  // namespace orchard::retry
