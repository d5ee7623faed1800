// A Google Cloud Storage client with no SDK: the JSON API (storage/v1) over libcurl (http.h),
// OAuth 2 access tokens from a service-account key (an RS256 JWT signed with OpenSSL), a gcloud
// user login or the GCE metadata server, JSON read with nlohmann-json.
//
// Configuration, as Google's client libraries read it:
//   endpoint     STORAGE_EMULATOR_HOST ("http://host:port" or "host:port"): that server and no
//                credentials at all (the Firebase Storage emulator, fake-gcs-server); else
//                https://storage.googleapis.com
//   credentials  the JSON file GOOGLE_APPLICATION_CREDENTIALS names ("service_account" key or
//                "authorized_user" login); else gcloud's application-default login
//                $CLOUDSDK_CONFIG/application_default_credentials.json (CLOUDSDK_CONFIG defaults
//                to ~/.config/gcloud); else the GCE metadata server (GCE_METADATA_HOST, default
//                metadata.google.internal, asked with a 1 s connect timeout so that off-cloud it
//                fails fast). Access tokens are cached and fetched again 5 minutes before they
//                expire (or at half their life when that is shorter).
//
// Objects: media downloads (alt=media) with Range for ranged reads, objects.get for stat,
// objects.list (prefix, pageToken) for listings, objects.delete; uploads up to
// `resumable_threshold` are one media upload, larger ones a resumable upload in chunks of
// `chunk_size` (a multiple of 256 KiB). The object appears whole when its upload finalizes.
// Downloads ask for the stored bytes (Accept-Encoding: gzip): a gzip-encoded object is returned
// compressed, as stored, so that ranges and sizes agree.
//
// Retries: 408, 429, 5xx, refused/reset connections, timeouts and stalls are retried with
// exponential backoff and full jitter (retry.h), bounded in tries and time. A download that breaks
// mid-body resumes with a Range request from the last byte received, pinned to the object's
// generation. A whole-object read is checked against the object's size and, where the server
// sends one, the x-goog-hash crc32c, and read again on a mismatch. Each resumable chunk is retried
// on its own; after a failed chunk the upload's status (`Content-Range: bytes */N`) says how much
// the service persisted and the upload goes on from there; a session the service forgot (404/410)
// starts the upload again. Uploads are checked against the size and crc32c the service reports.
// Anything else fails at once with one line: the gs:// URL, the operation, the request URL, the
// HTTP status and the service's error reason, and for 401/403 where the credentials came from and
// which places were looked at. Private keys, refresh tokens and access tokens never appear in
// messages or logs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "orchard/core/retry.h"

namespace orchard::gcs {

struct Credentials {
  enum class Kind { kNone, kServiceAccount, kAuthorizedUser, kMetadataServer };
  Kind kind = Kind::kNone;
  // Where they came from ("service account x@p.iam.gserviceaccount.com in /k.json
  // (GOOGLE_APPLICATION_CREDENTIALS)", "none (STORAGE_EMULATOR_HOST=...)") and every place
  // searched, in order, for 401/403 messages.
  std::string source;
  std::vector<std::string> looked_at;
  std::string scope = "https://www.googleapis.com/auth/devstorage.read_write";
  std::string token_uri;  // service_account and authorized_user
  // service_account
  std::string client_email, private_key_id;
  std::string private_key;  // PEM (PKCS#8, as in the key file)
  // authorized_user
  std::string client_id, client_secret, refresh_token;
  // metadata server: "host[:port]"
  std::string metadata_host;
};

using Env = std::function<std::optional<std::string>(const std::string&)>;

// The credential chain above, from an explicit environment so that tests need not change the
// process's. A GOOGLE_APPLICATION_CREDENTIALS file that is missing or malformed is an error, as in
// Google's libraries; a missing well-known file is skipped.
Credentials find_credentials(const Env& getenv);
// A service_account or authorized_user JSON file; `how` says how it was found, for messages.
Credentials load_credentials_file(const std::string& path, const std::string& how);

// The RS256-signed JWT a service account exchanges for an access token (RFC 7523): header
// {"alg":"RS256","typ":"JWT","kid":private_key_id}, claims iss=client_email, scope, aud=token_uri,
// iat=now, exp=now+3600; base64url without padding.
std::string service_account_jwt(const Credentials& credentials, int64_t now_unix_seconds);

// Access tokens for the credentials, cached until 5 minutes before expiry. Thread-safe.
class TokenSource {
 public:
  TokenSource(Credentials credentials, retry::Options retry, bool verify_tls);
  // "" for Kind::kNone.
  std::string token();
  // Drops the cached token (after a 401).
  void invalidate();
  const Credentials& credentials() const { return credentials_; }
  int64_t fetches() const { return fetches_; }

