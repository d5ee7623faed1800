#include "orchard/data/coco.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/caption.h"
#include "orchard/data/detection.h"
#include "orchard/data/image.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace orchard::data {
namespace {

json read_coco_json(const std::string& path, const std::vector<const char*>& arrays, const char* kind) {
  json root;
  try {
    root = json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw DataError(path + ": not a COCO json (" + e.what() + ")");
  }
  for (const char* key : arrays)
    if (!root.contains(key) || !root[key].is_array())
      throw DataError(path + ": no '" + std::string(key) + "' array (is it " + kind + "?)");
  return root;
}

// An integer field (ids, iscrowd). nlohmann's get<int64_t>() converts a float with a plain cast,
// undefined for one out of range (an id of 1e300): only integers are accepted. The overload with
// `fallback` is for an optional field.
int64_t int_field(const json& object, const char* key, const std::string& path) {
  const json& v = object.at(key);
  if (!v.is_number_integer())
    throw DataError(path + ": '" + key + "' must be an integer, not " + (v.is_number() ? v.dump() : v.type_name()));
  return v.get<int64_t>();
}
int64_t int_field(const json& object, const char* key, const std::string& path, int64_t fallback) {
  return object.contains(key) ? int_field(object, key, path) : fallback;
}

// `s` as a text-format string literal: a category name with a quote, a backslash or a newline
// would otherwise end the literal early and leave a label map that does not parse.
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

// Reading a field of a malformed json (a missing key, a string where a number belongs) throws
// nlohmann's exceptions: they become DataErrors naming the file, like any other problem with it.
template <typename Fn>
auto json_errors_as_data_errors(const std::string& path, Fn&& fn) {
  try {
    return fn();
  } catch (const json::exception& e) {
    throw DataError(path + ": malformed COCO json: " + e.what());
  }
}

CocoCaptionResult captions_to_records(const CocoCaptionOptions& o) {
  if (o.annotations.empty() || o.image_dir.empty() || o.out_dir.empty())
    throw Error("--annotations, --image_dir and --out_dir are required");
  if (o.num_shards < 1) throw Error("--num_shards must be at least 1");
  const json root = read_coco_json(o.annotations, {"images", "annotations"}, "a captions_*.json");
  std::map<int64_t, std::vector<std::vector<std::string>>> captions_of;
  for (const auto& a : root["annotations"]) {
    if (!a.contains("caption") || !a["caption"].is_string())
      throw DataError(o.annotations + ": annotation " + std::to_string(int_field(a, "id", o.annotations, -1)) +
                      " has no 'caption' string (is it a captions_*.json?)");
    captions_of[int_field(a, "image_id", o.annotations)].push_back(caption_tokens(a["caption"].get<std::string>()));
  }
  struct Entry {
    int64_t id;
    std::string file;
    const std::vector<std::vector<std::string>>* captions;
  };
  std::vector<Entry> images;
  for (const auto& im : root["images"]) {
    const int64_t id = int_field(im, "id", o.annotations);
    auto it = captions_of.find(id);
    if (it == captions_of.end()) continue;  // an image without captions teaches nothing
    images.push_back({id, (fs::path(o.image_dir) / im.at("file_name").get<std::string>()).string(), &it->second});
    if (o.limit > 0 && static_cast<int64_t>(images.size()) >= o.limit) break;
  }
  ensure_writable_dir(o.out_dir);

  Vocabulary vocab;
  if (o.vocab_file.empty()) {
    std::vector<std::vector<std::string>> all;
    for (const auto& e : images) all.insert(all.end(), e.captions->begin(), e.captions->end());
    const auto counts = count_words(all, o.min_word_count);
    write_word_counts((fs::path(o.out_dir) / "word_counts.txt").string(), counts);
    vocab = vocabulary_from_counts(counts);
  } else {
    vocab = Vocabulary::load(o.vocab_file);
  }
  CocoCaptionResult result;
  result.images = static_cast<int64_t>(images.size());
  result.vocab_size = vocab.size();

  std::vector<size_t> counts;
  for (const auto& e : images) counts.push_back(e.captions->size());
  const auto pairs = shuffled_caption_pairs(counts, o.seed);
  const int64_t n = static_cast<int64_t>(pairs.size());
  for (int s = 0; s < o.num_shards; ++s) {
    char name[128];
    std::snprintf(name, sizeof name, "%s-%05d-of-%05d", o.prefix.c_str(), s, o.num_shards);
    TFRecordWriter w((fs::path(o.out_dir) / name).string());
    for (int64_t k = n * s / o.num_shards; k < n * (s + 1) / o.num_shards; ++k) {
      const auto& [i, j] = pairs[static_cast<size_t>(k)];
      CaptionExample e;
      e.image_id = images[i].id;
      e.encoded = read_file(images[i].file);
      image_size(e.encoded, images[i].file);  // a clear error now rather than at training time
      e.tokens = (*images[i].captions)[j];
      e.ids = vocab.ids(e.tokens);
      for (int64_t id : e.ids) result.unknown_words += id == vocab.unknown_id();
      w.write(make_caption_example(e));
      ++result.captions;
    }
    w.close();
  }
  return result;
}

CocoConvertResult instances_to_records(const CocoConvertOptions& o) {
  if (o.annotations.empty() || o.image_dir.empty() || o.out_dir.empty())
    throw Error("--annotations, --image_dir and --out_dir are required");
  if (o.num_shards < 1) throw Error("--num_shards must be at least 1");
  json root = read_coco_json(o.annotations, {"images", "annotations", "categories"}, "an instances_*.json");

  CocoConvertResult result;
  std::map<int64_t, std::string> categories;
  for (const auto& c : root["categories"]) {
    const int64_t id = int_field(c, "id", o.annotations);
    if (id < 1) throw DataError(o.annotations + ": category '" + c.value("name", "") + "' has id " + std::to_string(id) +
                                "; label-map ids start at 1 (0 is the background)");
    categories[id] = c.at("name").get<std::string>();
    result.max_category_id = std::max<int>(result.max_category_id, static_cast<int>(id));
  }
  std::map<int64_t, std::vector<const json*>> by_image;
  for (const auto& a : root["annotations"]) by_image[int_field(a, "image_id", o.annotations)].push_back(&a);

  std::vector<const json*> images;
  for (const auto& im : root["images"]) images.push_back(&im);
  if (o.limit > 0 && static_cast<int64_t>(images.size()) > o.limit) images.resize(static_cast<size_t>(o.limit));
  ensure_writable_dir(o.out_dir);

  const int64_t n = static_cast<int64_t>(images.size());
  for (int s = 0; s < o.num_shards; ++s) {
    char name[128];
    std::snprintf(name, sizeof name, "%s-%05d-of-%05d", o.prefix.c_str(), s, o.num_shards);
    TFRecordWriter w((fs::path(o.out_dir) / name).string());
    for (int64_t i = n * s / o.num_shards; i < n * (s + 1) / o.num_shards; ++i) {
      const json& im = *images[static_cast<size_t>(i)];
      const int64_t id = int_field(im, "id", o.annotations);
      const std::string file = (fs::path(o.image_dir) / im.at("file_name").get<std::string>()).string();
      DetectionExample d;
      d.encoded = read_file(file);
      const ImageSize size = image_size(d.encoded, file);
      d.height = size.height;
      d.width = size.width;
      d.source_id = std::to_string(id);
      for (const json* a : by_image[id]) {
        const auto& bbox = a->at("bbox");
        const double x = bbox.at(0).get<double>(), y = bbox.at(1).get<double>();
        const double w = bbox.at(2).get<double>(), h = bbox.at(3).get<double>();
        const int64_t category = int_field(*a, "category_id", o.annotations);
        if (!categories.count(category))
          throw DataError(o.annotations + ": annotation " + std::to_string(int_field(*a, "id", o.annotations, -1)) +
                          " has category_id " + std::to_string(category) + ", which is not in 'categories'");
        // As create_coco_tf_record.py: skip boxes that are empty or leave the image.
        if (w <= 0 || h <= 0 || x + w > size.width || y + h > size.height) {
          ++result.skipped_boxes;
          continue;
        }
        d.boxes.push_back(Box{static_cast<float>(y / size.height), static_cast<float>(x / size.width),
                              static_cast<float>((y + h) / size.height), static_cast<float>((x + w) / size.width)});
        d.classes.push_back(category);
        d.texts.push_back(categories[category]);
        const bool crowd = int_field(*a, "iscrowd", o.annotations, 0) != 0;
        d.crowd.push_back(crowd);
        result.crowd += crowd;
        ++result.boxes;
      }
      w.write(make_detection_example(d, sniff_format(d.encoded) == ImageFormat::kPng ? "png" : "jpeg"));
      ++result.images;
    }
    w.close();
  }
  std::string label_map;
  for (const auto& [id, name] : categories)
    label_map += "item {\n  id: " + std::to_string(id) + "\n  name: " + text_format_quoted(name) +
                 "\n  display_name: " + text_format_quoted(name) + "\n}\n";
  atomic_write_file((fs::path(o.out_dir) / "label_map.pbtxt").string(), label_map);
  return result;
}

}  // namespace

CocoCaptionResult convert_coco_captions(const CocoCaptionOptions& o) {
  return json_errors_as_data_errors(o.annotations, [&] { return captions_to_records(o); });
}

CocoConvertResult convert_coco_detection(const CocoConvertOptions& o) {
  return json_errors_as_data_errors(o.annotations, [&] { return instances_to_records(o); });
}

}  // namespace orchard::data
