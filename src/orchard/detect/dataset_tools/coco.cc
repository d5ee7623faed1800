#include "orchard/detect/dataset_tools/coco.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/caption.h"
#include "orchard/data/detection.h"
#include "orchard/data/image.h"
#include "orchard/data/tools.h"
#include "orchard/detect/metrics/coco_mask.h"

namespace stdfs = std::filesystem;
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

// A polygon's (or a box's) coordinates: numbers only.
std::vector<double> coordinates(const json& list, const std::string& what) {
  std::vector<double> xy;
  if (list.is_array())
    for (const json& v : list)
      if (v.is_number()) xy.push_back(v.get<double>());
  if (!list.is_array() || xy.size() != list.size())
    throw DataError(what + ": a segmentation polygon must be a list of x, y pixel coordinates [x0, y0, x1, y1, ...]");
  return xy;
}

// The run lengths of an annotation's segmentation as pycocotools' frPyObjects reads it (with the
// image's height and width): a list of polygons, each rasterised, merged into one mask (the
// union create_coco_tf_record.py takes with np.amax), or, when the first entry holds exactly 4
// numbers, a list of boxes [x, y, w, h] (frBbox); or an RLE object {size, counts}, `counts` a list
// (uncompressed, as crowd regions are annotated) or COCO's compressed string.
detect::Rle segmentation_rle(const json& seg, int64_t height, int64_t width, const std::string& what) {
  if (seg.is_array()) {
    if (seg.empty()) return detect::Rle{height, width, {static_cast<uint32_t>(height * width)}};  // no pixel
    const bool boxes = seg[0].is_array() && seg[0].size() == 4;
    if (!boxes && !(seg[0].is_array() && seg[0].size() > 4))  // frPyObjects' "input type is not supported"
      throw DataError(what + ": a segmentation's first polygon needs at least 3 points (or 4 numbers: a box)");
    std::vector<detect::Rle> parts;
    for (const json& entry : seg) {
      std::vector<double> xy = coordinates(entry, what);
      if (boxes) {
        if (xy.size() != 4) throw DataError(what + ": a segmentation of boxes must hold [x, y, w, h] each");
        const double x0 = xy[0], y0 = xy[1], x1 = x0 + xy[2], y1 = y0 + xy[3];
        xy = {x0, y0, x0, y1, x1, y1, x1, y0};
      }
      try {
        parts.push_back(detect::rle_from_polygon(xy, height, width));
      } catch (const DataError&) {
        throw;
      } catch (const Error& e) {  // an odd or empty list, a coordinate out of range
        throw DataError(what + ": " + e.what());
      }
    }
    return detect::rle_merge(parts);
  }
  if (!seg.is_object() || !seg.contains("size") || !seg.contains("counts"))
    throw DataError(what + ": 'segmentation' must be a list of polygons or an RLE {\"size\", \"counts\"}");
  const json& size = seg["size"];
  if (!size.is_array() || size.size() != 2 || !size[0].is_number_integer() || !size[1].is_number_integer())
    throw DataError(what + ": an RLE's 'size' must be [height, width]");
  detect::Rle rle;
  rle.h = size[0].get<int64_t>();
  rle.w = size[1].get<int64_t>();
  if (rle.h != height || rle.w != width)
    throw DataError(what + ": the RLE is " + std::to_string(rle.h) + "x" + std::to_string(rle.w) +
                    " but the image is " + std::to_string(height) + "x" + std::to_string(width));
  const json& counts = seg["counts"];
  if (counts.is_string()) return detect::rle_from_string(counts.get<std::string>(), rle.h, rle.w, what);
  if (!counts.is_array()) throw DataError(what + ": an RLE's 'counts' must be a list of run lengths or a string");
  for (const json& c : counts) {
    if (!c.is_number_integer() || c.get<int64_t>() < 0 ||
        c.get<int64_t>() > int64_t{std::numeric_limits<uint32_t>::max()})
      throw DataError(what + ": an RLE's run lengths must be non-negative integers, not " + c.dump());
    rle.counts.push_back(static_cast<uint32_t>(c.get<int64_t>()));
  }
  detect::rle_check(rle, what);  // the runs cover the image exactly
  return rle;
}

