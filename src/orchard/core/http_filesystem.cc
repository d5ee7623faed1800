#include "orchard/core/http_filesystem.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace orchard::fs {
namespace {

bool retryable_status(long status) { return status == 408 || status == 429 || (status >= 500 && status != 501); }

std::string header(const http::Response& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

// "bytes A-B/T" -> A and T (T = -1 when "*"); false when it does not parse.
bool parse_content_range(const std::string& value, uint64_t* first, int64_t* total) {
  unsigned long long a = 0, b = 0, t = 0;
  if (std::sscanf(value.c_str(), "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
    *first = a;
    *total = static_cast<int64_t>(t);
    return true;
  }
  if (std::sscanf(value.c_str(), "bytes %llu-%llu/*", &a, &b) == 2) {
    *first = a;
    *total = -1;
    return true;
  }
  return false;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

struct HttpFileSystem::Got {
  long status = 0;
  std::string body;                          // the bytes asked for (fewer at the end of the file)
  std::shared_ptr<const std::string> whole;  // the whole file, when a server ignored Range
  http::Response last;                       // the last response's status and headers
};

HttpFileSystem::Got HttpFileSystem::get(const std::string& url, const std::string& op, uint64_t offset, uint64_t n,
                                        bool ranged) {
  Got out;
  std::string validator;  // of the first answer, so a resumed read continues the same file
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 1;; ++attempt) {
    http::Request req;
    req.url = url;
    req.follow_redirects = true;
    req.verify_tls = options_.verify_tls;
    req.stall_timeout_s = options_.stall_timeout_s;
    const uint64_t from = offset + out.body.size();
    const bool ask_range = ranged || !out.body.empty();
    if (ask_range) {
      req.headers.emplace_back("Range",
                               "bytes=" + std::to_string(from) + "-" + (n ? std::to_string(offset + n - 1) : ""));
      if (!out.body.empty() && !validator.empty()) req.headers.emplace_back("If-Range", validator);
    }
    http::Response resp = http::shared_client().perform(req);
    ++requests_sent_;
    if (resp.status == 416 && !resp.transport_failed) {  // at or past the end
      out.status = 416;
      out.last = std::move(resp);
      return out;
    }
    if ((resp.status == 200 || resp.status == 206) && validator.empty()) {
      validator = header(resp, "etag");
      if (validator.empty()) validator = header(resp, "last-modified");
      if (validator.rfind("W/", 0) == 0) validator.clear();  // If-Range needs a strong validator
    }
    if (resp.status == 206) {
      uint64_t first = 0;
      int64_t total = 0;
      if (parse_content_range(header(resp, "content-range"), &first, &total) && first != from)
        throw StorageError(url + ": " + op + ": asked for bytes from " + std::to_string(from) +
                               ", the server sent Content-Range " + header(resp, "content-range"),
                           206, "InvalidRange");
      out.body += resp.body;
    } else if (resp.status == 200) {
      // The whole file from byte 0: a server that ignores Range, or one whose
      // file changed since the first answer (If-Range).
      if (!resp.transport_failed && ask_range) out.whole = std::make_shared<const std::string>(resp.body);
      out.body = resp.body.size() > offset ? resp.body.substr(offset, n ? n : std::string::npos) : "";
    }
    if (n && out.body.size() > n) out.body.resize(n);
    if (!resp.transport_failed && (resp.status == 200 || resp.status == 206)) {
      out.status = resp.status;
      out.last = std::move(resp);
      return out;
    }

    std::string failure;
    bool retry;
    if (resp.transport_failed) {
      retry = resp.transport_retryable;
      failure = resp.transport_error + (resp.status ? " (after HTTP " + std::to_string(resp.status) + ")" : "");
    } else {
      retry = retryable_status(resp.status);
      failure = "HTTP " + std::to_string(resp.status);
    }
    const double elapsed = seconds_since(start);
    const double wait = http::backoff_seconds(options_.retry, attempt);
    if (retry && attempt < options_.retry.max_attempts && elapsed + wait <= options_.retry.max_retry_seconds) {
      spdlog::warn("{}: {} GET: {}; retry {} in {:.2f} s", url, op, failure, attempt, wait);
      if (http::sleep_unless_cancelled(wait)) continue;
      failure += "; cancelled";
    } else if (retry) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "; gave up after %d attempts in %.1f s", attempt, elapsed);
      failure += buf;
    }
    throw StorageError(url + ": " + op + " (GET) failed: " + failure, resp.status);
  }
}

http::Response HttpFileSystem::perform(const std::string& op, http::Request req, const std::vector<long>& ok_statuses) {
  req.follow_redirects = true;
  req.verify_tls = options_.verify_tls;
  req.stall_timeout_s = options_.stall_timeout_s;
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 1;; ++attempt) {
    http::Response resp = http::shared_client().perform(req);
    ++requests_sent_;
    if (!resp.transport_failed && ((resp.status >= 200 && resp.status < 300) ||
                                   std::find(ok_statuses.begin(), ok_statuses.end(), resp.status) != ok_statuses.end()))
      return resp;
    const bool retry = resp.transport_failed ? resp.transport_retryable : retryable_status(resp.status);
    std::string failure = resp.transport_failed ? resp.transport_error : "HTTP " + std::to_string(resp.status);
    const double elapsed = seconds_since(start);
    const double wait = http::backoff_seconds(options_.retry, attempt);
    if (retry && attempt < options_.retry.max_attempts && elapsed + wait <= options_.retry.max_retry_seconds) {
      spdlog::warn("{}: {} {}: {}; retry {} in {:.2f} s", req.url, op, req.method, failure, attempt, wait);
      if (http::sleep_unless_cancelled(wait)) continue;
      failure += "; cancelled";
    } else if (retry) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "; gave up after %d attempts in %.1f s", attempt, elapsed);
      failure += buf;
    }
    throw StorageError(req.url + ": " + op + " (" + req.method + ") failed: " + failure, resp.status);
  }
}

