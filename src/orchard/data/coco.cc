#include "orchard/data/coco.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/detection.h"
#include "orchard/data/image.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace orchard::data {

CocoConvertResult convert_coco_detection(const CocoConvertOptions& o) {
  if (o.annotations.empty() || o.image_dir.empty() || o.out_dir.empty())
    throw Error("--annotations, --image_dir and --out_dir are required");
  if (o.num_shards < 1) throw Error("--num_shards must be at least 1");
  json root;
  try {
    root = json::parse(read_file(o.annotations));
  } catch (const json::exception& e) {
    throw DataError(o.annotations + ": not a COCO json (" + e.what() + ")");
  }
  for (const char* key : {"images", "annotations", "categories"})
    if (!root.contains(key) || !root[key].is_array())
      throw DataError(o.annotations + ": no '" + std::string(key) + "' array (is it an instances_*.json?)");

  CocoConvertResult result;
  std::map<int64_t, std::string> categories;
  for (const auto& c : root["categories"]) {
    const int64_t id = c.at("id").get<int64_t>();
    if (id < 1) throw DataError(o.annotations + ": category '" + c.value("name", "") + "' has id " + std::to_string(id) +
                                "; label-map ids start at 1 (0 is the background)");
    categories[id] = c.at("name").get<std::string>();
    result.max_category_id = std::max<int>(result.max_category_id, static_cast<int>(id));
  }
  std::map<int64_t, std::vector<const json*>> by_image;
  for (const auto& a : root["annotations"]) by_image[a.at("image_id").get<int64_t>()].push_back(&a);

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
      const int64_t id = im.at("id").get<int64_t>();
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
        const int64_t category = a->at("category_id").get<int64_t>();
        if (!categories.count(category))
          throw DataError(o.annotations + ": annotation " + std::to_string(a->value("id", int64_t{-1})) +
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
        const bool crowd = a->value("iscrowd", 0) != 0;
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
    label_map += "item {\n  id: " + std::to_string(id) + "\n  name: \"" + name + "\"\n  display_name: \"" + name + "\"\n}\n";
  atomic_write_file((fs::path(o.out_dir) / "label_map.pbtxt").string(), label_map);
  return result;
}

}  // namespace orchard::data