// An annotation's instance mask as create_coco_tf_record.py --include_masks writes it: the
// decoded segmentation, a single-channel PNG of 0s and 1s.
std::string segmentation_png(const json& a, int64_t height, int64_t width, const std::string& path) {
  const std::string what = path + ": annotation " + std::to_string(int_field(a, "id", path, -1));
  if (!a.contains("segmentation"))
    throw DataError(what + " has no 'segmentation' (--include_masks makes each annotation's mask from it)");
  std::vector<uint8_t> mask;
  try {
    mask = detect::rle_decode(segmentation_rle(a["segmentation"], height, width, what));
  } catch (const DataError&) {
    throw;
  } catch (const Error& e) {  // rle_from_string's and rle_check's messages name `what`
    throw DataError(e.what());
  }
  return encode_gray_png(mask.data(), static_cast<int>(height), static_cast<int>(width));
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
    images.push_back({id, (stdfs::path(o.image_dir) / im.at("file_name").get<std::string>()).string(), &it->second});
    if (o.limit > 0 && static_cast<int64_t>(images.size()) >= o.limit) break;
  }
  ensure_writable_dir(o.out_dir);

  Vocabulary vocab;
  if (o.vocab_file.empty()) {
    std::vector<std::vector<std::string>> all;
    for (const auto& e : images) all.insert(all.end(), e.captions->begin(), e.captions->end());
    const auto counts = count_words(all, o.min_word_count);
    write_word_counts(join_path(o.out_dir, "word_counts.txt"), counts);
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
    TFRecordWriter w(join_path(o.out_dir, name));
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
    if (id < 1)
      throw DataError(o.annotations + ": category '" + c.value("name", "") + "' has id " + std::to_string(id) +
                      "; label-map ids start at 1 (0 is the background)");
    categories[id] = c.at("name").get<std::string>();
    result.max_category_id = std::max<int>(result.max_category_id, static_cast<int>(id));
  }
  std::map<int64_t, std::vector<const json*>> by_image;
  for (const auto& a : root["annotations"]) by_image[int_field(a, "image_id", o.annotations)].push_back(&a);

  std::vector<const json*> images;
  for (const auto& im : root["images"]) images.push_back(&im);
  if (o.limit > 0 && static_cast<int64_t>(images.size()) > o.limit) images.resize(static_cast<size_t>(o.limit));
  // A second conversion into this out_dir (the validation split beside the training split)
  // shares its label map; one with other categories, or shards of another count, is refused
  // before anything is written.
  const std::string label_map_path = join_path(o.out_dir, "label_map.pbtxt");
  const std::string label_map =
      label_map_text(std::vector<std::pair<int64_t, std::string>>(categories.begin(), categories.end()), true);
  check_label_map_file(label_map_path, label_map);
  check_no_stale_shards(o.out_dir, o.prefix, o.num_shards);
  ensure_writable_dir(o.out_dir);

  const int64_t n = static_cast<int64_t>(images.size());
  for (int s = 0; s < o.num_shards; ++s) {
    char name[128];
    std::snprintf(name, sizeof name, "%s-%05d-of-%05d", o.prefix.c_str(), s, o.num_shards);
    TFRecordWriter w(join_path(o.out_dir, name));
    for (int64_t i = n * s / o.num_shards; i < n * (s + 1) / o.num_shards; ++i) {
      const json& im = *images[static_cast<size_t>(i)];
      const int64_t id = int_field(im, "id", o.annotations);
      const std::string file = (stdfs::path(o.image_dir) / im.at("file_name").get<std::string>()).string();
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
        if (o.include_masks) d.masks.push_back(segmentation_png(*a, size.height, size.width, o.annotations));
        result.crowd += crowd;
        ++result.boxes;
      }
      w.write(make_detection_example(d, sniff_format(d.encoded) == ImageFormat::kPng ? "png" : "jpeg"));
      ++result.images;
    }
    w.close();
  }
  write_label_map_file(label_map_path, label_map);
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
