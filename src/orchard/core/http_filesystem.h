// The read-only http:// and https:// file system: public files such as the
// TensorFlow model zoo's checkpoints (http://download.tensorflow.org/...),
// read with plain GETs through core/http.h. Redirects are followed.
//
//   read_file   GET; a transfer that breaks mid-body resumes with
//               Range: bytes=<received>- (If-Range on the ETag or
//               Last-Modified), and starts over if the server answers 200
//   read_range  GET with Range: bytes=a-b. A server that ignores Range (200
//               with the whole body, e.g. Python's http.server) still gives
//               the right bytes: the slice of the body; the last such body is
//               kept (up to 256 MiB, one URL) so that a reader going through
//               the file block by block downloads it once, not once per
//               block (a prefetching reader's first blocks may each fetch it
//               before it is kept; a larger file from such a server is
//               fetched once per block: read it with read_file). 416 is the
//               end of the file.
//   stat        HEAD's Content-Length; when HEAD is refused or has no length,
//               GET bytes=0-0 (Content-Range's total). 404/410: no file.
//   list_prefix, glob with wildcards
//               a StorageError: HTTP has no listing
//   write_file, remove
//               a StorageError: "http(s):// is read-only"
//
// Retries as the S3 client's: 408, 429, 500, 502, 503, 504, refused/reset
// connections, timeouts and stalls, with exponential backoff and full jitter
// (RetryOptions). Other statuses fail at once with one line naming the URL,
// the operation and the HTTP status.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "orchard/core/filesystem.h"
#include "orchard/core/http.h"

namespace orchard::fs {

struct HttpOptions {
  http::RetryOptions retry;
  bool verify_tls = true;
  long stall_timeout_s = 30;
  // The largest whole body kept from a server that ignores Range.
  uint64_t range_fallback_cache_bytes = 256u << 20;
};

class HttpFileSystem : public FileSystem {
 public:
  explicit HttpFileSystem(HttpOptions options) : options_(std::move(options)) {}

  std::string read_file(const std::string& path) override;
  std::string read_range(const std::string& path, uint64_t offset, uint64_t n) override;
  void write_file(const std::string& path, const std::string& contents) override;
  std::optional<FileStat> stat(const std::string& path) override;
  std::vector<std::string> list_prefix(const std::string& prefix) override;
  void remove(const std::string& path) override;
  bool has_listing() const override { return false; }

  // Requests sent so far, retries included (tests).
  int64_t requests_sent() const { return requests_sent_; }

 private:
  struct Got;
  // GET bytes [offset, offset + n) (n = 0: to the end), with retries and resume.
  Got get(const std::string& url, const std::string& op, uint64_t offset, uint64_t n, bool ranged);
  http::Response perform(const std::string& op, http::Request request, const std::vector<long>& ok_statuses);

  HttpOptions options_;
  std::atomic<int64_t> requests_sent_{0};
  std::mutex cache_mu_;
  std::string cache_url_;  // the last whole body a Range-ignoring server sent
  std::shared_ptr<const std::string> cache_body_;
};

}  // namespace orchard::fs
