// The gs:// file system: gs://bucket/object paths over gcs::Client (gcs_client.h, which documents
// the configuration, credentials, retries and errors). Objects only: there are no folders, a
// "folder" is a name prefix, and list_prefix lists names recursively.
#pragma once

#include <string>

#include "orchard/core/filesystem.h"
#include "orchard/core/gcs_client.h"

namespace orchard::fs {

class GcsFileSystem : public FileSystem {
 public:
  explicit GcsFileSystem(gcs::GcsOptions options) : client_(std::move(options)) {}

  std::string read_file(const std::string& path) override;
  std::string read_range(const std::string& path, uint64_t offset, uint64_t n) override;
  void write_file(const std::string& path, const std::string& contents) override;
  std::optional<FileStat> stat(const std::string& path) override;
  std::vector<std::string> list_prefix(const std::string& prefix) override;
  void remove(const std::string& path) override;

  gcs::Client& client() { return client_; }

 private:
  gcs::Client client_;
};

// Splits "gs://bucket/object" into bucket and object (object may be empty); throws Error without a
// bucket.
void split_gs_url(const std::string& url, std::string* bucket, std::string* object);

}  // namespace orchard::fs
