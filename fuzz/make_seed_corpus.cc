// Writes the fuzz targets' seed corpus (issue 31) with Orchard's own writers, so that every
// target starts from valid inputs of each kind it parses:
//   usage: make_seed_corpus <out_dir> <orchard_source_root>
//   <out_dir>/tfrecord/         shapes shards (multi-label, detection, captioning), an ImageNet-schema
//                               shard from convert_image_folder, a GZIP shard, an empty file
//   <out_dir>/example/          one serialized Example / SequenceExample per file, from those shards
//   <out_dir>/image/            JPEG and PNG (RGB and grayscale) scenes + image_fuzzer's parameter trailer
//   <out_dir>/pipeline_config/  configs/*.config, and label maps written by label_map_to_text
//   <out_dir>/coco_json/        tiny instances and captions json naming coco_json_fuzzer's scratch images
// Small on purpose (about 100 KB): libFuzzer grows its own corpus from these.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/image.h"
#include "orchard/data/shapes.h"
#include "orchard/data/tools.h"
#include "orchard/detect/label_map.h"

namespace {

namespace fs = std::filesystem;
using namespace orchard::data;  // NOLINT: the writers are all in orchard::data

// Matches image_fuzzer's kTrailer: crop fractions y, x, height, width, minimum size, flags, seed.
std::string image_trailer(int variant) {
  const unsigned char t[8] = {32, 48, 160, 200, static_cast<unsigned char>(7 + variant),
                              static_cast<unsigned char>(variant & 3), static_cast<unsigned char>(variant), 0};
  return std::string(reinterpret_cast<const char*>(t), sizeof t);
}

void write(const fs::path& path, const std::string& bytes) { orchard::atomic_write_file(path.string(), bytes); }

Scene scene(uint64_t seed, int size) {
  std::mt19937_64 rng(seed);
  SceneOptions options;
  options.image_size = size;
  options.min_objects = 1;
  options.max_objects = 2;
  return make_scene(rng, options);
}

// The records of every shard in `dir`, each shard also copied into tfrecord/.
std::vector<std::string> take_shards(const fs::path& dir, const fs::path& tfrecord_dir, const std::string& tag) {
  std::vector<std::string> records;
  for (const auto& file : orchard::expand_file_pattern(dir.string())) {
    const std::string name = fs::path(file).filename().string();
    if (name.find("-of-") == std::string::npos) continue;  // labels.txt, label_map.pbtxt, word_counts.txt
    fs::copy_file(file, tfrecord_dir / (tag + "-" + name), fs::copy_options::overwrite_existing);
    orchard::TFRecordReader reader(file);
    std::string record;
    while (reader.next(&record)) records.push_back(record);
  }
  return records;
}

void write_records(const fs::path& tfrecord_dir, const fs::path& example_dir, const fs::path& work) {
  int n = 0;
  auto keep = [&](const std::vector<std::string>& records, const std::string& tag, size_t max) {
    for (size_t i = 0; i < records.size() && i < max; ++i)
      write(example_dir / (tag + "-" + std::to_string(n++)), records[i]);
  };
  // Multi-label (ML-Images schema), detection (OD API schema) and captioning (im2txt
  // SequenceExample) records of 24-pixel scenes, as `orchard data shapes` writes them.
  for (const std::string task : {"multilabel", "detection", "captioning"}) {
    ShapesOptions options;
    options.out_dir = (work / task).string();
    options.task = task;
    options.num_train = 2;
    options.num_validation = 1;
    options.image_size = 24;
    options.train_shards = 1;
    options.validation_shards = 1;
    options.format = task == "detection" ? "png" : "jpeg";
    write_shapes_dataset(options);
    keep(take_shards(options.out_dir, tfrecord_dir, task), task, 2);
  }
  // ImageNet-schema classification records, from a class-per-folder tree.
  const fs::path folders = work / "folders";
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(folders / ("class" + std::to_string(c)));
    const Scene s = scene(100 + c, 20);
    write(folders / ("class" + std::to_string(c)) / "a.jpg", encode_jpeg(s.image, 80));
    write(folders / ("class" + std::to_string(c)) / "b.png", encode_png(s.image));
  }
  ImageFolderOptions imagenet;
  imagenet.input_dir = folders.string();
  imagenet.out_dir = (work / "imagenet").string();
  imagenet.num_shards = 1;
  imagenet.validation_fraction = 0.25;
  convert_image_folder(imagenet);
  const auto records = take_shards(imagenet.out_dir, tfrecord_dir, "imagenet");
  keep(records, "imagenet", 2);

