#include "orchard/core/s3_sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>

#include "orchard/core/error.h"

namespace orchard::s3 {
namespace {

std::string to_hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Trims the value and collapses runs of spaces into one, as the canonical
// headers want.
std::string canonical_value(const std::string& v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::string sha256_hex(const std::string& data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return to_hex(md, sizeof md);
}

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
            data.size(), md, &len))
    throw Error("HMAC-SHA256 failed (OpenSSL)");
  return std::string(reinterpret_cast<char*>(md), len);
}

std::string uri_encode(const std::string& s, bool keep_slash) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(uri_encode(k, false), uri_encode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

SigV4Result sign_v4(const SigV4Request& request, const SigV4Key& key, const std::string& region,
                    const std::string& service, const std::string& amz_date) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [k, v] : request.headers) headers.emplace_back(lower(k), canonical_value(v));
  std::sort(headers.begin(), headers.end());
  std::string canonical_headers, signed_headers;
  for (size_t i = 0; i < headers.size(); ++i) {
    // Repeated names join their values with commas.
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      canonical_headers.pop_back();
      canonical_headers += "," + headers[i].second + "\n";
      continue;
    }
    canonical_headers += headers[i].first + ":" + headers[i].second + "\n";
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += headers[i].first;
  }
  SigV4Result r;
  r.signed_headers = signed_headers;
  r.canonical_request = request.method + "\n" + (request.path.empty() ? "/" : request.path) + "\n" +
                        canonical_query(request.query) + "\n" + canonical_headers + "\n" + signed_headers + "\n" +
                        request.payload_hash;
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + region + "/" + service + "/aws4_request";
  r.string_to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + sha256_hex(r.canonical_request);
  std::string k = hmac_sha256("AWS4" + key.secret_access_key, date);
  k = hmac_sha256(k, region);
  k = hmac_sha256(k, service);
  k = hmac_sha256(k, "aws4_request");
  const std::string sig = hmac_sha256(k, r.string_to_sign);
  r.signature = to_hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
  r.authorization = "AWS4-HMAC-SHA256 Credential=" + key.access_key_id + "/" + scope +
                    ", SignedHeaders=" + signed_headers + ", Signature=" + r.signature;
  return r;
}

}  // namespace orchard::s3
