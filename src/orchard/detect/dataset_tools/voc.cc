#include "orchard/detect/dataset_tools/voc.h"

#include <openssl/evp.h>
#include <pugixml.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/detection.h"
#include "orchard/data/image.h"
#include "orchard/data/tools.h"
#include "orchard/detect/config/label_map.h"

namespace stdfs = std::filesystem;

namespace orchard::data {

// clang-format off
const std::vector<std::string> kPascalVocClasses = {
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable", "dog",
    "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor"};
// clang-format on

namespace {

std::string trimmed(const char* text) {
  std::string s = text;
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// The text of `parent`'s child `name`; `where` says which element (for errors).
std::string child_text(const pugi::xml_node& parent, const char* name, const std::string& where, bool required) {
  const pugi::xml_node node = parent.child(name);
  if (!node) {
    if (required) throw DataError(where + " has no <" + name + ">");
    return "";
  }
  return trimmed(node.child_value());
}

// Python's int() and float() of the text, as the OD API converts the xml's fields.
int64_t int_value(const pugi::xml_node& parent, const char* name, const std::string& where, int64_t fallback) {
  if (!parent.child(name)) return fallback;
  const std::string s = child_text(parent, name, where, true);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    throw DataError(where + ": <" + name + "> must be an integer, not '" + s + "'");
  return v;
}

double float_value(const pugi::xml_node& parent, const char* name, const std::string& where) {
  const std::string s = child_text(parent, name, where, true);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    throw DataError(where + ": <" + name + "> must be a number, not '" + s + "'");
  return v;
}

}  // namespace

VocAnnotation parse_voc_annotation(const std::string& xml, const std::string& path) {
  pugi::xml_document doc;
  const pugi::xml_parse_result parsed = doc.load_buffer(xml.data(), xml.size());
  if (!parsed)
    throw DataError(path + ": not an xml file (" + parsed.description() + " at byte " + std::to_string(parsed.offset) +
                    ")");
  const pugi::xml_node root = doc.child("annotation");
  if (!root) throw DataError(path + ": no <annotation> element (is it a PASCAL VOC annotation?)");
  VocAnnotation a;
  a.folder = child_text(root, "folder", path, false);
  a.filename = child_text(root, "filename", path, true);
  if (a.filename.empty()) throw DataError(path + ": <filename> is empty");
  const pugi::xml_node size = root.child("size");
  if (!size) throw DataError(path + " has no <size>");
  a.width = int_value(size, "width", path + ": <size>", -1);
  a.height = int_value(size, "height", path + ": <size>", -1);
  if (a.width < 1 || a.height < 1)
    throw DataError(path + ": <size> needs a positive <width> and <height>, not " + std::to_string(a.width) + "x" +
                    std::to_string(a.height));
  int index = 0;
  for (const pugi::xml_node obj : root.children("object")) {
    const std::string where = path + ": object " + std::to_string(index++);
    VocObject o;
    o.name = child_text(obj, "name", where, true);
    if (o.name.empty()) throw DataError(where + ": <name> is empty");
    if (obj.child("pose")) o.pose = child_text(obj, "pose", where, true);
    o.truncated = int_value(obj, "truncated", where, 0);
    o.difficult = int_value(obj, "difficult", where, 0) != 0;
    if (const pugi::xml_node box = obj.child("bndbox")) {
      const std::string box_where = where + " (" + o.name + "): <bndbox>";
      o.xmin = float_value(box, "xmin", box_where);
      o.ymin = float_value(box, "ymin", box_where);
      o.xmax = float_value(box, "xmax", box_where);
      o.ymax = float_value(box, "ymax", box_where);
      o.has_box = true;
    }
    a.objects.push_back(std::move(o));
  }
  return a;
}

std::map<std::string, int64_t> label_map_ids(const std::string& label_map_path) {
  const detect::LabelMap map = detect::load_label_map(label_map_path);
  std::map<std::string, int64_t> ids;
  for (const auto& item : map.items) {
    if (item.id < 1)
      throw Error(label_map_path + ": item '" + item.name + "' has id " + std::to_string(item.id) +
                  ": label map ids start at 1; 0 is reserved for the background");
    if (item.name.empty()) throw Error(label_map_path + ": item " + std::to_string(item.id) + " has no name");
    ids[item.name] = item.id;  // a repeated name keeps its last id, as get_label_map_dict
  }
  if (ids.empty()) throw Error(label_map_path + ": the label map has no items");
  return ids;
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr)) throw Error("SHA-256 failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

namespace {

// The image ids of one set: the first word of each line (dataset_util.read_examples_list).
std::vector<std::string> read_image_ids(const stdfs::path& main_dir, const std::string& set) {
  stdfs::path list = main_dir / (set + ".txt");
  std::error_code ec;
  if (!stdfs::exists(list, ec)) {
    const stdfs::path aeroplane = main_dir / ("aeroplane_" + set + ".txt");
    if (!stdfs::exists(aeroplane, ec))
      throw DataError(list.string() + ": no such file (nor " + aeroplane.filename().string() +
                      "): --data_dir must be the VOCdevkit folder holding " +
                      main_dir.parent_path().parent_path().filename().string() + "/ImageSets/Main");
    list = aeroplane;
  }
  std::ifstream in(list);
  std::vector<std::string> ids;
  std::string line;
  while (std::getline(in, line)) {
    const std::string id = trimmed(line.c_str());
    if (!id.empty()) ids.push_back(id.substr(0, id.find_first_of(" \t")));
  }
  return ids;
}

}  // namespace

VocConvertResult convert_voc(const VocConvertOptions& o) {
  static const std::vector<std::string> kSets = {"train", "val", "trainval", "test"};
  static const std::vector<std::string> kYears = {"VOC2007", "VOC2012", "merged"};
  if (o.data_dir.empty() || o.output_path.empty()) throw Error("--data_dir and --output_path are required");
  if (std::find(kSets.begin(), kSets.end(), o.set) == kSets.end())
    throw Error("--set must be train, val, trainval or test, not '" + o.set + "'");
  if (std::find(kYears.begin(), kYears.end(), o.year) == kYears.end())
    throw Error("--year must be VOC2007, VOC2012 or merged, not '" + o.year + "'");
  std::error_code ec;
  if (!stdfs::is_directory(o.data_dir, ec))
    throw Error(o.data_dir + ": no such directory (--data_dir: the VOCdevkit folder)");
  const std::vector<std::string> years =
      o.year == "merged" ? std::vector<std::string>{"VOC2007", "VOC2012"} : std::vector<std::string>{o.year};

  VocConvertResult result;
  std::string out_dir = parent_path(o.output_path);
  if (out_dir.empty()) out_dir = ".";
  std::map<std::string, int64_t> ids;
  std::string default_label_map;
  if (o.label_map_path.empty()) {
    result.label_map_path = join_path(out_dir, "pascal_label_map.pbtxt");
    std::vector<std::pair<int64_t, std::string>> items;
    for (size_t i = 0; i < kPascalVocClasses.size(); ++i) {
      items.emplace_back(static_cast<int64_t>(i) + 1, kPascalVocClasses[i]);
      ids[kPascalVocClasses[i]] = static_cast<int64_t>(i) + 1;
    }
    default_label_map = label_map_text(items, false);
    check_label_map_file(result.label_map_path, default_label_map);
  } else {
    result.label_map_path = o.label_map_path;
    ids = label_map_ids(o.label_map_path);
  }

  struct Item {
    std::string year, id;
  };
  std::vector<Item> items;
  for (const auto& year : years)
    for (auto& id : read_image_ids(stdfs::path(o.data_dir) / year / "ImageSets" / "Main", o.set))
      items.push_back({year, std::move(id)});
  ensure_writable_dir(out_dir);

  TFRecordWriter writer(o.output_path);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i % 1000 == 0) spdlog::info("image {} of {}", i, items.size());
    const stdfs::path year_dir = stdfs::path(o.data_dir) / items[i].year;
    const std::string xml_path = (year_dir / o.annotations_dir / (items[i].id + ".xml")).string();
    if (!stdfs::exists(xml_path, ec))
      throw DataError(xml_path + ": no such file (image '" + items[i].id + "' of ImageSets/Main/" + o.set + ")");
    const VocAnnotation a = parse_voc_annotation(read_file(xml_path), xml_path);
    const std::string image_path =
        (stdfs::path(o.data_dir) / (a.folder.empty() ? items[i].year : a.folder) / "JPEGImages" / a.filename).string();
    if (!stdfs::exists(image_path, ec))
      throw DataError(xml_path + ": <filename> " + a.filename + ": " + image_path + ": no such file");
    DetectionExample d;
    d.encoded = read_file(image_path);
    if (sniff_format(d.encoded) != ImageFormat::kJpeg) throw DataError(image_path + ": not a JPEG image");
    const ImageSize size = image_size(d.encoded, image_path);
    if (size.width != a.width || size.height != a.height)
      throw DataError(xml_path + ": <size> is " + std::to_string(a.width) + "x" + std::to_string(a.height) + " but " +
                      image_path + " is " + std::to_string(size.width) + "x" + std::to_string(size.height));
    d.height = size.height;
    d.width = size.width;
    d.source_id = a.filename;
    d.filename = a.filename;
    d.key_sha256 = sha256_hex(d.encoded);
    for (size_t k = 0; k < a.objects.size(); ++k) {
      const VocObject& obj = a.objects[k];
      const std::string where = xml_path + ": object " + std::to_string(k) + " (" + obj.name + ")";
      if (o.ignore_difficult_instances && obj.difficult) {
        ++result.difficult_skipped;
        continue;
      }
      if (!obj.has_box) throw DataError(where + " has no <bndbox>");
      const auto it = ids.find(obj.name);
      if (it == ids.end())
        throw DataError(where + ": class '" + obj.name + "' is not in the label map " + result.label_map_path);
      const Box box{static_cast<float>(obj.ymin / a.height), static_cast<float>(obj.xmin / a.width),
                    static_cast<float>(obj.ymax / a.height), static_cast<float>(obj.xmax / a.width)};
      if (!(box.xmin >= 0 && box.ymin >= 0 && box.xmin <= box.xmax && box.ymin <= box.ymax && box.xmax <= 1 &&
            box.ymax <= 1))
        throw DataError(where + ": <bndbox> " + std::to_string(obj.xmin) + "," + std::to_string(obj.ymin) + " - " +
                        std::to_string(obj.xmax) + "," + std::to_string(obj.ymax) + " is not inside the " +
                        std::to_string(a.width) + "x" + std::to_string(a.height) + " image with min <= max");
      d.boxes.push_back(box);
      d.classes.push_back(it->second);
      d.texts.push_back(obj.name);
      d.difficult.push_back(obj.difficult);
      d.truncated.push_back(obj.truncated);
      d.views.push_back(obj.pose);
      ++result.boxes;
    }
    writer.write(make_detection_example(d, "jpeg"));
    ++result.images;
  }
  writer.close();
  if (!default_label_map.empty()) write_label_map_file(result.label_map_path, default_label_map);
  return result;
}

}  // namespace orchard::data
