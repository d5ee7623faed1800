#include "orchard/core/gcs_filesystem.h"

namespace orchard::fs {

void split_gs_url(const std::string& url, std::string* bucket, std::string* object) {
  if (url.rfind("gs://", 0) != 0) throw Error(url + ": not a gs:// URL");
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *object = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket->empty()) throw Error(url + ": a gs URL needs a bucket: gs://bucket/object");
}

namespace {
struct Parts {
  std::string bucket, object;
  explicit Parts(const std::string& url) { split_gs_url(url, &bucket, &object); }
};
void need_object(const std::string& url, const Parts& p) {
  if (p.object.empty() || p.object.back() == '/') throw Error(url + ": names a bucket or folder, not an object");
}
}  // namespace

std::string GcsFileSystem::read_file(const std::string& path) {
  Parts p(path);
  need_object(path, p);
  return client_.get(p.bucket, p.object);
}

std::string GcsFileSystem::read_range(const std::string& path, uint64_t offset, uint64_t n) {
  Parts p(path);
  need_object(path, p);
  return client_.get_range(p.bucket, p.object, offset, n);
}

void GcsFileSystem::write_file(const std::string& path, const std::string& contents) {
  Parts p(path);
  need_object(path, p);
  client_.put(p.bucket, p.object, contents);
}

std::optional<FileStat> GcsFileSystem::stat(const std::string& path) {
  Parts p(path);
  if (p.object.empty() || p.object.back() == '/') return std::nullopt;
  const auto info = client_.stat(p.bucket, p.object);
  if (!info) return std::nullopt;
  return FileStat{static_cast<int64_t>(info->size)};
}

std::vector<std::string> GcsFileSystem::list_prefix(const std::string& prefix) {
  Parts p(prefix);
  std::vector<std::string> out;
  for (const auto& o : client_.list(p.bucket, p.object)) out.push_back("gs://" + p.bucket + "/" + o.name);
  return out;
}

void GcsFileSystem::remove(const std::string& path) {
  Parts p(path);
  need_object(path, p);
  client_.remove(p.bucket, p.object);
}

}  // namespace orchard::fs
