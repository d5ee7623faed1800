// A small HTTP/1.1 client over Debian's libcurl for the object-store file
// systems: one pool of easy handles (each keeps its connections alive between
// requests), whole bodies in memory, and the transport's failure reported
// rather than thrown so that the caller can decide whether to retry. TLS peers
// are verified unless `verify_tls` is false.
//
// Cancellation: requests a thread makes while a CancelScope is alive on it are
// abandoned soon (within about a second) after the scope's flag turns true; the
// Response then says transport_failed, not retryable, "cancelled". The
// prefetching readers (filesystem.h) use this so that a reader destroyed
// mid-file does not wait for its in-flight block downloads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace orchard::http {

struct Request {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  const std::string* body = nullptr;  // PUT/POST body; not copied
  bool verify_tls = true;
  bool follow_redirects = false;  // up to 10 (public download URLs redirect; S3 must not)
  long connect_timeout_s = 10;
  // A transfer slower than 1 byte/s for this long is abandoned (a stalled
  // server).
  long stall_timeout_s = 30;
};

struct Response {
  long status = 0;                             // 0 when the transport failed before a status line
  std::map<std::string, std::string> headers;  // names lowercased; repeats joined with ", "
  std::string body;                            // what arrived, also when the transport failed mid-body
  bool transport_failed = false;
  bool transport_retryable = false;  // connection refused/reset, timeouts, a truncated body
  std::string transport_error;       // curl's message
};

// When and how often the object-store clients retry (s3_client.h,
// http_filesystem.h): exponential backoff with full jitter, at most
// `max_attempts` tries and `max_retry_seconds` in all.
struct RetryOptions {
  int max_attempts = 8;
  double max_retry_seconds = 120;
  double initial_backoff_seconds = 0.1;
  double max_backoff_seconds = 10;
};
// The wait before retry number `attempt` (1-based): uniform in [0, min(max,
// initial * 2^(attempt-1))).
double backoff_seconds(const RetryOptions& retry, int attempt);

// Marks the requests this thread makes during the scope as cancellable by
// `*flag` (see the file's header). Scopes nest; the innermost wins.
class CancelScope {
 public:
  explicit CancelScope(const std::atomic<bool>* flag);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const std::atomic<bool>* previous_;
};
// Whether this thread's current CancelScope has been cancelled.
bool cancelled();
// Sleeps `seconds`, waking early (and returning false) when cancelled().
bool sleep_unless_cancelled(double seconds);

// Thread-safe; requests run on the calling thread. Handles return to the pool
// after each request, so consecutive requests to one host reuse the connection
// (keep-alive).
class Client {
 public:
  Client();
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Response perform(const Request& request);

 private:
  void* acquire();
  void release(void* handle);

  std::mutex mu_;
  std::vector<void*> idle_;
};

// The process's shared client (created on first use).
Client& shared_client();

}  // namespace orchard::http
