// Bounded retries with exponential backoff and full jitter, for the object-store clients: an
// operation is tried at most `max_attempts` times and for at most `max_retry_seconds` in all,
// waiting a uniform random time in [0, min(max_backoff, initial * 2^(attempt-1))] between tries
// (AWS's "full jitter", which Google's client libraries also use in their truncated form).
#pragma once

#include <chrono>
#include <string>

namespace orchard::retry {

struct Options {
  int max_attempts = 8;
  double max_retry_seconds = 120;
  double initial_backoff_seconds = 0.1;
  double max_backoff_seconds = 10;
};

// The jittered wait before try `attempt` + 1 (attempt counts from 1).
double backoff_seconds(const Options& options, int attempt);

// HTTP statuses worth another try: 408, 429 and 5xx except 501.
bool retryable_status(long status);

// One operation's retry budget. After each failed try, `again` says whether another fits in the
// budget and, when it does, logs `what` and sleeps the backoff first.
class Backoff {
 public:
  explicit Backoff(const Options& options) : options_(options), start_(std::chrono::steady_clock::now()) {}
  bool again(const std::string& what);
  int attempts() const { return attempts_; }
  double elapsed_seconds() const;
  // "; gave up after 3 attempts in 1.2 s"
  std::string gave_up() const;

 private:
  Options options_;
  std::chrono::steady_clock::time_point start_;
  int attempts_ = 1;  // the try in flight
};

}  // namespace orchard::retry
