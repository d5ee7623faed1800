// File-system helpers over every path Orchard takes: local paths, file://, s3://, gs:// (the
// file systems of core/filesystem.h, chosen by the path's scheme). TensorFlow-style file
// patterns, atomic writes, and the few folder operations a model_dir needs. On object stores a
// "folder" is a key prefix: it exists when an object lies under it, and creating one is a no-op.
#pragma once

#include <string>
#include <vector>

namespace orchard {

// Expands a pattern the way TF users write them: a comma-separated list of items, each
// a file, a directory (its regular files, not recursive) or a glob with * ? [..]
// (e.g. "train-?????-of-01024"). Result is sorted within each item, items in order,
// duplicates removed. Throws Error naming the item that matched nothing.
// With `images_only`, a directory item gives only its .jpg / .jpeg / .png files (any case),
// so a folder of photos with a notes file beside them can be predicted on; files named
// explicitly or by a glob are kept whatever their name.
std::vector<std::string> expand_file_pattern(const std::string& pattern, bool images_only = false);

// Replaces the file with `contents`, atomically: locally "<path>.tmp-<pid>" is written,
// fsynced and renamed over path; on an object store the object appears whole or not at all.
void atomic_write_file(const std::string& path, const std::string& contents);

// The whole file (an object is downloaded, resuming a broken transfer).
std::string read_file(const std::string& path);

// True for a local path (no scheme, or file://).
bool is_local_path(const std::string& path);
// file:///x -> /x; other paths unchanged (for APIs that only take local paths).
std::string local_path(const std::string& path);
// dir + "/" + name with one slash, for local paths and URLs alike.
std::string join_path(const std::string& dir, const std::string& name);
// The last component ("ckpt-5.pt" of "s3://b/m/ckpt-5.pt") and everything before it.
std::string base_name(const std::string& path);
std::string parent_path(const std::string& path);
// A regular file / an object with exactly this name.
bool file_exists(const std::string& path);
// A local directory, or an object-store prefix with at least one object under "path/".
bool dir_exists(const std::string& path);
// The files directly in `dir` (not in sub-folders), as full paths, sorted.
std::vector<std::string> list_dir(const std::string& dir);
// The names of the entries directly in `dir`: files and sub-folders (object-store prefixes).
std::vector<std::string> list_dir_names(const std::string& dir);
// Removes a file (missing is not an error).
void remove_file(const std::string& path);
// Removes a folder and everything in it (on object stores: every object under "dir/");
// returns how many files were removed.
int remove_tree(const std::string& dir);

// A local file with the contents of `path`, for readers that need a seekable local file (a
// libtorch zip archive): the path itself when it is local, else a download to a temporary file
// that is removed with this object.
class LocalCopy {
 public:
  explicit LocalCopy(const std::string& path);
  ~LocalCopy();
  LocalCopy(const LocalCopy&) = delete;
  LocalCopy& operator=(const LocalCopy&) = delete;
  const std::string& path() const { return local_; }

 private:
  std::string local_;
  bool temporary_ = false;
};

// A local temporary file name ($TMPDIR or /tmp, "orchard-<what>-XXXXXX"), created empty.
std::string make_temporary_file(const std::string& what);

// Creates the directory (and parents); throws Error if it cannot be created or written. On an
// object store there is nothing to create: nothing is checked until the first write.
void ensure_writable_dir(const std::string& dir);

// Throws Error unless `dir` is a writable directory or could be created (its nearest existing
// ancestor is a writable directory); creates nothing, so a job that never writes (an evaluator
// whose checkpoint_dir is misspelt) leaves no empty folder behind.
void check_dir_can_be_written(const std::string& dir);

}  // namespace orchard
