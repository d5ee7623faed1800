#include "orchard/core/s3_filesystem.h"

namespace orchard::fs {

void split_s3_url(const std::string& url, std::string* bucket, std::string* key) {
  if (url.rfind("s3://", 0) != 0) throw Error(url + ": not an s3:// URL");
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket->empty()) throw Error(url + ": an s3 URL needs a bucket: s3://bucket/key");
}

namespace {
struct Parts {
  std::string bucket, key;
  explicit Parts(const std::string& url) { split_s3_url(url, &bucket, &key); }
};
void need_key(const std::string& url, const Parts& p) {
  if (p.key.empty() || p.key.back() == '/') throw Error(url + ": names a bucket or folder, not an object");
}
}  // namespace

std::string S3FileSystem::read_file(const std::string& path) {
  Parts p(path);
  need_key(path, p);
  return client_.get(p.bucket, p.key);
}

std::string S3FileSystem::read_range(const std::string& path, uint64_t offset, uint64_t n) {
  Parts p(path);
  need_key(path, p);
  return client_.get_range(p.bucket, p.key, offset, n);
}

void S3FileSystem::write_file(const std::string& path, const std::string& contents) {
  Parts p(path);
  need_key(path, p);
  client_.put(p.bucket, p.key, contents);
}

std::optional<FileStat> S3FileSystem::stat(const std::string& path) {
  Parts p(path);
  if (p.key.empty() || p.key.back() == '/') return std::nullopt;
  const auto size = client_.head(p.bucket, p.key);
  if (!size) return std::nullopt;
  return FileStat{static_cast<int64_t>(*size)};
}

std::vector<std::string> S3FileSystem::list_prefix(const std::string& prefix) {
  Parts p(prefix);
  std::vector<std::string> out;
  for (const auto& o : client_.list(p.bucket, p.key)) out.push_back("s3://" + p.bucket + "/" + o.key);
  return out;
}

void S3FileSystem::remove(const std::string& path) {
  Parts p(path);
  need_key(path, p);
  client_.remove(p.bucket, p.key);
}

}  // namespace orchard::fs
