// COCO json loading (issue 31): the input is an annotations json, converted as `orchard data
// coco` converts instances_*.json (detection records + label map) and captions_*.json (im2txt
// records + word_counts.txt); the label map it writes must load. The json's images point into a
// scratch directory holding one tiny JPEG and one tiny PNG; the records go to another scratch
// directory, two shards each.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "fuzz_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/image.h"
#include "orchard/detect/config/label_map.h"
#include "orchard/detect/dataset_tools/coco.h"

using orchard::fuzz::expect_clean;

namespace {

namespace fs = std::filesystem;
using namespace orchard::data;  // NOLINT: every call below is into orchard::data

const std::set<std::string> kImageFiles = {"tiny.jpg", "tiny.png", "missing.jpg"};

struct Dirs {
  std::string images, out;
};

const Dirs& scratch_dirs() {
  static const Dirs dirs = [] {
    Dirs d{orchard::fuzz::scratch_path("coco-images"), orchard::fuzz::scratch_path("coco-out")};
    fs::create_directories(d.images);
    fs::create_directories(d.out);
    Image image;
    image.height = 6;
    image.width = 10;
    image.pixels.assign(6 * 10 * 3, 0);
    for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>(i * 37);
    orchard::atomic_write_file(d.images + "/tiny.jpg", encode_jpeg(image));
    orchard::atomic_write_file(d.images + "/tiny.png", encode_png(image));
    return d;
  }();
  return dirs;
}

// A file_name may be any path (fs::path's operator/ lets an absolute one replace the image
// directory), and reading /dev/zero or a large file is no Orchard bug: only the scratch images
// are allowed. A file_name that is not a string still goes through, since the converter must
// reject it cleanly.
bool names_only_scratch_images(const nlohmann::json& root) {
  if (!root.is_object() || !root.contains("images") || !root["images"].is_array()) return true;
  for (const auto& image : root["images"])
    if (image.is_object() && image.contains("file_name") && image["file_name"].is_string() &&
        !kImageFiles.count(image["file_name"].get<std::string>()))
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  orchard::fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Dirs& dirs = scratch_dirs();
  try {
    if (!names_only_scratch_images(nlohmann::json::parse(data, data + size))) return 0;
  } catch (const nlohmann::json::exception&) {
    // not json: the converters must say so cleanly
  }
  const std::string& annotations = orchard::fuzz::scratch_path("coco.json");
  orchard::fuzz::write_scratch(annotations, data, size);

  CocoConvertOptions detection;
  detection.annotations = annotations;
  detection.image_dir = dirs.images;
  detection.out_dir = dirs.out;
  detection.num_shards = 2;
  // The previous input's label map would refuse one with other categories before its
  // annotations are read (a second conversion into an out_dir must agree with its label map).
  std::error_code ec;
  fs::remove(dirs.out + "/label_map.pbtxt", ec);
  bool converted = false;
  expect_clean([&] {
    convert_coco_detection(detection);
    converted = true;
  });
  if (converted) {
    // `orchard detect` reads the label map the converter wrote: it must parse.
    const std::string label_map = dirs.out + "/label_map.pbtxt";
    try {
      orchard::detect::load_label_map(label_map);
    } catch (const orchard::Error& e) {
      std::fprintf(stderr, "the converter wrote a label map Orchard cannot read: %s\n", e.what());
      std::abort();
    }
  }

  CocoCaptionOptions captions;
  captions.annotations = annotations;
  captions.image_dir = dirs.images;
  captions.out_dir = dirs.out;
  captions.num_shards = 2;
  captions.min_word_count = 1;
  expect_clean([&] { convert_coco_captions(captions); });
  return 0;
}
