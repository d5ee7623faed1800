// AWS Signature Version 4 (header form) for S3 requests, with OpenSSL's SHA-256
// and HMAC-SHA256. Pure functions of their inputs (the time is passed in), so
// the published AWS test vectors check them exactly
// (tests/core/s3_sigv4_test.cc).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace orchard::s3 {

// Lowercase hex of SHA-256(data).
std::string sha256_hex(const std::string& data);
// Raw 32-byte HMAC-SHA256(key, data).
std::string hmac_sha256(const std::string& key, const std::string& data);

// Percent-encodes every byte except the unreserved A-Z a-z 0-9 - _ . ~ (RFC
// 3986, as SigV4 wants), and '/' too when `keep_slash` (object keys in a path).
std::string uri_encode(const std::string& s, bool keep_slash);

// What SigV4 signs. `path` is the canonical URI, already encoded as it goes on
// the wire (S3 does not encode it a second time). `query` holds raw (unencoded)
// names and values; a bare flag such as "uploads" is {"uploads", ""}. `headers`
// must include host and x-amz-date (and, for S3, x-amz-content-sha256); every
// header given here is signed.
struct SigV4Request {
  std::string method;
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

struct SigV4Key {
  std::string access_key_id;
  std::string secret_access_key;
};

struct SigV4Result {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-date"
  std::string signature;       // lowercase hex
  std::string authorization;   // the Authorization header's value
};

// `amz_date` is "YYYYMMDDTHHMMSSZ" (also the x-amz-date header); the scope's
// date is its first 8 characters.
SigV4Result sign_v4(const SigV4Request& request, const SigV4Key& key, const std::string& region,
                    const std::string& service, const std::string& amz_date);

// The canonical query string: names and values encoded, sorted by name then
// value.
std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace orchard::s3
