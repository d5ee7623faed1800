// File-system helpers: TensorFlow-style file patterns and atomic writes.
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

// Writes `contents` to "<path>.tmp-<pid>", fsyncs it and renames it over path.
void atomic_write_file(const std::string& path, const std::string& contents);

std::string read_file(const std::string& path);

// Creates the directory (and parents); throws Error if it cannot be created or written.
void ensure_writable_dir(const std::string& dir);

// Throws Error unless `dir` is a writable directory or could be created (its nearest existing
// ancestor is a writable directory); creates nothing, so a job that never writes (an evaluator
// whose checkpoint_dir is misspelt) leaves no empty folder behind.
void check_dir_can_be_written(const std::string& dir);

}  // namespace orchard