std::string HttpFileSystem::read_file(const std::string& path) { return get(path, "read", 0, 0, false).body; }

std::string HttpFileSystem::read_range(const std::string& path, uint64_t offset, uint64_t n) {
  if (n == 0) return "";
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_body_ && cache_url_ == path) return offset >= cache_body_->size() ? "" : cache_body_->substr(offset, n);
  }
  Got got = get(path, "read range", offset, n, true);
  if (got.whole && got.whole->size() <= options_.range_fallback_cache_bytes) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    cache_url_ = path;
    cache_body_ = got.whole;
  }
  return std::move(got.body);
}

std::optional<FileStat> HttpFileSystem::stat(const std::string& path) {
  http::Request head;
  head.method = "HEAD";
  head.url = path;
  // 403/405/501: some servers (presigned URLs, simple servers) refuse HEAD but answer GET.
  const http::Response r = perform("stat", head, {404, 410, 403, 405, 501});
  if (r.status == 404 || r.status == 410) return std::nullopt;
  const std::string length = header(r, "content-length");
  if (r.status >= 200 && r.status < 300 && !length.empty()) return FileStat{std::stoll(length)};
  // No usable HEAD: ask for the first byte; Content-Range carries the size.
  try {
    const Got got = get(path, "stat", 0, 1, true);
    if (got.status == 416) return FileStat{0};  // an empty file has no byte 0
    if (got.status == 206) {
      uint64_t first = 0;
      int64_t total = -1;
      if (parse_content_range(header(got.last, "content-range"), &first, &total) && total >= 0) return FileStat{total};
    }
    if (got.whole) return FileStat{static_cast<int64_t>(got.whole->size())};
    const std::string len = header(got.last, "content-length");
    if (got.status == 200 && !len.empty()) return FileStat{std::stoll(len)};
    throw StorageError(path + ": stat: the server gives no size (no Content-Length or Content-Range)", got.status);
  } catch (const StorageError& e) {
    if (e.http_status() == 404 || e.http_status() == 410) return std::nullopt;
    throw;
  }
}

std::vector<std::string> HttpFileSystem::list_prefix(const std::string& prefix) {
  throw StorageError(prefix + ": list: http(s):// has no listing, so no globs or prefixes; name each file");
}

void HttpFileSystem::write_file(const std::string& path, const std::string&) {
  throw StorageError(path + ": write: http(s):// is read-only");
}

void HttpFileSystem::remove(const std::string& path) { throw StorageError(path + ": remove: http(s):// is read-only"); }

}  // namespace orchard::fs
