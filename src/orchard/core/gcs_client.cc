#include "orchard/core/gcs_client.h"

#include <nlohmann/json.hpp>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>

#include "orchard/core/crc32c.h"
#include "orchard/core/filesystem.h"
#include "orchard/core/http.h"

namespace orchard::gcs {
namespace {

using json = nlohmann::json;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr uint64_t kChunkGranularity = 256u << 10;  // resumable chunks are multiples of this
const char* const kDefaultTokenUri = "https://oauth2.googleapis.com/token";

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

// Percent-encodes all but RFC 3986's unreserved characters: an object name is one path segment in
// the JSON API, so its '/' becomes %2F.
std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string base64(const unsigned char* data, size_t n) {
  std::string out(4 * ((n + 2) / 3), '\0');
  const int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(n));
  out.resize(static_cast<size_t>(len));
  return out;
}

std::string base64url(const std::string& s) {
  std::string out = base64(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!out.empty() && out.back() == '=') out.pop_back();
  return out;
}

// GCS writes a CRC-32C as the base64 of its 4 big-endian bytes.
std::optional<uint32_t> decode_crc32c(const std::string& b64) {
  if (b64.size() != 8) return std::nullopt;
  unsigned char raw[8];
  if (EVP_DecodeBlock(raw, reinterpret_cast<const unsigned char*>(b64.data()), 8) != 6) return std::nullopt;
  return (uint32_t{raw[0]} << 24) | (uint32_t{raw[1]} << 16) | (uint32_t{raw[2]} << 8) | uint32_t{raw[3]};
}

// x-goog-hash: "crc32c=AAAAAA==,md5=..." (one header, or several joined with ", ").
std::optional<uint32_t> crc32c_from_hash_header(const std::map<std::string, std::string>& headers) {
  const auto it = headers.find("x-goog-hash");
  if (it == headers.end()) return std::nullopt;
  std::stringstream ss(it->second);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t a = item.find_first_not_of(' ');
    if (a == std::string::npos) continue;
    item = item.substr(a);
    if (item.rfind("crc32c=", 0) == 0) return decode_crc32c(item.substr(7));
  }
  return std::nullopt;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string status_text(long status) {
  switch (status) {
    case 400: return "badRequest";
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "notFound";
    case 408: return "requestTimeout";
    case 409: return "conflict";
    case 410: return "gone";
    case 412: return "conditionNotMet";
    case 416: return "requestedRangeNotSatisfiable";
    case 429: return "rateLimitExceeded";
    case 500: return "backendError";
    case 503: return "serviceUnavailable";
    default: return "";
  }
}

struct ServiceError {
  std::string code, message;
};

// {"error": {"code": 403, "message": "...", "errors": [{"reason": "forbidden"}]}} from storage,
// {"error": "invalid_grant", "error_description": "..."} from OAuth token endpoints.
ServiceError parse_error(long status, const std::string& body) {
  ServiceError e;
  const json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const json& err = j["error"];
    if (err.is_string()) {
      e.code = err.get<std::string>();
      if (j.contains("error_description") && j["error_description"].is_string())
        e.message = j["error_description"].get<std::string>();
    } else if (err.is_object()) {
      if (err.contains("errors") && err["errors"].is_array() && !err["errors"].empty() &&
          err["errors"][0].contains("reason") && err["errors"][0]["reason"].is_string())
        e.code = err["errors"][0]["reason"].get<std::string>();
      else if (err.contains("status") && err["status"].is_string()) e.code = err["status"].get<std::string>();
      if (err.contains("message") && err["message"].is_string()) e.message = err["message"].get<std::string>();
    }
  }
  if (e.code.empty()) e.code = status_text(status);
  e.message = one_line(e.message.substr(0, 300));
  return e;
}

// "HTTP 403 forbidden (message)" or the transport's failure; whether another try may help.
std::string describe(const http::Response& r, ServiceError* se, bool* retry) {
  if (r.transport_failed) {
    *retry = r.transport_retryable;
    return r.transport_error + (r.status ? " (after HTTP " + std::to_string(r.status) + ")" : "");
  }
  *se = parse_error(r.status, r.body);
  *retry = retry::retryable_status(r.status);
  return "HTTP " + std::to_string(r.status) + (se->code.empty() ? "" : " " + se->code) +
         (se->message.empty() ? "" : " (" + se->message + ")");
}

