// One file-system interface for every path Orchard reads or writes, chosen by
// the path's scheme as TensorFlow's FileSystem / REGISTER_FILE_SYSTEM and
// Detectron2's PathManager do:
//
//   /abs/path, rel/path, file:///abs/path   the local disk (LocalFileSystem)
//   s3://bucket/key                         S3 and S3-compatible stores (core/s3_filesystem.h)
//   gs://bucket/object                      Google Cloud Storage (core/gcs_filesystem.h)
//   http://..., https://...                 read-only public files (core/http_filesystem.h)
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
  // True for the local disk: SequentialReader reads it without threads or
  // read-ahead (the page cache reads ahead).
  virtual bool is_local() const { return false; }
  // False for file systems of files only (http(s)): no listing, so no folders either.
  virtual bool has_listing() const { return true; }
};

// How a remote file is read ahead (PrefetchingReader, SequentialReader,
// ShardPrefetcher). One open reader holds at most `blocks` x `block_size`
// bytes (32 MiB by default) and keeps `blocks` ranged GETs in flight, one
// thread each.
struct PrefetchOptions {
  uint64_t block_size = 8u << 20;
  int blocks = 4;
};

// Reads a remote file front to back with up to `blocks` ranged reads
// (read_range) in flight on background threads, so that a consumer reading at
// most as fast as the bandwidth allows finds the next bytes already there
// instead of waiting a round trip per block. Blocks are requested in order
// from offset 0; the file's size is not asked for: the first block shorter
// than block_size ends the file (up to blocks-1 requests past the end are
// answered empty, e.g. S3's 416). A block that fails after the file system's
// own retries makes read() throw that StorageError when the reader reaches it
// (and again on later calls); failures past the end are ignored.
//
// One consumer thread calls read(). Destroying the reader mid-file cancels
// the in-flight requests (http::CancelScope: within about a second, retry
// backoffs included) and joins its threads; nothing runs after the destructor
// returns.
class PrefetchingReader {
 public:
  explicit PrefetchingReader(std::string path, PrefetchOptions options = {});
  ~PrefetchingReader();
  PrefetchingReader(const PrefetchingReader&) = delete;
  PrefetchingReader& operator=(const PrefetchingReader&) = delete;

  // Copies up to n bytes into out; returns how many (0 at the end). Blocks
  // until the bytes have arrived.
  size_t read(char* out, size_t n);
  uint64_t position() const { return position_; }
  const std::string& path() const { return path_; }
  // Runs `f` once, on a fetching thread (or now, on this one, if it has
  // happened already), when the reader has found the file's end: it will send
  // no more requests, so its bandwidth is free for the next file
  // (ShardPrefetcher). `f` must not destroy this reader.
  void on_end_found(std::function<void()> f);
  // Ranged reads issued so far (tests, benchmarks).
  int64_t requests() const;

 private:
  struct Block;
  struct State;
  void fetch_loop();
  void schedule();  // with the state's mutex held

  std::string path_;
  FileSystem* fs_;
  PrefetchOptions options_;
  uint64_t position_ = 0;  // consumer-side
  std::unique_ptr<State> state_;
};

// Reads a file front to back in blocks of `block_size` bytes, so a large shard
// is never held whole in memory: on the local disk with plain reads on the
// caller's thread; on any other file system (s3://, gs://, http(s)://) through
// a PrefetchingReader that keeps several blocks in flight.
class SequentialReader {
 public:
  SequentialReader(std::string path, uint64_t block_size = 8u << 20);
  SequentialReader(std::string path, PrefetchOptions options);
  // Reads on with a PrefetchingReader started earlier (ShardPrefetcher).
  explicit SequentialReader(std::unique_ptr<PrefetchingReader> prefetching);
  ~SequentialReader();
  SequentialReader(SequentialReader&&) noexcept;
  SequentialReader& operator=(SequentialReader&&) noexcept;

  // Copies up to n bytes into out; returns how many (0 at the end).
  size_t read(char* out, size_t n);
  uint64_t position() const { return prefetching_ ? prefetching_->position() : position_; }
  // Whether this reader reads ahead on background threads (remote files).
  bool prefetching() const { return prefetching_ != nullptr; }

 private:
  std::string path_;
  FileSystem* fs_ = nullptr;
  uint64_t block_size_ = 8u << 20;
  uint64_t position_ = 0;     // of the next byte read() returns
  uint64_t block_start_ = 0;  // file offset of block_[0]
  std::string block_;
  bool eof_ = false;
  std::unique_ptr<PrefetchingReader> prefetching_;  // remote files
};

// Starts downloading the next shard before the current one ends, so a reader
// moving from shard to shard does not wait a round trip at each file's start.
// For the TFRecord reader of a list of shards read in order:
//
//   fs::ShardPrefetcher prefetcher;            // one per reading loop
//   for (size_t i = 0; i < shards.size(); ++i) {
//     const std::string next = i + 1 < shards.size() ? shards[i + 1] : "";
//     fs::SequentialReader reader = prefetcher.open(shards[i], next);
//     while (size_t n = reader.read(buf, sizeof buf)) ...;
//   }
//
// open(path, next) returns a reader of `path` (taking over the blocks already
// fetched for it, if a previous open(..., path) or start(path) began it); as
// soon as that reader has requested its own last block, the first `blocks`
// blocks of `next` start downloading. An interleaving reader (several shards
// open at once) calls open(path, next) for each slot with the shard that slot
// reads after it, or start(path) itself whenever it knows what comes next.
//
// Local paths are read plainly: start() ignores them and open() returns a
// plain SequentialReader. Memory: every open reader holds at most blocks x
// block_size, and at most `max_started` files are held started-but-not-opened
// (the oldest is dropped beyond that), each with at most blocks x block_size.
// A started file that is never opened costs its first blocks' bandwidth and
// nothing else. Thread-safe. The prefetcher may be destroyed before or after
// the readers it returned.
class ShardPrefetcher {
 public:
  explicit ShardPrefetcher(PrefetchOptions options = {}, int max_started = 2);
  ~ShardPrefetcher();
  ShardPrefetcher(const ShardPrefetcher&) = delete;
  ShardPrefetcher& operator=(const ShardPrefetcher&) = delete;

  // A reader of `path`; with `next`, starts `next` when this one's end is found.
  SequentialReader open(const std::string& path, const std::string& next = "");
  // Starts fetching `path`'s first blocks now (nothing for a local path or
  // one already started).
  void start(const std::string& path);
  // Files started and not yet opened (tests).
  std::vector<std::string> started() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
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
