// An S3 client with no SDK: Signature V4 (s3_sigv4.h), HTTP through libcurl
// (http.h), XML responses parsed with pugixml. Works with AWS and S3-compatible
// stores (MinIO, Ceph, s3rver).
//
// Configuration, as the AWS CLI/SDKs and TensorFlow's S3 file system read it:
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
//   AWS_SESSION_TOKEN), else the
//                profile AWS_PROFILE (default "default") in ~/.aws/credentials
//                (AWS_SHARED_CREDENTIALS_FILE), else in ~/.aws/config
//                (AWS_CONFIG_FILE, section
//                "[profile NAME]" or "[default]"); none found: unsigned
//                (anonymous) requests
//   region       AWS_REGION, else AWS_DEFAULT_REGION, else the profile's
//   region, else us-east-1 endpoint     AWS_ENDPOINT_URL_S3, else
//   AWS_ENDPOINT_URL (a URL), else TensorFlow's
//                S3_ENDPOINT (host[:port], or a URL) with S3_USE_HTTPS (default
//                1) and S3_VERIFY_SSL (default 1); else
//                https://s3.<region>.amazonaws.com
//   addressing   path-style (endpoint/bucket/key) for a custom endpoint;
//   virtual-hosted
//                (bucket.s3.<region>.amazonaws.com/key) for AWS, except bucket
//                names with dots
//
// Retries: 429, 500, 502, 503, 504, S3's 400 RequestTimeout, refused/reset
// connections, timeouts and stalls are retried with exponential backoff and
// full jitter, at most `max_attempts` tries and `max_retry_seconds` in all. A
// GET that breaks mid-body resumes with a range request from the last byte
// received. A multipart upload sends `upload_concurrency` parts at once, each
// retried on its own; CompleteMultipartUpload follows when all have succeeded,
// AbortMultipartUpload when one has failed for good. Anything else fails at
// once with one line: URL, operation, HTTP status, S3's error code, and for
// 401/403 where the credentials came from and which places were looked at. The
// secret key and session token never appear in messages or logs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "orchard/core/http.h"

namespace orchard::s3 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string source;                  // "environment variables AWS_ACCESS_KEY_ID/...", "profile
                                       // "x" in /root/.aws/credentials", "none (anonymous)"
  std::vector<std::string> looked_at;  // every place searched, in order
  bool anonymous() const { return access_key_id.empty(); }
};

using RetryOptions = http::RetryOptions;

struct S3Options {
  std::string endpoint;  // "scheme://host[:port]"; empty: AWS's regional endpoint
  std::string region = "us-east-1";
  bool path_style = false;
  bool verify_tls = true;
  Credentials credentials;
  uint64_t multipart_threshold = 64u << 20;  // objects larger than this go in parts
  uint64_t part_size = 16u << 20;            // S3's minimum is 5 MiB (except the last part)
  // Parts uploaded at once by a multipart upload (threads, each with its own
  // connection); the upload holds up to this many part copies in memory
  // beyond the data itself.
  int upload_concurrency = 6;
  int max_keys = 1000;  // ListObjectsV2 page size
  RetryOptions retry;
  long stall_timeout_s = 30;

  // Reads the environment and ~/.aws as described above.
  static S3Options from_environment();
};

// Reads credentials and the profile's region as from_environment does, from an
// explicit environment (a lookup function) so that tests need not change the
// process's.
Credentials find_credentials(const std::function<std::optional<std::string>(const std::string&)>& getenv,
                             std::string* profile_region = nullptr);

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

class Client {
 public:
  explicit Client(S3Options options);

  // The whole object, resuming a broken transfer with a range request.
  std::string get(const std::string& bucket, const std::string& key);
  // Bytes [offset, offset + n) (fewer at the end; none at or past it).
  std::string get_range(const std::string& bucket, const std::string& key, uint64_t offset, uint64_t n);
  // The object's size, or nothing on 404.
  std::optional<uint64_t> head(const std::string& bucket, const std::string& key);
  // One PUT up to multipart_threshold, a multipart upload (parts in parallel)
  // above it.
  void put(const std::string& bucket, const std::string& key, const std::string& data);
  void remove(const std::string& bucket, const std::string& key);
  // Every object whose key starts with `prefix` (ListObjectsV2, following
  // continuation tokens).
  std::vector<ObjectInfo> list(const std::string& bucket, const std::string& prefix);

  const S3Options& options() const { return options_; }
  // Requests sent so far, retries included (tests check that a retry happened).
  int64_t requests_sent() const { return requests_sent_; }

 private:
  struct Result;
  // One S3 operation with its retries. `ok_statuses` beyond 2xx are returned
  // rather than thrown (404 for HEAD, 416 for a range past the end). With
  // `resume_body` (a whole-object GET) the body accumulates there and a retry
  // asks for the bytes not yet received.
  Result request(const std::string& op, const std::string& method, const std::string& bucket, const std::string& key,
                 const std::vector<std::pair<std::string, std::string>>& query, const std::string* body,
                 const std::vector<std::pair<std::string, std::string>>& extra_headers,
                 const std::vector<long>& ok_statuses = {}, std::string* resume_body = nullptr);
  std::string object_url(const std::string& bucket, const std::string& key) const;
  void put_multipart(const std::string& bucket, const std::string& key, const std::string& data);

  S3Options options_;
  std::atomic<int64_t> requests_sent_{0};
};

}  // namespace orchard::s3
