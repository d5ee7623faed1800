#include "orchard/data/tools.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"

namespace stdfs = std::filesystem;

namespace orchard::data {

const std::vector<std::string> kFashionMnistClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                       "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

void write_shards(const std::string& out_dir, const std::string& prefix, const std::vector<std::string>& records,
                  int num_shards) {
  if (num_shards < 1) throw Error("--num_shards must be at least 1");
  ensure_writable_dir(out_dir);
  const int64_t n = static_cast<int64_t>(records.size());
  for (int s = 0; s < num_shards; ++s) {
    char name[128];
    std::snprintf(name, sizeof name, "%s-%05d-of-%05d", prefix.c_str(), s, num_shards);
    TFRecordWriter w(join_path(out_dir, name));
    for (int64_t i = n * s / num_shards; i < n * (s + 1) / num_shards; ++i) w.write(records[static_cast<size_t>(i)]);
    w.close();
  }
}

namespace {

std::string read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(path + ": cannot open (install Debian's dataset-fashion-mnist)");
  std::string out;
  char buf[1 << 16];
  int r;
  while ((r = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(r));
  gzclose(f);
  if (r < 0) throw DataError(path + ": corrupt gzip data");
  return out;
}

uint32_t be32(const std::string& s, size_t off) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[off])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[off + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[off + 2])) << 8) | static_cast<uint8_t>(s[off + 3]);
}

std::string image_record(const std::string& encoded, const std::string& format, int height, int width, int channels,
                         int64_t label, const std::string& text, const std::string& filename) {
  tensorflow::Example ex;
  auto* f = ex.mutable_features();
  set_bytes(f, "image/encoded", encoded);
  set_bytes(f, "image/format", format == "png" ? "PNG" : "JPEG");
  set_int64s(f, "image/class/label", {label});
  set_bytes(f, "image/class/text", text);
  set_int64s(f, "image/height", {height});
  set_int64s(f, "image/width", {width});
  set_int64s(f, "image/channels", {channels});
  set_bytes(f, "image/colorspace", channels == 1 ? "Grayscale" : "RGB");
  set_bytes(f, "image/filename", filename);
  return serialize_deterministic(ex);
}

std::vector<std::string> convert_split(const FashionMnistOptions& o, const std::string& split) {
  const std::string images_path = o.source_dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = o.source_dir + "/" + split + "-labels-idx1-ubyte.gz";
  const std::string images = read_gz(images_path), labels = read_gz(labels_path);
  if (images.size() < 16 || be32(images, 0) != 2051) throw DataError(images_path + ": not an idx3 image file");
  if (labels.size() < 8 || be32(labels, 0) != 2049) throw DataError(labels_path + ": not an idx1 label file");
  int64_t n = be32(images, 4);
  const int rows = static_cast<int>(be32(images, 8)), cols = static_cast<int>(be32(images, 12));
  if (static_cast<int64_t>(be32(labels, 4)) != n) throw DataError(labels_path + ": label count differs from images");
  if (images.size() < 16 + static_cast<size_t>(n) * rows * cols) throw DataError(images_path + ": truncated");
  if (o.limit > 0) n = std::min(n, o.limit);
  std::vector<std::string> records(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto* px = reinterpret_cast<const uint8_t*>(images.data() + 16 + i * rows * cols);
    const int label = static_cast<uint8_t>(labels[8 + i]);
    if (label >= 10)
      throw DataError(labels_path + ": record " + std::to_string(i) + ": label " + std::to_string(label));
    const std::string enc = o.format == "png" ? encode_gray_png(px, rows, cols) : encode_gray_jpeg(px, rows, cols, 95);
    records[static_cast<size_t>(i)] =
        image_record(enc, o.format, rows, cols, 1, label + 1, kFashionMnistClasses[static_cast<size_t>(label)],
                     split + "/" + std::to_string(i));
  }
  return records;
}

void write_labels(const std::string& out_dir, const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += n + "\n";
  atomic_write_file(join_path(out_dir, "labels.txt"), s);
}

// A detection data set's folders are not classes: PASCAL VOC's Annotations/ with JPEGImages/ or
// ImageSets/ (in input_dir, or in a VOCdevkit's year folders), or the Oxford-IIIT Pets'
// images/ and annotations/ (with xmls/) would each become a "class" of a meaningless set.
void refuse_detection_layouts(const std::string& input_dir) {
  std::error_code ec;
  const auto is_voc = [&](const stdfs::path& dir) {
    return stdfs::is_directory(dir / "Annotations", ec) &&
           (stdfs::is_directory(dir / "JPEGImages", ec) || stdfs::is_directory(dir / "ImageSets", ec));
  };
  const stdfs::path root(input_dir);
  if (is_voc(root)) {
    stdfs::path year = stdfs::absolute(root).lexically_normal();
    if (year.filename().empty()) year = year.parent_path();  // a trailing slash
    throw Error(input_dir +
                " is a PASCAL VOC folder (Annotations/, JPEGImages/), not one folder per class: use "
                "orchard data voc --data_dir " +
                year.parent_path().string() + " --year " + year.filename().string());
  }
  for (const auto& e : stdfs::directory_iterator(root, ec))
    if (e.is_directory(ec) && is_voc(e.path()))
      throw Error(input_dir + " is a PASCAL VOC devkit (" + e.path().filename().string() +
                  "/Annotations, JPEGImages), not one folder per class: use orchard data voc --data_dir " + input_dir);
  if (stdfs::is_directory(root / "images", ec) && stdfs::is_directory(root / "annotations" / "xmls", ec))
    throw Error(input_dir +
                " is an Oxford-IIIT Pets folder (images/, annotations/xmls/), not one folder per class: use "
                "orchard data pets --data_dir " +
                input_dir);
}

}  // namespace