std::string looked_at_text(const Credentials& c) {
  std::string s;
  for (size_t i = 0; i < c.looked_at.size(); ++i) s += (i ? ", " : "") + c.looked_at[i];
  return s;
}

std::string credentials_text(const Credentials& c) {
  return "; credentials from " + c.source + "; looked at: " + looked_at_text(c);
}

// An upload session URI is a capability: messages show it without its upload_id.
std::string redact(const std::string& url) {
  const size_t at = url.find("upload_id=");
  if (at == std::string::npos) return url;
  const size_t end = url.find('&', at);
  return url.substr(0, at) + "upload_id=..." + (end == std::string::npos ? "" : url.substr(end));
}

std::string json_string(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// A JSON number or a decimal string ("size": "123" in the JSON API).
uint64_t json_uint(const json& j, const char* key) {
  if (!j.contains(key)) return 0;
  if (j[key].is_number_unsigned() || j[key].is_number_integer()) return j[key].get<uint64_t>();
  if (j[key].is_string()) return std::strtoull(j[key].get<std::string>().c_str(), nullptr, 10);
  return 0;
}

ObjectInfo object_info(const json& j) {
  ObjectInfo o;
  o.name = json_string(j, "name");
  o.size = json_uint(j, "size");
  o.generation = static_cast<int64_t>(json_uint(j, "generation"));
  if (const std::string crc = json_string(j, "crc32c"); !crc.empty()) o.crc32c = decode_crc32c(crc);
  return o;
}

// "" when the object resource an upload returned holds `data`, else what differs.
std::string upload_mismatch(const std::string& body, const std::string& data) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";  // nothing to check against
  const ObjectInfo o = object_info(j);
  if (j.contains("size") && o.size != data.size())
    return "the service stored " + std::to_string(o.size) + " bytes of " + std::to_string(data.size());
  if (o.crc32c && *o.crc32c != crc32c::value(data.data(), data.size()))
    return "the stored object's crc32c differs from the bytes sent";
  return "";
}

std::string form_encode(const Headers& fields) {
  std::string out;
  for (const auto& [k, v] : fields) out += (out.empty() ? "" : "&") + url_encode(k) + "=" + url_encode(v);
  return out;
}

}  // namespace

std::string object_url(const std::string& bucket, const std::string& object) { return "gs://" + bucket + "/" + object; }

// --- credentials -----------------------------------------------------------------------------------

Credentials load_credentials_file(const std::string& path, const std::string& how) {
  std::ifstream in(path);
  if (!in) throw fs::StorageError(path + " (" + how + "): cannot read the credentials file");
  std::stringstream text;
  text << in.rdbuf();
  // Parse errors quote the text around the fault, which may be the private key: not shown.
  const json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw fs::StorageError(path + " (" + how + "): not a JSON credentials file");
  Credentials c;
  const std::string type = json_string(j, "type");
  c.token_uri = json_string(j, "token_uri");
  if (c.token_uri.empty()) c.token_uri = kDefaultTokenUri;
  auto need = [&](const char* key) {
    const std::string v = json_string(j, key);
    if (v.empty()) throw fs::StorageError(path + " (" + how + "): a \"" + type + "\" file needs \"" + key + "\"");
    return v;
  };
  if (type == "service_account") {
    c.kind = Credentials::Kind::kServiceAccount;
    c.client_email = need("client_email");
    c.private_key = need("private_key");
    c.private_key_id = json_string(j, "private_key_id");
    c.source = "service account " + c.client_email + " in " + path + " (" + how + ")";
  } else if (type == "authorized_user") {
    c.kind = Credentials::Kind::kAuthorizedUser;
    c.client_id = need("client_id");
    c.client_secret = need("client_secret");
    c.refresh_token = need("refresh_token");
    c.source = "the user login in " + path + " (" + how + ")";
  } else {
    throw fs::StorageError(path + " (" + how + "): credentials of type \"" + type +
                           "\" are not supported (service_account and authorized_user are)");
  }
  return c;
}

