// One file-system interface for every path Orchard reads or writes, chosen by
// the path's scheme as TensorFlow's FileSystem / REGISTER_FILE_SYSTEM and
// Detectron2's PathManager do:
//
//   /abs/path, rel/path, file:///abs/path   the local disk (LocalFileSystem)
//   s3://bucket/key                         S3 and S3-compatible stores (core/s3_filesystem.h)
//   gs://bucket/object                      Google Cloud Storage (core/gcs_filesystem.h)
//   http(s)://...                           not yet: a read-only file system for public files
//
// A path whose scheme no file system is registered for (hdfs://, http:// today)
// is an error naming the scheme, never a local folder called "hdfs:".
//
// What is atomic:
//   - write_file on the local disk writes "<path>.tmp-<pid>", fsyncs it,
//   renames it over the
//     path and fsyncs the folder: a reader sees the old file or the whole new
//     one, also after a crash.
//   - write_file on S3 is one PUT (or a multipart upload above the threshold,
//   completed by
//     one request): S3 makes an object visible whole or not at all, so readers
//     see the old object or the new one, never a part. Two objects are never
//     written atomically together, and there is no rename: to publish a set of
//     objects, write them first and the object that names them (a `checkpoint`
//     state file) last.
//   - write_file on GCS is one media upload (or a resumable upload above the threshold):
//     the object appears whole when its upload finalizes, as on S3.
//   - remove, list and stat are single operations with no transaction around
//   them; on S3 a
//     listing is strongly consistent with the writes that finished before it
//     started.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::fs {

// A storage operation that failed: the message is one line naming the URL, the
// operation and (for object stores) the HTTP status and the service's error
// code.
class StorageError : public Error {
 public:
  StorageError(const std::string& what, long http_status = 0, std::string code = "")
      : Error(what), http_status_(http_status), code_(std::move(code)) {}
  long http_status() const { return http_status_; }
  const std::string& code() const { return code_; }  // "NoSuchKey", "AccessDenied", ...

 private:
  long http_status_;
  std::string code_;
};

struct FileStat {
  int64_t size = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The whole file. Throws StorageError when it is missing or unreadable.
  virtual std::string read_file(const std::string& path) = 0;
  // Up to `n` bytes from `offset`; fewer at the end of the file, none at or
  // past it.
  virtual std::string read_range(const std::string& path, uint64_t offset, uint64_t n) = 0;
  // Replaces the file with `contents` (see the file's header for what is
  // atomic). Local parent folders are created.
  virtual void write_file(const std::string& path, const std::string& contents) = 0;
  // The file's size, or nothing when no file (object) has this exact path.
  virtual std::optional<FileStat> stat(const std::string& path) = 0;
  // Every file whose path starts with `prefix` (a plain string prefix, not a
  // folder: "d/tr" finds "d/train-1" and "d/tr/x"), recursively, sorted, as
  // full paths in the same form as `prefix` (s3://bucket/... for S3).
  virtual std::vector<std::string> list_prefix(const std::string& prefix) = 0;
  // Removes the file; removing one that does not exist is not an error.
  virtual void remove(const std::string& path) = 0;
};

// Reads a file front to back in blocks of `block_size` bytes fetched with
// read_range (ranged GETs on object stores), so a large shard is never held
// whole in memory.
class SequentialReader {
 public:
  SequentialReader(std::string path, uint64_t block_size = 8u << 20);
  // Copies up to n bytes into out; returns how many (0 at the end).
  size_t read(char* out, size_t n);
  uint64_t position() const { return position_; }

 private:
  std::string path_;
  FileSystem* fs_;
  uint64_t block_size_;
  uint64_t position_ = 0;     // of the next byte read() returns
  uint64_t block_start_ = 0;  // file offset of block_[0]
  std::string block_;
  bool eof_ = false;
};

// The scheme of a path ("s3" for s3://b/k, "file" for file:///x), "" for a
// plain local path. A path like "gs:/b/k" or "s3:b" (a known object-store
// scheme without "//") is an error, so a mistyped URL never becomes a local
// folder.
std::string scheme_of(const std::string& path);

using Factory = std::function<std::unique_ptr<FileSystem>()>;
// Registers the file system for `scheme` ("" and "file" are the local disk and
// are built in); replaces an earlier registration and destroys its instance, so register at
// start-up, before any path of that scheme is in use. The instance is created on first use.
void register_file_system(const std::string& scheme, Factory factory);
// The file system for `path`'s scheme; throws Error naming the scheme when none
// is registered.
FileSystem& file_system_for(const std::string& path);
// Registered schemes, sorted (for error messages and --help).
std::vector<std::string> registered_schemes();

// Free functions over file_system_for(path).
std::string read_file(const std::string& path);
std::string read_range(const std::string& path, uint64_t offset, uint64_t n);
void write_file(const std::string& path, const std::string& contents);
std::optional<FileStat> stat(const std::string& path);
bool exists(const std::string& path);
std::vector<std::string> list_prefix(const std::string& prefix);
void remove(const std::string& path);

// True when `pattern` has a TensorFlow glob character: * ? [
bool has_glob(const std::string& pattern);
// TensorFlow's GetMatchingPaths: the files matching `pattern` (* ? [...] within
// one path component, as fnmatch with FNM_PATHNAME), found by listing the
// prefix before the first glob character. A pattern without glob characters
// gives itself when it exists. Sorted.
std::vector<std::string> glob(const std::string& pattern);

// Joins a folder and a name with one '/', for local paths and URLs alike.
std::string join(const std::string& dir, const std::string& name);

}  // namespace orchard::fs
