#include "orchard/core/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "orchard/core/error.h"

namespace orchard::http {
namespace {

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* response = static_cast<Response*>(user);
  if (response->body.empty()) {
    // Room for the whole body at once: growing by doubling would hold up to 1.5x its size in
    // transient copies, per request in flight.
    auto it = response->headers.find("content-length");
    if (it != response->headers.end()) {
      const unsigned long long length = std::strtoull(it->second.c_str(), nullptr, 10);
      if (length > 0 && length <= (1ull << 32)) response->body.reserve(static_cast<size_t>(length));
    }
  }
  response->body.append(data, size * n);
  return size * n;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) headers->clear();  // a new response (after 100 Continue, redirects)
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
    size_t start = value.find_first_not_of(' ');
    value = start == std::string::npos ? "" : value.substr(start);
    // A repeated header joins the earlier ones with ", " (RFC 9110 5.3): GCS sends x-goog-hash
    // twice, once for crc32c and once for md5.
    auto [it, inserted] = headers->emplace(name, value);
    if (!inserted) it->second += ", " + value;
  }
  return size * n;
}

thread_local const std::atomic<bool>* tls_cancel = nullptr;

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(user)->load() ? 1 : 0;  // non-zero aborts the transfer
}

bool retryable(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: return true;
    default:
      return false;  // a malformed URL, an unknown host, a TLS certificate
                     // refused: retrying cannot help
  }
}

}  // namespace

double backoff_seconds(const RetryOptions& r, int attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double cap = std::min(r.max_backoff_seconds, r.initial_backoff_seconds * std::pow(2.0, attempt - 1));
  return std::uniform_real_distribution<double>(0.0, cap)(rng);  // full jitter
}

CancelScope::CancelScope(const std::atomic<bool>* flag) : previous_(tls_cancel) { tls_cancel = flag; }
CancelScope::~CancelScope() { tls_cancel = previous_; }

bool cancelled() { return tls_cancel && tls_cancel->load(); }

bool sleep_unless_cancelled(double seconds) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (Clock::time_point now; (now = Clock::now()) < until;) {
    if (cancelled()) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(20), until - now));
  }
  return !cancelled();
}

Client::Client() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Client::~Client() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* Client::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  CURL* h = curl_easy_init();
  if (!h) throw Error("libcurl: cannot create a handle");
  return h;
}

void Client::release(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(handle);
}

Response Client::perform(const Request& request) {
  if (cancelled()) {
    Response r;
    r.transport_failed = true;
    r.transport_error = "cancelled";
    return r;
  }
  CURL* h = static_cast<CURL*>(acquire());
  curl_easy_reset(h);  // keeps the handle's live connections
  Response response;
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, request.connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, request.stall_timeout_s);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, request.verify_tls ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, request.verify_tls ? 2L : 0L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &response.headers);
  if (request.follow_redirects) {
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  }
  if (tls_cancel) {
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(tls_cancel));
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  }
  static const std::string empty;
  const std::string& body = request.body ? *request.body : empty;
  if (request.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT" || request.method == "POST") {
    // The body goes as one Content-Length body (never aws-chunked, never
    // chunked).
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  curl_slist* list = nullptr;
  bool has_type = false;
  for (const auto& [k, v] : request.headers) {
    list = curl_slist_append(list, (k + ": " + v).c_str());
    if (k == "content-type" || k == "Content-Type") has_type = true;
  }
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  if ((request.method == "PUT" || request.method == "POST") && !has_type)
    list = curl_slist_append(list, "Content-Type: application/octet-stream");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);

  const CURLcode code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  curl_slist_free_all(list);
  if (code != CURLE_OK) {
    response.transport_failed = true;
    response.transport_retryable = retryable(code);
    response.transport_error = code == CURLE_ABORTED_BY_CALLBACK ? "cancelled" : curl_easy_strerror(code);
    // A broken connection should not go back to the pool's cache.
    curl_easy_cleanup(h);
    return response;
  }
  release(h);
  return response;
}

Client& shared_client() {
  static Client* client = new Client();  // never destroyed: requests may run during exit
  return *client;
}

}  // namespace orchard::http