Credentials find_credentials(const Env& getenv) {
  std::vector<std::string> looked_at;
  looked_at.push_back("GOOGLE_APPLICATION_CREDENTIALS");
  if (const auto file = getenv("GOOGLE_APPLICATION_CREDENTIALS")) {
    looked_at.back() = "GOOGLE_APPLICATION_CREDENTIALS=" + *file;
    Credentials c = load_credentials_file(*file, "GOOGLE_APPLICATION_CREDENTIALS");
    c.looked_at = looked_at;
    return c;
  }
  const std::string dir = getenv("CLOUDSDK_CONFIG").value_or(getenv("HOME").value_or("") + "/.config/gcloud");
  const std::string well_known = dir + "/application_default_credentials.json";
  looked_at.push_back("gcloud's application-default credentials " + well_known);
  if (std::ifstream(well_known).good()) {
    Credentials c = load_credentials_file(well_known, "gcloud application-default credentials");
    c.looked_at = looked_at;
    return c;
  }
  Credentials c;
  c.kind = Credentials::Kind::kMetadataServer;
  c.metadata_host = getenv("GCE_METADATA_HOST").value_or("metadata.google.internal");
  c.source = "the GCE metadata server " + c.metadata_host;
  looked_at.push_back(c.source);
  c.looked_at = looked_at;
  return c;
}

std::string service_account_jwt(const Credentials& c, int64_t now) {
  json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  if (!c.private_key_id.empty()) header["kid"] = c.private_key_id;
  const json claims = {
      {"iss", c.client_email}, {"scope", c.scope}, {"aud", c.token_uri}, {"iat", now}, {"exp", now + 3600}};
  const std::string signing_input = base64url(header.dump()) + "." + base64url(claims.dump());

  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(c.private_key.data(), static_cast<int>(c.private_key.size())), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr, EVP_PKEY_free);
  ERR_clear_error();  // its queue would only say "bad PEM"; nothing of the key goes out
  if (!key) throw fs::StorageError(c.source + ": private_key is not a PEM private key");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  size_t len = 0;
  std::string sig;
  bool ok = ctx && EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) == 1 &&
            EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(signing_input.data()),
                           signing_input.size()) == 1;
  if (ok) {
    sig.resize(len);
    ok = EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                        reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size()) == 1;
    sig.resize(len);
  }
  ERR_clear_error();
  if (!ok) throw fs::StorageError(c.source + ": cannot sign a token request with private_key (RS256)");
  return signing_input + "." + base64url(sig);
}

TokenSource::TokenSource(Credentials credentials, retry::Options retry, bool verify_tls)
    : credentials_(std::move(credentials)), retry_(retry), verify_tls_(verify_tls) {}

void TokenSource::invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  token_.clear();
}

std::string TokenSource::token() {
  if (credentials_.kind == Credentials::Kind::kNone) return "";
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!token_.empty() && now < refresh_at_) return token_;
  double expires_in = 3600;
  token_ = fetch(&expires_in);
  // Fetched again 5 minutes before expiry, or at half its life when that is shorter.
  const double margin = std::min(300.0, expires_in / 2);
  refresh_at_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(expires_in - margin));
  return token_;
}

std::string TokenSource::fetch(double* expires_in) {
  const Credentials& c = credentials_;
  http::Request req;
  req.verify_tls = verify_tls_;
  std::string body;
  retry::Options r = retry_;
  if (c.kind == Credentials::Kind::kMetadataServer) {
    req.method = "GET";
    req.url = "http://" + c.metadata_host + "/computeMetadata/v1/instance/service-accounts/default/token";
    req.headers = {{"Metadata-Flavor", "Google"}};
    req.connect_timeout_s = 1;  // off Google Cloud there is nothing to wait for
    r.max_attempts = std::min(r.max_attempts, 3);
  } else {
    req.method = "POST";
    req.url = c.token_uri;
    if (c.kind == Credentials::Kind::kServiceAccount) {
      const int64_t now = static_cast<int64_t>(std::time(nullptr));
      body = form_encode(
          {{"grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"}, {"assertion", service_account_jwt(c, now)}});
    } else {
      body = form_encode({{"grant_type", "refresh_token"},
                          {"client_id", c.client_id},
                          {"client_secret", c.client_secret},
                          {"refresh_token", c.refresh_token}});
    }
    req.body = &body;
    req.headers = {{"Content-Type", "application/x-www-form-urlencoded"}};
  }
  retry::Backoff backoff(r);
  for (;;) {
    const http::Response resp = http::shared_client().perform(req);
    ++fetches_;
    if (!resp.transport_failed && resp.status == 200) {
      const json j = json::parse(resp.body, nullptr, false);
      const std::string token = j.is_object() ? json_string(j, "access_token") : "";
      if (token.empty())
        throw fs::StorageError("gs: access token from " + c.source + " (" + req.method + " " + req.url +
                               "): the answer has no access_token");
      if (j.contains("expires_in") && j["expires_in"].is_number()) *expires_in = j["expires_in"].get<double>();
      return token;
    }
    ServiceError se;
    bool retry = false;
    const std::string failure = describe(resp, &se, &retry);
    const std::string what =
        "gs: access token from " + c.source + " (" + req.method + " " + req.url + ") failed: " + failure;
    if (retry && backoff.again(what)) continue;
    throw fs::StorageError(what + (retry ? backoff.gave_up() : "") + "; looked at: " + looked_at_text(c), resp.status,
                           se.code);
  }
}

