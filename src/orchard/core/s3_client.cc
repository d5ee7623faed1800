#include "orchard/core/s3_client.h"

#include <openssl/evp.h>
#include <pugixml.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>

#include "orchard/core/filesystem.h"
#include "orchard/core/http.h"
#include "orchard/core/s3_sigv4.h"

namespace orchard::s3 {
namespace {

using Env = std::function<std::optional<std::string>(const std::string&)>;

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// section -> key -> value of an INI file (~/.aws/credentials, ~/.aws/config).
using Ini = std::map<std::string, std::map<std::string, std::string>>;
std::optional<Ini> read_ini(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  Ini ini;
  std::string line, section;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    ini[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return ini;
}

bool falsy(const std::string& v) { return v == "0" || v == "false" || v == "FALSE" || v == "False" || v == "no"; }

std::string amz_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// One line, whatever the service put in its message.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return trim(s);
}

struct ServiceError {
  std::string code, message;
};
ServiceError parse_error(const std::string& body) {
  ServiceError e;
  pugi::xml_document doc;
  if (!body.empty() && doc.load_buffer(body.data(), body.size())) {
    const pugi::xml_node err = doc.child("Error");
    e.code = err.child_value("Code");
    e.message = one_line(err.child_value("Message"));
  }
  return e;
}

std::string status_text(long status) {
  switch (status) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 409: return "Conflict";
    case 412: return "PreconditionFailed";
    case 416: return "InvalidRange";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    default: return "";
  }
}

using http::backoff_seconds;

}  // namespace

Credentials find_credentials(const Env& getenv, std::string* profile_region) {
  Credentials c;
  c.looked_at.push_back("environment variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY");
  const auto id = getenv("AWS_ACCESS_KEY_ID"), secret = getenv("AWS_SECRET_ACCESS_KEY");
  const std::string profile = getenv("AWS_PROFILE").value_or(getenv("AWS_DEFAULT_PROFILE").value_or("default"));
  const std::string home = getenv("HOME").value_or("");
  const std::string cred_file = getenv("AWS_SHARED_CREDENTIALS_FILE").value_or(home + "/.aws/credentials");
  const std::string config_file = getenv("AWS_CONFIG_FILE").value_or(home + "/.aws/config");
  const auto config = read_ini(config_file);
  const std::string config_section = profile == "default" ? "default" : "profile " + profile;
  if (profile_region && config && config->count(config_section) && config->at(config_section).count("region"))
    *profile_region = config->at(config_section).at("region");
  if (id && secret) {
    c.access_key_id = *id;
    c.secret_access_key = *secret;
    c.session_token = getenv("AWS_SESSION_TOKEN").value_or("");
    c.source = "environment variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" +
               std::string(c.session_token.empty() ? "" : "/AWS_SESSION_TOKEN");
    return c;
  }
  auto from_section = [&](const Ini& ini, const std::string& section, const std::string& where) {
    auto s = ini.find(section);
    if (s == ini.end()) return false;
    auto k = s->second.find("aws_access_key_id"), v = s->second.find("aws_secret_access_key");
    if (k == s->second.end() || v == s->second.end()) return false;
    c.access_key_id = k->second;
    c.secret_access_key = v->second;
    auto t = s->second.find("aws_session_token");
    if (t != s->second.end()) c.session_token = t->second;
    c.source = where;
    return true;
  };
  c.looked_at.push_back("profile \"" + profile + "\" in " + cred_file);
  if (const auto ini = read_ini(cred_file); ini && from_section(*ini, profile, c.looked_at.back())) return c;
  c.looked_at.push_back("[" + config_section + "] in " + config_file);
  if (config && from_section(*config, config_section, c.looked_at.back())) return c;
  c.source = "none (anonymous, unsigned requests)";
  return c;
}

S3Options S3Options::from_environment() {
  S3Options o;
  std::string profile_region;
  o.credentials = find_credentials(process_env, &profile_region);
  o.region =
      process_env("AWS_REGION")
          .value_or(process_env("AWS_DEFAULT_REGION").value_or(profile_region.empty() ? "us-east-1" : profile_region));
  if (auto url = process_env("AWS_ENDPOINT_URL_S3").value_or(process_env("AWS_ENDPOINT_URL").value_or(""));
      !url.empty()) {
    o.endpoint = url;
  } else if (auto ep = process_env("S3_ENDPOINT")) {
    const bool https = !falsy(process_env("S3_USE_HTTPS").value_or("1"));
    o.endpoint = ep->find("://") != std::string::npos ? *ep : (https ? "https://" : "http://") + *ep;
  }
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  o.path_style = !o.endpoint.empty();
  o.verify_tls = !falsy(process_env("S3_VERIFY_SSL").value_or("1"));
  return o;
}

