// The s3:// file system: s3://bucket/key paths over s3::Client (s3_client.h,
// which documents the configuration, retries and errors). Objects only: there
// are no folders, a "folder" is a key prefix, and list_prefix lists keys
// recursively.
#pragma once

#include <string>

#include "orchard/core/filesystem.h"
#include "orchard/core/s3_client.h"

namespace orchard::fs {

class S3FileSystem : public FileSystem {
 public:
  explicit S3FileSystem(s3::S3Options options) : client_(std::move(options)) {}

  std::string read_file(const std::string& path) override;
  std::string read_range(const std::string& path, uint64_t offset, uint64_t n) override;
  void write_file(const std::string& path, const std::string& contents) override;
  std::optional<FileStat> stat(const std::string& path) override;
  std::vector<std::string> list_prefix(const std::string& prefix) override;
  void remove(const std::string& path) override;

  s3::Client& client() { return client_; }

 private:
  s3::Client client_;
};

// Splits "s3://bucket/key" into bucket and key (key may be empty); throws Error
// without a bucket.
void split_s3_url(const std::string& url, std::string* bucket, std::string* key);

}  // namespace orchard::fs