// --- storage ---------------------------------------------------------------------------------------

GcsOptions GcsOptions::from_environment() { return from_environment(process_env); }

GcsOptions GcsOptions::from_environment(const Env& getenv) {
  GcsOptions o;
  if (const auto host = getenv("STORAGE_EMULATOR_HOST")) {
    o.endpoint = host->find("://") != std::string::npos ? *host : "http://" + *host;
    while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
    o.credentials.kind = Credentials::Kind::kNone;
    o.credentials.source = "none (STORAGE_EMULATOR_HOST=" + *host + ")";
    o.credentials.looked_at = {"STORAGE_EMULATOR_HOST"};
    return o;
  }
  o.credentials = find_credentials(getenv);
  return o;
}

struct Client::Call {
  std::string op, method, url;
  std::string bucket, object;
  const std::string* body = nullptr;
  Headers headers;
  std::vector<long> ok_statuses;  // beyond 2xx, returned rather than thrown
};

struct Client::Reply : http::Response {};

Client::Client(GcsOptions options)
    : options_(std::move(options)), tokens_(options_.credentials, options_.retry, options_.verify_tls) {
  while (!options_.endpoint.empty() && options_.endpoint.back() == '/') options_.endpoint.pop_back();
  options_.chunk_size = std::max(kChunkGranularity, options_.chunk_size / kChunkGranularity * kChunkGranularity);
}

Client::Reply Client::attempt(const Call& call) {
  http::Request req;
  req.method = call.method;
  req.url = call.url;
  req.body = call.body;
  req.headers = call.headers;
  req.verify_tls = options_.verify_tls;
  req.stall_timeout_s = options_.stall_timeout_s;
  if (const std::string token = tokens_.token(); !token.empty())
    req.headers.emplace_back("Authorization", "Bearer " + token);
  Reply reply;
  static_cast<http::Response&>(reply) = http::shared_client().perform(req);
  ++requests_sent_;
  return reply;
}

void Client::fail(const Call& call, const Reply& reply, const std::string& failure, const std::string& gave_up) {
  std::string msg = object_url(call.bucket, call.object) + ": " + call.op + " (" + call.method + " " +
                    redact(call.url) + ") failed: " + failure + gave_up;
  if (reply.status == 401 || reply.status == 403) msg += credentials_text(tokens_.credentials());
  const ServiceError se = reply.transport_failed ? ServiceError{} : parse_error(reply.status, reply.body);
  throw fs::StorageError(msg, reply.status, se.code);
}

Client::Reply Client::send(const Call& call) {
  retry::Backoff backoff(options_.retry);
  bool refreshed = false;
  for (;;) {
    Reply r = attempt(call);
    if (!r.transport_failed &&
        ((r.status >= 200 && r.status < 300) ||
         std::find(call.ok_statuses.begin(), call.ok_statuses.end(), r.status) != call.ok_statuses.end()))
      return r;
    // A rejected token (revoked, or expired early) is fetched again, once.
    if (!r.transport_failed && r.status == 401 && !refreshed &&
        tokens_.credentials().kind != Credentials::Kind::kNone) {
      refreshed = true;
      tokens_.invalidate();
      continue;
    }
    ServiceError se;
    bool retry = false;
    const std::string failure = describe(r, &se, &retry);
    if (retry &&
        backoff.again(object_url(call.bucket, call.object) + ": " + call.op + " " + call.method + ": " + failure))
      continue;
    fail(call, r, failure, retry ? backoff.gave_up() : "");
  }
}