 private:
  std::string fetch(double* expires_in);

  Credentials credentials_;
  retry::Options retry_;
  bool verify_tls_;
  std::mutex mu_;
  std::string token_;
  std::chrono::steady_clock::time_point refresh_at_;
  std::atomic<int64_t> fetches_{0};
};

struct GcsOptions {
  std::string endpoint = "https://storage.googleapis.com";  // scheme://host[:port]
  bool verify_tls = true;
  Credentials credentials;
  uint64_t resumable_threshold = 16u << 20;  // larger objects go in a resumable upload
  uint64_t chunk_size = 16u << 20;           // rounded down to a multiple of 256 KiB
  int max_results = 1000;                    // objects.list page size
  retry::Options retry;
  long stall_timeout_s = 30;

  // Reads the environment as described above.
  static GcsOptions from_environment();
  static GcsOptions from_environment(const Env& getenv);
};

struct ObjectInfo {
  std::string name;
  uint64_t size = 0;
  int64_t generation = 0;
  std::optional<uint32_t> crc32c;
};

class Client {
 public:
  explicit Client(GcsOptions options);

  // The whole object, resuming a broken transfer with a range request.
  std::string get(const std::string& bucket, const std::string& object);
  // Bytes [offset, offset + n) (fewer at the end; none at or past it).
  std::string get_range(const std::string& bucket, const std::string& object, uint64_t offset, uint64_t n);
  // The object's metadata, or nothing on 404.
  std::optional<ObjectInfo> stat(const std::string& bucket, const std::string& object);
  // A media upload up to resumable_threshold, a resumable upload above it.
  void put(const std::string& bucket, const std::string& object, const std::string& data);
  // Removing a missing object is not an error.
  void remove(const std::string& bucket, const std::string& object);
  // Every object whose name starts with `prefix`, sorted by name (objects.list, following
  // nextPageToken).
  std::vector<ObjectInfo> list(const std::string& bucket, const std::string& prefix);

  const GcsOptions& options() const { return options_; }
  // Requests sent to the storage endpoint so far, retries included.
  int64_t requests_sent() const { return requests_sent_; }

 private:
  struct Call;
  struct Reply;
  Reply send(const Call& call);
  Reply attempt(const Call& call);
  // Bytes from `offset` (all of them without `n`), resuming a broken transfer; the object's size
  // and crc32c as the server gave them.
  std::string download(const std::string& bucket, const std::string& object, uint64_t offset, std::optional<uint64_t> n,
                       std::optional<uint64_t>* object_size, std::optional<uint32_t>* object_crc32c);
  void put_resumable(const std::string& bucket, const std::string& object, const std::string& data);
  [[noreturn]] void fail(const Call& call, const Reply& reply, const std::string& failure, const std::string& gave_up);

  GcsOptions options_;
  TokenSource tokens_;
  std::atomic<int64_t> requests_sent_{0};
};

// gs://bucket/name (a name with '/' as in the console), for messages.
std::string object_url(const std::string& bucket, const std::string& object);

}  // namespace orchard::gcs