struct Client::Result {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};

Client::Client(S3Options options) : options_(std::move(options)) {
  if (options_.part_size < (5u << 20)) options_.part_size = 5u << 20;
  if (options_.multipart_threshold < options_.part_size) options_.multipart_threshold = options_.part_size;
}

std::string Client::object_url(const std::string& bucket, const std::string& key) const {
  return "s3://" + bucket + "/" + key;
}

Client::Result Client::request(const std::string& op, const std::string& method, const std::string& bucket,
                               const std::string& key, const std::vector<std::pair<std::string, std::string>>& query,
                               const std::string* body,
                               const std::vector<std::pair<std::string, std::string>>& extra_headers,
                               const std::vector<long>& ok_statuses, std::string* resume_body) {
  // Where the request goes, and the canonical URI SigV4 signs.
  std::string scheme_host, path;
  const std::string encoded_key = uri_encode(key, true);
  if (!options_.endpoint.empty() || options_.path_style || bucket.find('.') != std::string::npos) {
    scheme_host = options_.endpoint.empty() ? "https://s3." + options_.region + ".amazonaws.com" : options_.endpoint;
    path = "/" + bucket + "/" + encoded_key;
  } else {
    scheme_host = "https://" + bucket + ".s3." + options_.region + ".amazonaws.com";
    path = "/" + encoded_key;
  }
  const size_t authority_at = scheme_host.find("://") + 3;
  const std::string host = scheme_host.substr(authority_at, scheme_host.find('/', authority_at) - authority_at);
  const std::string qs = canonical_query(query);
  const std::string url = scheme_host + path + (qs.empty() ? "" : "?" + qs);
  const std::string payload_hash = sha256_hex(body ? *body : std::string());
  const std::string what = object_url(bucket, key);

  const auto start = std::chrono::steady_clock::now();
  std::string etag;  // of the first partial response, so a resumed GET reads the
                     // same object
  for (int attempt = 1;; ++attempt) {
    http::Request req;
    req.method = method;
    req.url = url;
    req.body = body;
    req.verify_tls = options_.verify_tls;
    req.stall_timeout_s = options_.stall_timeout_s;
    std::vector<std::pair<std::string, std::string>> headers = {
        {"host", host}, {"x-amz-date", amz_now()}, {"x-amz-content-sha256", payload_hash}};
    if (!options_.credentials.session_token.empty())
      headers.emplace_back("x-amz-security-token", options_.credentials.session_token);
    for (const auto& h : extra_headers) headers.push_back(h);
    if (resume_body && !resume_body->empty()) {
      headers.emplace_back("range", "bytes=" + std::to_string(resume_body->size()) + "-");
      if (!etag.empty()) headers.emplace_back("if-match", etag);
    }
    req.headers = headers;
    if (!options_.credentials.anonymous()) {
      SigV4Request sr{method, path, query, headers, payload_hash};
      const auto signed_request =
          sign_v4(sr, {options_.credentials.access_key_id, options_.credentials.secret_access_key}, options_.region,
                  "s3", headers[1].second);
      req.headers.emplace_back("Authorization", signed_request.authorization);
    }
    http::Response resp = http::shared_client().perform(req);
    ++requests_sent_;

    const bool ok =
        !resp.transport_failed && ((resp.status >= 200 && resp.status < 300) ||
                                   std::find(ok_statuses.begin(), ok_statuses.end(), resp.status) != ok_statuses.end());
    if (resume_body && (resp.status == 200 || resp.status == 206)) {
      if (etag.empty() && resp.headers.count("etag")) etag = resp.headers["etag"];
      if (resp.status == 200) resume_body->clear();  // the whole object (again)
      resume_body->append(resp.body);
      resp.body.clear();
    }
    if (ok) return Result{resp.status, std::move(resp.body), std::move(resp.headers)};

    ServiceError se;
    bool retry;
    std::string failure;
    if (resp.transport_failed) {
      retry = resp.transport_retryable;
      failure = resp.transport_error + (resp.status ? " (after HTTP " + std::to_string(resp.status) + ")" : "");
    } else {
      se = parse_error(resp.body);
      if (se.code.empty()) se.code = status_text(resp.status);
      retry = resp.status == 429 || (resp.status >= 500 && resp.status != 501) ||
              (resp.status == 400 && se.code == "RequestTimeout");
      failure = "HTTP " + std::to_string(resp.status) + (se.code.empty() ? "" : " " + se.code) +
                (se.message.empty() ? "" : " (" + se.message + ")");
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double wait = backoff_seconds(options_.retry, attempt);
    if (retry && attempt < options_.retry.max_attempts && elapsed + wait <= options_.retry.max_retry_seconds) {
      spdlog::warn("{}: {} {}: {}; retry {} in {:.2f} s", what, op, method, failure, attempt, wait);
      if (http::sleep_unless_cancelled(wait)) continue;
      failure += "; cancelled";
      retry = false;
    }
    std::string msg = what + ": " + op + " (" + method + " " + url + ") failed: " + failure;
    if (retry) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "; gave up after %d attempts in %.1f s", attempt, elapsed);
      msg += buf;
    }
    if (resp.status == 401 || resp.status == 403) {
      msg += "; credentials from " + options_.credentials.source + "; looked at: ";
      for (size_t i = 0; i < options_.credentials.looked_at.size(); ++i)
        msg += (i ? ", " : "") + options_.credentials.looked_at[i];
    }
    throw fs::StorageError(msg, resp.status, se.code);
  }
}