std::string Client::download(const std::string& bucket, const std::string& object, uint64_t offset,
                             std::optional<uint64_t> n, std::optional<uint64_t>* object_size,
                             std::optional<uint32_t>* object_crc32c) {
  const bool whole = offset == 0 && !n;
  const std::string media =
      options_.endpoint + "/storage/v1/b/" + url_encode(bucket) + "/o/" + url_encode(object) + "?alt=media";
  std::string out;  // bytes from `offset` received so far
  int64_t generation = 0;
  std::optional<uint64_t> total;  // the object's size
  std::optional<uint32_t> crc;    // of the whole object, from x-goog-hash
  retry::Backoff backoff(options_.retry);
  const std::string what = object_url(bucket, object);
  Call call{whole ? "read" : "read range", "GET", "", bucket, object};
  for (;;) {
    const uint64_t start = offset + out.size();
    const bool ranged = start > 0 || n.has_value();
    // A resumed read asks for the generation it began on.
    call.url = media + (generation ? "&ifGenerationMatch=" + std::to_string(generation) : "");
    // Stored bytes as they are: without this GCS gunzips a gzip-encoded object and ignores Range.
    call.headers = {{"Accept-Encoding", "gzip"}};
    if (ranged)
      call.headers.emplace_back(
          "Range", "bytes=" + std::to_string(start) + "-" + (n ? std::to_string(offset + *n - 1) : std::string()));
    Reply r = attempt(call);
    if (!r.transport_failed && r.status == 416 && out.empty()) return "";
    if (!r.transport_failed && r.status == 401 && tokens_.credentials().kind != Credentials::Kind::kNone &&
        backoff.attempts() == 1) {
      tokens_.invalidate();
      if (backoff.again(what + ": read: HTTP 401, fetching a new access token")) continue;
    }
    if (!r.transport_failed && r.status == 412 && generation) {
      // The object was replaced between two parts of this read: begin again on the new one.
      if (whole && backoff.again(what + ": the object changed while it was read")) {
        out.clear();
        generation = 0;
        total.reset();
        crc.reset();
        continue;
      }
      fail(call, r, "the object changed while it was read (HTTP 412)", "");
    }
    std::string failure;
    bool retry = false;
    if (r.status == 200 || r.status == 206) {
      if (!generation) {
        const auto g = r.headers.find("x-goog-generation");
        if (g != r.headers.end()) generation = std::strtoll(g->second.c_str(), nullptr, 10);
      }
      if (whole && !crc) crc = crc32c_from_hash_header(r.headers);
      if (r.status == 206) {
        const auto cr = r.headers.find("content-range");  // "bytes 10-19/100"
        uint64_t first = start;
        if (cr != r.headers.end()) {
          const size_t sp = cr->second.find(' '), slash = cr->second.find('/');
          if (sp != std::string::npos) first = std::strtoull(cr->second.c_str() + sp + 1, nullptr, 10);
          if (slash != std::string::npos && cr->second.compare(slash + 1, 1, "*") != 0)
            total = std::strtoull(cr->second.c_str() + slash + 1, nullptr, 10);
        }
        if (first != start)
          throw fs::StorageError(
              what + ": read: asked for bytes from " + std::to_string(start) + ", the server sent " + cr->second,
              r.status);
        out += r.body;
      } else {
        // The whole object from byte 0 (also from a server that ignored Range).
        const auto stored = r.headers.find("x-goog-stored-content-length");
        const auto length = r.headers.find("content-length");
        if (stored != r.headers.end()) total = std::strtoull(stored->second.c_str(), nullptr, 10);
        else if (length != r.headers.end() && !r.transport_failed)
          total = std::strtoull(length->second.c_str(), nullptr, 10);
        if (r.body.size() > start) out += r.body.substr(start);
      }
      if (r.transport_failed) {
        failure = r.transport_error + " after " + std::to_string(r.body.size()) + " bytes of the body";
        retry = r.transport_retryable;
      } else {
        // A body that ended cleanly but short of the object (a server closing early) is resumed.
        const uint64_t want_end = n ? std::min(offset + *n, total.value_or(offset + *n)) : total.value_or(0);
        if (offset + out.size() >= want_end) break;
        failure = "the body ended after " + std::to_string(offset + out.size()) + " of " + std::to_string(want_end) +
                  " bytes";
        retry = true;
      }
    } else {
      ServiceError se;
      failure = describe(r, &se, &retry);
    }
    if (retry && backoff.again(what + ": read GET: " + failure)) continue;
    fail(call, r, failure, retry ? backoff.gave_up() : "");
  }
  if (n && out.size() > *n) out.resize(*n);
  *object_size = total;
  *object_crc32c = crc;
  return out;
}