std::pair<int64_t, int64_t> convert_fashion_mnist(const FashionMnistOptions& o) {
  if (o.format != "png" && o.format != "jpeg") throw Error("--format must be png or jpeg, not '" + o.format + "'");
  ensure_writable_dir(o.out_dir);
  const auto train = convert_split(o, "train");
  write_shards(o.out_dir, "train", train, o.train_shards);
  const auto val = convert_split(o, "t10k");
  write_shards(o.out_dir, "validation", val, o.validation_shards);
  write_labels(o.out_dir, kFashionMnistClasses);
  return {static_cast<int64_t>(train.size()), static_cast<int64_t>(val.size())};
}

std::pair<int64_t, int64_t> convert_image_folder(const ImageFolderOptions& o) {
  std::error_code ec;
  if (!stdfs::is_directory(o.input_dir, ec)) throw Error(o.input_dir + ": not a directory");
  refuse_detection_layouts(o.input_dir);
  if (o.validation_fraction < 0 || o.validation_fraction >= 1) throw Error("--validation_fraction must be in [0, 1)");
  std::vector<std::string> classes;
  for (const auto& e : stdfs::directory_iterator(o.input_dir))
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) throw Error(o.input_dir + ": no class folders (expected input_dir/<class>/<image>)");
  struct Item {
    std::string path;
    int64_t label;
  };
  std::vector<Item> items;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& e : stdfs::directory_iterator(stdfs::path(o.input_dir) / classes[c])) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
      if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".png")) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) items.push_back({f, static_cast<int64_t>(c) + 1});
  }
  if (items.empty()) throw Error(o.input_dir + ": no .jpg/.jpeg/.png images found");
  std::mt19937_64 rng(o.seed);
  std::shuffle(items.begin(), items.end(), rng);
  const size_t n_val = static_cast<size_t>(items.size() * o.validation_fraction);
  std::vector<std::string> train, val;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string bytes = read_file(items[i].path);
    const ImageSize size = image_size(bytes, items[i].path);  // also rejects non-images
    const std::string format = sniff_format(bytes) == ImageFormat::kPng ? "png" : "jpeg";
    const std::string rel = stdfs::relative(items[i].path, o.input_dir).string();
    auto rec = image_record(bytes, format, size.height, size.width, 3, items[i].label,
                            classes[static_cast<size_t>(items[i].label - 1)], rel);
    (i < n_val ? val : train).push_back(std::move(rec));
  }
  write_shards(o.out_dir, "train", train, o.num_shards);
  if (!val.empty()) write_shards(o.out_dir, "validation", val, std::max(1, o.num_shards / 4));
  write_labels(o.out_dir, classes);
  return {static_cast<int64_t>(train.size()), static_cast<int64_t>(val.size())};
}

namespace {

// `s` as a text-format string literal: a name with a quote, a backslash or a newline would
// otherwise end the literal early and leave a label map that does not parse.
std::string text_format_quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char octal[5];
      std::snprintf(octal, sizeof octal, "\\%03o", c);
      out += octal;
    } else {
      out += static_cast<char>(c);  // UTF-8 bytes stay as they are
    }
  }
  return out + "\"";
}

}  // namespace

std::string label_map_text(const std::vector<std::pair<int64_t, std::string>>& items, bool display_names) {
  std::string text;
  for (const auto& [id, name] : items) {
    text += "item {\n  id: " + std::to_string(id) + "\n  name: " + text_format_quoted(name) + "\n";
    if (display_names) text += "  display_name: " + text_format_quoted(name) + "\n";
    text += "}\n";
  }
  return text;
}

void check_label_map_file(const std::string& path, const std::string& text) {
  if (!file_exists(path)) return;
  if (read_file(path) != text)
    throw Error(path +
                " already exists with other classes than this conversion's: records converted now would not "
                "match it; choose another output directory, or remove the file");
}

void write_label_map_file(const std::string& path, const std::string& text) {
  check_label_map_file(path, text);
  if (file_exists(path)) return;  // the same bytes
  atomic_write_file(path, text);
}

void check_no_stale_shards(const std::string& out_dir, const std::string& prefix, int num_shards) {
  if (!dir_exists(out_dir)) return;
  char ours[32];
  std::snprintf(ours, sizeof ours, "%05d", num_shards);
  for (const std::string& file : list_dir(out_dir)) {
    const std::string name = base_name(file);
    // <prefix>-NNNNN-of-MMMMM
    if (name.size() != prefix.size() + 15 || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string tail = name.substr(prefix.size());
    bool shard = tail[0] == '-' && tail.compare(6, 4, "-of-") == 0;
    for (size_t i : {1, 2, 3, 4, 5, 10, 11, 12, 13, 14})
      shard = shard && std::isdigit(static_cast<unsigned char>(tail[i]));
    if (shard && tail.compare(10, 5, ours) != 0)
      throw Error(file + " already exists: " + out_dir + " holds " + prefix +
                  " records of another shard count than --num_shards " + std::to_string(num_shards) +
                  ", which a pattern would read together with the new ones; choose another output directory, or "
                  "remove them");
  }
}

std::vector<std::string> read_labels(const std::string& path) {
  std::vector<std::string> out;
  if (!file_exists(path)) return out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

}  // namespace orchard::data