  // A GZIP file of the same records, and the edge cases of framing: empty file, empty record.
  orchard::TFRecordWriter gz((tfrecord_dir / "imagenet.gz").string(), orchard::Compression::kGzip);
  for (const auto& r : records) gz.write(r);
  gz.close();
  write(tfrecord_dir / "empty", "");
  write(tfrecord_dir / "empty-record", orchard::frame_record("") + orchard::frame_record("x"));
}

void write_images(const fs::path& dir) {
  int variant = 0;
  for (int size : {16, 24, 40}) {
    const Scene s = scene(size, size);
    write(dir / ("scene" + std::to_string(size) + ".jpg"), encode_jpeg(s.image, 90) + image_trailer(variant++));
    write(dir / ("scene" + std::to_string(size) + ".png"), encode_png(s.image) + image_trailer(variant++));
    std::vector<uint8_t> gray(static_cast<size_t>(size) * size);
    for (size_t i = 0; i < gray.size(); ++i) gray[i] = s.image.pixels[3 * i + 1];
    write(dir / ("gray" + std::to_string(size) + ".jpg"), encode_gray_jpeg(gray.data(), size, size, 75) +
                                                          image_trailer(variant++));
    write(dir / ("gray" + std::to_string(size) + ".png"), encode_gray_png(gray.data(), size, size) +
                                                          image_trailer(variant++));
  }
  // A non-square one, which the pad-crop and eval paths resize and crop differently.
  Image wide;
  wide.height = 5;
  wide.width = 33;
  wide.pixels.resize(5 * 33 * 3);
  for (size_t i = 0; i < wide.pixels.size(); ++i) wide.pixels[i] = static_cast<uint8_t>(i * 7);
  write(dir / "wide.jpg", encode_jpeg(wide, 60) + image_trailer(variant++));
  write(dir / "wide.png", encode_png(wide) + image_trailer(variant++));
}

void write_configs(const fs::path& dir, const fs::path& source_root) {
  for (const auto& file : orchard::expand_file_pattern((source_root / "configs").string()))
    if (fs::path(file).extension() == ".config") fs::copy_file(file, dir / fs::path(file).filename(),
                                                                fs::copy_options::overwrite_existing);
  orchard::detect::LabelMap map;
  map.items = {{1, "circle", "Circle"}, {2, "square", ""}, {3, "", "triangle"}};
  write(dir / "label_map.pbtxt", orchard::detect::label_map_to_text(map));
  map.items = {{0, "background", ""}, {90, "toothbrush", "toothbrush"}};
  write(dir / "label_map_coco.pbtxt", orchard::detect::label_map_to_text(map));
}

void write_coco(const fs::path& dir) {
  using nlohmann::json;
  // The file names are the scratch images coco_json_fuzzer writes (a 10 x 6 JPEG and PNG).
  const json images = json::array({{{"id", 1}, {"file_name", "tiny.jpg"}, {"height", 6}, {"width", 10}},
                                   {{"id", 2}, {"file_name", "tiny.png"}, {"height", 6}, {"width", 10}}});
  const json instances = {
      {"images", images},
      {"annotations",
       json::array({{{"id", 10}, {"image_id", 1}, {"category_id", 1}, {"bbox", {1, 1, 4, 3}}, {"iscrowd", 0}},
                    {{"id", 11}, {"image_id", 2}, {"category_id", 3}, {"bbox", {0, 0, 10, 6}}, {"iscrowd", 1}},
                    {{"id", 12}, {"image_id", 2}, {"category_id", 1}, {"bbox", {5, 5, 9, 9}}}})},
      {"categories", json::array({{{"id", 1}, {"name", "person"}}, {{"id", 3}, {"name", "car"}}})}};
  write(dir / "instances.json", instances.dump());
  const json captions = {
      {"images", images},
      {"annotations", json::array({{{"id", 20}, {"image_id", 1}, {"caption", "A man's dog, running."}},
                                   {{"id", 21}, {"image_id", 2}, {"caption", "two cars"}}})}};
  write(dir / "captions.json", captions.dump());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <out_dir> <orchard_source_root>\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1], source_root = argv[2];
  try {
    for (const char* target : {"tfrecord", "example", "image", "pipeline_config", "coco_json"})
      fs::create_directories(out / target);
    const fs::path work = out / ".work";
    fs::remove_all(work);
    write_records(out / "tfrecord", out / "example", work);
    fs::remove_all(work);
    write_images(out / "image");
    write_configs(out / "pipeline_config", source_root);
    write_coco(out / "coco_json");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seed_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
