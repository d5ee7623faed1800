// A small HTTP/1.1 client over Debian's libcurl for the object-store file
// systems: one pool of easy handles (each keeps its connections alive between
// requests), whole bodies in memory, and the transport's failure reported
// rather than thrown so that the caller can decide whether to retry. TLS peers
// are verified unless `verify_tls` is false.
#pragma once

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
