// Dataset converters behind `orchard data ...`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orchard::data {

// Writes records into shards "<prefix>-00000-of-0000N" in contiguous ranges.
void write_shards(const std::string& out_dir, const std::string& prefix, const std::vector<std::string>& records,
                  int num_shards);

struct FashionMnistOptions {
  std::string source_dir = "/usr/share/datasets/fashion-mnist";
  std::string out_dir;
  int train_shards = 8;
  int validation_shards = 2;
  std::string format = "png";  // png | jpeg
  int64_t limit = 0;           // > 0: only the first N images of each split (for tests)
};
// Reads the idx files and writes ImageNet-schema shards plus labels.txt.
// Returns {train count, validation count}.
std::pair<int64_t, int64_t> convert_fashion_mnist(const FashionMnistOptions& options);

extern const std::vector<std::string> kFashionMnistClasses;

struct ImageFolderOptions {
  std::string input_dir;  // input_dir/<class>/<image>.{jpg,jpeg,png}
  std::string out_dir;
  int num_shards = 8;
  double validation_fraction = 0.1;
  uint64_t seed = 0;
};
// Converts a class-per-folder tree (classes sorted by name, label = index + 1).
// Returns {train count, validation count}.
std::pair<int64_t, int64_t> convert_image_folder(const ImageFolderOptions& options);

// label_map.pbtxt text (the TF OD API's StringIntLabelMap) for (id, name) items in this order,
// names quoted for text format; with `display_names`, each item's display_name is its name too.
std::string label_map_text(const std::vector<std::pair<int64_t, std::string>>& items, bool display_names);

// Writes a converter's label map to `path`. A file already there with the same bytes is left as
// it is (converting the validation split next to the training split writes the same map); one
// that differs is refused, before anything else is written, naming the file: records made with
// another label map beside it would be read with the wrong class names and ids.
void check_label_map_file(const std::string& path, const std::string& text);
void write_label_map_file(const std::string& path, const std::string& text);

// Refuses (naming one) shards "<prefix>-NNNNN-of-MMMMM" in out_dir with another shard count
// than `num_shards`: a pattern such as <prefix>-* would read the old and the new set together.
// Shards of the same names are a rerun and are overwritten.
void check_no_stale_shards(const std::string& out_dir, const std::string& prefix, int num_shards);

// Reads labels.txt (one class name per line); empty if the file does not exist.
std::vector<std::string> read_labels(const std::string& path);

}  // namespace orchard::data