std::string Client::get(const std::string& bucket, const std::string& object) {
  // The bytes are checked against the object's size and crc32c and read again on a mismatch: a body
  // cut at a clean boundary, or damaged on the way.
  retry::Backoff backoff(options_.retry);
  for (;;) {
    std::optional<uint64_t> size;
    std::optional<uint32_t> crc;
    const std::string out = download(bucket, object, 0, std::nullopt, &size, &crc);
    std::string mismatch;
    if (size && out.size() != *size)
      mismatch = std::to_string(out.size()) + " bytes received, the object has " + std::to_string(*size);
    else if (crc && *crc != crc32c::value(out.data(), out.size()))
      mismatch = "the bytes received do not match the object's crc32c (x-goog-hash)";
    if (mismatch.empty()) return out;
    const std::string what = object_url(bucket, object) + ": read: " + mismatch;
    if (!backoff.again(what)) throw fs::StorageError(what + backoff.gave_up(), 200, "dataLoss");
  }
}

std::string Client::get_range(const std::string& bucket, const std::string& object, uint64_t offset, uint64_t n) {
  if (n == 0) return "";
  if (n > UINT64_MAX - offset) n = UINT64_MAX - offset;
  std::optional<uint64_t> size;
  std::optional<uint32_t> crc;
  return download(bucket, object, offset, n, &size, &crc);
}

std::optional<ObjectInfo> Client::stat(const std::string& bucket, const std::string& object) {
  Call call{"stat", "GET", options_.endpoint + "/storage/v1/b/" + url_encode(bucket) + "/o/" + url_encode(object),
            bucket, object};
  call.ok_statuses = {404};
  const Reply r = send(call);
  if (r.status == 404) return std::nullopt;
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw fs::StorageError(object_url(bucket, object) + ": stat: the answer is not a JSON object", r.status);
  return object_info(j);
}

void Client::put(const std::string& bucket, const std::string& object, const std::string& data) {
  if (data.size() > options_.resumable_threshold) return put_resumable(bucket, object, data);
  Call call{"write",
            "POST",
            options_.endpoint + "/upload/storage/v1/b/" + url_encode(bucket) +
                "/o?uploadType=media&name=" + url_encode(object),
            bucket,
            object,
            &data};
  call.headers = {{"Content-Type", "application/octet-stream"}};
  for (int attempt = 1;; ++attempt) {
    const Reply r = send(call);
    const std::string mismatch = upload_mismatch(r.body, data);
    if (mismatch.empty()) return;
    if (attempt >= options_.retry.max_attempts)
      throw fs::StorageError(object_url(bucket, object) + ": write: " + mismatch, r.status, "dataLoss");
    spdlog::warn("{}: write: {}; writing it again", object_url(bucket, object), mismatch);
  }
}