namespace {
// Whether `body` is the object an ETag names: a single-part object's ETag is the MD5 of its bytes
// (quoted hex); a multipart one's ("<hex>-<parts>") or another form cannot be checked here.
bool matches_etag(std::string etag, const std::string& body) {
  etag.erase(std::remove(etag.begin(), etag.end(), '"'), etag.end());
  if (etag.size() != 32 || etag.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return true;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(body.data(), body.size(), md, &n, EVP_md5(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string got;
  for (unsigned int i = 0; i < n; ++i) got += {hex[md[i] >> 4], hex[md[i] & 15]};
  std::transform(etag.begin(), etag.end(), etag.begin(), [](unsigned char c) { return std::tolower(c); });
  return got == etag;
}
}  // namespace

std::string Client::get(const std::string& bucket, const std::string& key) {
  // A whole-object read is checked against the ETag: a body cut short without a transport error
  // (a server answering before its write finished: seen with s3rver on a loaded machine) is read
  // again rather than returned.
  for (int attempt = 1;; ++attempt) {
    std::string body;
    Result r = request("read", "GET", bucket, key, {}, nullptr, {}, {}, &body);
    const auto etag = r.headers.find("etag");
    if (etag == r.headers.end() || matches_etag(etag->second, body)) return body;
    const std::string what = object_url(bucket, key) + ": read GET: the " + std::to_string(body.size()) +
                             " bytes received do not match the object's ETag " + etag->second;
    if (attempt >= options_.retry.max_attempts) throw fs::StorageError(what, r.status, "BadDigest");
    const double wait = backoff_seconds(options_.retry, attempt);
    spdlog::warn("{}; retry {} in {:.2f} s", what, attempt, wait);
    if (!http::sleep_unless_cancelled(wait)) throw fs::StorageError(what + "; cancelled", r.status, "BadDigest");
  }
}

std::string Client::get_range(const std::string& bucket, const std::string& key, uint64_t offset, uint64_t n) {
  if (n == 0) return "";
  const uint64_t last = n > UINT64_MAX - offset ? UINT64_MAX - 1 : offset + n - 1;
  Result r = request("read range", "GET", bucket, key, {}, nullptr,
                     {{"range", "bytes=" + std::to_string(offset) + "-" + std::to_string(last)}}, {416});
  if (r.status == 416) return "";
  if (r.status == 200) {  // a server that ignores Range sends the whole object
    if (offset >= r.body.size()) return "";
    return r.body.substr(offset, n);
  }
  if (r.body.size() > n) r.body.resize(n);
  return std::move(r.body);  // a member of a local is copied unless moved: 8 MiB per block
}

std::optional<uint64_t> Client::head(const std::string& bucket, const std::string& key) {
  Result r = request("stat", "HEAD", bucket, key, {}, nullptr, {}, {404});
  if (r.status == 404) return std::nullopt;
  auto it = r.headers.find("content-length");
  return it == r.headers.end() ? 0 : std::stoull(it->second);
}

void Client::put(const std::string& bucket, const std::string& key, const std::string& data) {
  if (data.size() > options_.multipart_threshold) return put_multipart(bucket, key, data);
  request("write", "PUT", bucket, key, {}, &data, {});
}

void Client::put_multipart(const std::string& bucket, const std::string& key, const std::string& data) {
  Result created = request("start multipart upload", "POST", bucket, key, {{"uploads", ""}}, nullptr, {});
  pugi::xml_document doc;
  doc.load_buffer(created.body.data(), created.body.size());
  const std::string upload_id = doc.child("InitiateMultipartUploadResult").child_value("UploadId");
  if (upload_id.empty())
    throw fs::StorageError(object_url(bucket, key) + ": start multipart upload: no UploadId in the response");
  try {
    // Parts go out `upload_concurrency` at a time: each thread takes the next
    // part number, sends it (with its own retries) and stores its ETag. The
    // first part that fails for good stops the others from starting new parts.
    const uint64_t parts = (data.size() + options_.part_size - 1) / options_.part_size;
    std::vector<std::string> etags(parts);
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr first_error;
    std::mutex error_mu;
    auto upload_parts = [&] {
      for (uint64_t i; !failed && (i = next++) < parts;) {
        try {
          const std::string chunk = data.substr(i * options_.part_size, options_.part_size);
          const std::string number = std::to_string(i + 1);
          Result r = request("upload part " + number, "PUT", bucket, key,
                             {{"partNumber", number}, {"uploadId", upload_id}}, &chunk, {});
          auto etag = r.headers.find("etag");
          if (etag == r.headers.end())
            throw fs::StorageError(object_url(bucket, key) + ": upload part " + number + ": no ETag");
          etags[i] = etag->second;
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!first_error) first_error = std::current_exception();
          failed = true;
        }
      }
    };
    const uint64_t threads = std::min<uint64_t>(parts, static_cast<uint64_t>(std::max(1, options_.upload_concurrency)));
    std::vector<std::thread> pool;
    for (uint64_t t = 1; t < threads; ++t) {
      try {
        pool.emplace_back(upload_parts);
      } catch (const std::system_error&) {
        break;  // no more threads: the ones running share the parts
      }
    }
    upload_parts();  // this thread is one of them
    for (std::thread& t : pool) t.join();
    if (first_error) std::rethrow_exception(first_error);

    pugi::xml_document complete;
    pugi::xml_node root = complete.append_child("CompleteMultipartUpload");
    for (uint64_t i = 0; i < parts; ++i) {
      pugi::xml_node p = root.append_child("Part");
      p.append_child("PartNumber").text().set(static_cast<unsigned long long>(i + 1));
      p.append_child("ETag").text().set(etags[i].c_str());
    }
    std::ostringstream xml;
    complete.save(xml, "", pugi::format_raw);
    const std::string body = xml.str();
    Result done = request("complete multipart upload", "POST", bucket, key, {{"uploadId", upload_id}}, &body, {});
    // S3 may answer 200 and put the failure in the body.
    const ServiceError se = parse_error(done.body);
    if (!se.code.empty())
      throw fs::StorageError(
          object_url(bucket, key) + ": complete multipart upload failed: " + se.code + " (" + se.message + ")", 200,
          se.code);
  } catch (...) {
    try {
      request("abort multipart upload", "DELETE", bucket, key, {{"uploadId", upload_id}}, nullptr, {}, {404});
    } catch (const std::exception& e) {
      spdlog::warn("{}", e.what());
    }
    throw;
  }
}

void Client::remove(const std::string& bucket, const std::string& key) {
  request("remove", "DELETE", bucket, key, {}, nullptr, {}, {404});
}

std::vector<ObjectInfo> Client::list(const std::string& bucket, const std::string& prefix) {
  std::vector<ObjectInfo> out;
  std::string token;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> q = {
        {"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(options_.max_keys)}};
    if (!token.empty()) q.emplace_back("continuation-token", token);
    Result r = request("list", "GET", bucket, "", q, nullptr, {});
    pugi::xml_document doc;
    if (!doc.load_buffer(r.body.data(), r.body.size()))
      throw fs::StorageError(object_url(bucket, prefix) + ": list: the response is not XML");
    const pugi::xml_node root = doc.child("ListBucketResult");
    for (pugi::xml_node c = root.child("Contents"); c; c = c.next_sibling("Contents"))
      out.push_back({c.child_value("Key"), std::strtoull(c.child_value("Size"), nullptr, 10)});
    if (std::string(root.child_value("IsTruncated")) != "true") break;
    token = root.child_value("NextContinuationToken");
    if (token.empty())
      throw fs::StorageError(object_url(bucket, prefix) + ": list: truncated listing without a continuation token");
  }
  std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

}  // namespace orchard::s3