void Client::put_resumable(const std::string& bucket, const std::string& object, const std::string& data) {
  const std::string what = object_url(bucket, object);
  const std::string size = std::to_string(data.size());
  const std::string start_body = "{}";
  // A session the service forgot (404/410: expired, or lost) is started again, a few times.
  for (int session = 1;; ++session) {
    Call start{"start resumable upload",
               "POST",
               options_.endpoint + "/upload/storage/v1/b/" + url_encode(bucket) +
                   "/o?uploadType=resumable&name=" + url_encode(object),
               bucket,
               object,
               &start_body};
    start.headers = {{"Content-Type", "application/json; charset=UTF-8"},
                     {"X-Upload-Content-Type", "application/octet-stream"},
                     {"X-Upload-Content-Length", size}};
    const Reply started = send(start);
    const auto location = started.headers.find("location");
    if (location == started.headers.end() || location->second.empty())
      throw fs::StorageError(what +
                                 ": start resumable upload: no Location "
                                 "(session URI) in the answer",
                             started.status);
    const std::string session_uri = location->second;

    uint64_t persisted = 0;  // bytes the service has, as it last said
    bool session_lost = false;
    while (!session_lost) {
      // One chunk, from where the service's persisted bytes end, with its own retry budget.
      const uint64_t chunk_start = persisted;
      const std::string chunk = data.substr(chunk_start, options_.chunk_size);
      const uint64_t chunk_end = chunk_start + chunk.size();
      Call put{"upload bytes " + std::to_string(chunk_start) + "-" + std::to_string(chunk_end - 1),
               "PUT",
               session_uri,
               bucket,
               object,
               &chunk};
      put.headers = {
          {"Content-Range", "bytes " + std::to_string(chunk_start) + "-" + std::to_string(chunk_end - 1) + "/" + size}};
      const std::string empty;
      Call query{"query resumable upload status", "PUT", session_uri, bucket, object, &empty};
      query.headers = {{"Content-Range", "bytes */" + size}};
      retry::Backoff backoff(options_.retry);
      // All bytes persisted but no final answer seen: the status query gives it.
      const Call* next = chunk.empty() ? &query : &put;
      for (;;) {
        const Reply r = attempt(*next);
        if (!r.transport_failed && (r.status == 200 || r.status == 201)) {
          const std::string mismatch = upload_mismatch(r.body, data);
          if (mismatch.empty()) return;
          throw fs::StorageError(what + ": resumable upload: " + mismatch, r.status, "dataLoss");
        }
        if (!r.transport_failed && r.status == 308) {
          // "Range: bytes=0-N" is what the service persisted; none: nothing yet.
          const auto range = r.headers.find("range");
          persisted = 0;
          if (range != r.headers.end()) {
            const size_t dash = range->second.find('-');
            if (dash != std::string::npos) persisted = std::strtoull(range->second.c_str() + dash + 1, nullptr, 10) + 1;
          }
          if (persisted > data.size())
            throw fs::StorageError(what + ": resumable upload: the service reports " + std::to_string(persisted) +
                                   " bytes persisted of " + size);
          if (persisted != chunk_start) break;     // the next chunk begins where the service's bytes end
          if (next == &query && !chunk.empty()) {  // none of the chunk arrived: send it again
            next = &put;
            continue;
          }
          if (!backoff.again(what + ": " + next->op + ": no progress, " + std::to_string(persisted) +
                             " bytes persisted"))
            fail(*next, r, "no progress (HTTP 308, " + std::to_string(persisted) + " bytes persisted)",
                 backoff.gave_up());
          next = chunk.empty() ? &query : &put;
          continue;
        }
        if (!r.transport_failed && (r.status == 404 || r.status == 410)) {
          if (session >= 3) fail(*next, r, "the upload session is gone (HTTP " + std::to_string(r.status) + ")", "");
          spdlog::warn(
              "{}: the resumable upload session is gone (HTTP {}); "
              "starting the upload again",
              what, r.status);
          session_lost = true;
          break;
        }
        ServiceError se;
        bool retry = false;
        const std::string failure = describe(r, &se, &retry);
        if (!r.transport_failed && r.status == 401 && tokens_.credentials().kind != Credentials::Kind::kNone) {
          tokens_.invalidate();
          retry = backoff.attempts() == 1;
        }
        if (!retry || !backoff.again(what + ": " + next->op + ": " + failure))
          fail(*next, r, failure, retry ? backoff.gave_up() : "");
        // After a failure, ask how much arrived before sending more.
        next = &query;
      }
    }
  }
}

void Client::remove(const std::string& bucket, const std::string& object) {
  Call call{"remove", "DELETE", options_.endpoint + "/storage/v1/b/" + url_encode(bucket) + "/o/" + url_encode(object),
            bucket, object};
  call.ok_statuses = {404};
  send(call);
}

std::vector<ObjectInfo> Client::list(const std::string& bucket, const std::string& prefix) {
  std::vector<ObjectInfo> out;
  std::string token;
  for (;;) {
    std::string url = options_.endpoint + "/storage/v1/b/" + url_encode(bucket) + "/o?prefix=" + url_encode(prefix) +
                      "&maxResults=" + std::to_string(options_.max_results);
    if (!token.empty()) url += "&pageToken=" + url_encode(token);
    const Reply r = send(Call{"list", "GET", url, bucket, prefix});
    const json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw fs::StorageError(object_url(bucket, prefix) + ": list: the answer is not a JSON object", r.status);
    if (j.contains("items") && j["items"].is_array())
      for (const json& item : j["items"]) out.push_back(object_info(item));
    const std::string next = json_string(j, "nextPageToken");
    if (next.empty()) break;
    if (next == token)
      throw fs::StorageError(object_url(bucket, prefix) + ": list: the service repeated the page token", r.status);
    token = next;
  }
  std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.name < b.name; });
  return out;
}

}  // namespace orchard::gcs
