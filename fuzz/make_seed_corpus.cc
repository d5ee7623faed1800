// Writes the fuzz targets' seed corpus (issue 31) with Orchard's own writers, so that every
// target starts from valid inputs of each kind it parses:
//   usage: make_seed_corpus <out_dir> <orchard_source_root>
//   <out_dir>/tfrecord/         shapes shards (multi-label, detection, captioning), an ImageNet-schema
//                               shard from convert_image_folder, a GZIP shard, an empty file
//   <out_dir>/example/          one serialized Example / SequenceExample per file, from those shards
//   <out_dir>/image/            JPEG and PNG (RGB and grayscale) scenes + image_fuzzer's parameter trailer
//   <out_dir>/pipeline_config/  configs/*.config, and label maps written by label_map_to_text
//   <out_dir>/coco_json/        tiny instances and captions json naming coco_json_fuzzer's scratch images
//   <out_dir>/tf_checkpoint/    V2 bundles from tf::BundleWriter, tables from build_table, V1 TensorSlice
//                               files, tests/fixtures/tf/ (header + index + data, tf_checkpoint_fuzzer's split)
// Small on purpose (about 100 KB): libFuzzer grows its own corpus from these.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/core/tf_table.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/image.h"
#include "orchard/data/shapes.h"
#include "orchard/data/tools.h"
#include "orchard/detect/config/label_map.h"
#include "orchard/proto/tensorflow/checkpoint.pb.h"

namespace {

namespace fs = std::filesystem;
using namespace orchard::data;  // NOLINT: the writers are all in orchard::data

// Matches image_fuzzer's kTrailer: crop fractions y, x, height, width, minimum size, flags, seed.
std::string image_trailer(int variant) {
  const unsigned char t[8] = {32,
                              48,
                              160,
                              200,
                              static_cast<unsigned char>(7 + variant),
                              static_cast<unsigned char>(variant & 3),
                              static_cast<unsigned char>(variant),
                              0};
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
    write(dir / ("gray" + std::to_string(size) + ".jpg"),
          encode_gray_jpeg(gray.data(), size, size, 75) + image_trailer(variant++));
    write(dir / ("gray" + std::to_string(size) + ".png"),
          encode_gray_png(gray.data(), size, size) + image_trailer(variant++));
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
    if (fs::path(file).extension() == ".config")
      fs::copy_file(file, dir / fs::path(file).filename(), fs::copy_options::overwrite_existing);
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

// tf_checkpoint_fuzzer's input: a 4-byte header (index length | flags << 24), index, data.
// Flags 3: the fuzzer recomputes the table and entry checksums, so mutations get past them.
std::string checkpoint_input(const std::string& index, const std::string& data, uint32_t flags = 3) {
  const uint32_t header = static_cast<uint32_t>(index.size()) | flags << 24;
  return std::string(reinterpret_cast<const char*>(&header), 4) + index + data;
}

template <typename T>
std::string pod_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A bundle written by tf::BundleWriter under `work`, as one fuzzer input.
std::string bundle_input(const fs::path& work, const std::string& name,
                         const std::function<void(orchard::tf::BundleWriter&)>& add) {
  const std::string prefix = (work / name).string();
  orchard::tf::BundleWriter writer(prefix);
  add(writer);
  writer.finish();
  return checkpoint_input(orchard::read_file(prefix + ".index"), orchard::read_file(prefix + ".data-00000-of-00001"));
}

// A V1 TensorSlice file (one table): the metadata entry, then one entry per slice.
std::string v1_file() {
  using namespace tensorflow;
  SavedTensorSlices meta;
  auto add_tensor = [&](const std::string& name, DataType type, std::vector<int64_t> shape) {
    auto* t = meta.mutable_meta()->add_tensor();
    t->set_name(name);
    t->set_type(type);
    for (int64_t d : shape) t->mutable_shape()->add_dim()->set_size(d);
  };
  add_tensor("w", DT_FLOAT, {3, 2});
  add_tensor("step", DT_INT64, {});
  add_tensor("names", DT_STRING, {2});
  add_tensor("h", DT_HALF, {2});
  orchard::tf::TableEntries entries{{"", meta.SerializeAsString()}};
  auto slice = [&](const std::string& key, const std::string& name, std::vector<std::pair<int64_t, int64_t>> extents,
                   const std::function<void(TensorProto*)>& fill) {
    SavedTensorSlices s;
    auto* d = s.mutable_data();
    d->set_name(name);
    for (const auto& [start, length] : extents) {
      auto* e = d->mutable_slice()->add_extent();
      if (length < 0) continue;  // the whole dimension
      e->set_start(start);
      e->set_length(length);
    }
    fill(d->mutable_data());
    entries.emplace_back(key, s.SerializeAsString());
  };
  // w: rows 0-1 as float_val, row 2 as tensor_content (the whole second dimension both times).
  slice("names", "names", {}, [](TensorProto* t) { t->add_string_val("a"), t->add_string_val("bc"); });
  slice("step", "step", {}, [](TensorProto* t) { t->add_int64_val(1000); });
  slice("w0", "w", {{0, 2}, {0, -1}}, [](TensorProto* t) {
    for (int i = 0; i < 4; ++i) t->add_float_val(1.5f * i);
  });
  slice("w1", "w", {{2, 1}, {0, -1}}, [](TensorProto* t) {
    t->set_tensor_content(pod_bytes(std::vector<float>{7, 8}));
  });
  slice("wh", "h", {}, [](TensorProto* t) { t->add_half_val(0x3c00), t->add_half_val(0xc000); });
  return orchard::tf::build_table(entries);
}

void write_checkpoints(const fs::path& dir, const fs::path& source_root, const fs::path& work) {
  namespace tf = orchard::tf;
  write(dir / "bundle-floats", bundle_input(work, "floats", [](tf::BundleWriter& w) {
          w.add("dense/kernel", tf::kFloat, {2, 3}, pod_bytes(std::vector<float>{1, 2, 3, 4, 5, 6}));
          w.add("dense/bias", tf::kFloat, {3}, pod_bytes(std::vector<float>{0.5f, -1, 0}));
        }));
  write(dir / "bundle-mixed", bundle_input(work, "mixed", [](tf::BundleWriter& w) {
          w.add("global_step", tf::kInt64, {}, pod_bytes(std::vector<int64_t>{1000}));
          w.add("d", tf::kDouble, {2}, pod_bytes(std::vector<double>{1.25, -3}));
          w.add("i", tf::kInt32, {1, 2}, pod_bytes(std::vector<int32_t>{-7, 9}));
          w.add("h", tf::kHalf, {2}, pod_bytes(std::vector<uint16_t>{0x3c00, 0x7c00}));
          w.add("bf", tf::kBFloat16, {2}, pod_bytes(std::vector<uint16_t>{0x3f80, 0xc000}));
          w.add("u8", tf::kUInt8, {3}, "\x01\x02\xff");
          w.add("flag", tf::kBool, {}, std::string(1, '\1'));
          w.add("empty", tf::kFloat, {0, 4}, "");
          w.add_string("name", "orchard");
          w.add_string("blank", "");
        }));
  // tf.train.Checkpoint's layout: an object graph naming two of the variables.
  tensorflow::TrackableObjectGraph graph;
  auto* root = graph.add_nodes();
  auto* child = root->add_children();
  child->set_node_id(1);
  child->set_local_name("layer");
  auto* layer = graph.add_nodes();
  for (const char* v : {"kernel", "bias"}) {
    auto* a = layer->add_attributes();
    a->set_name("VARIABLE_VALUE");
    a->set_full_name(std::string("dense/") + v);
    a->set_checkpoint_key(std::string("layer/") + v + "/.ATTRIBUTES/VARIABLE_VALUE");
  }
  auto* back = layer->add_children();  // a cycle back to the root
  back->set_node_id(0);
  back->set_local_name("parent");
  write(dir / "bundle-object-graph", bundle_input(work, "graph", [&](tf::BundleWriter& w) {
          w.add_string("_CHECKPOINTABLE_OBJECT_GRAPH", graph.SerializeAsString());
          w.add("layer/kernel/.ATTRIBUTES/VARIABLE_VALUE", tf::kFloat, {2}, pod_bytes(std::vector<float>{1, 2}));
          w.add("layer/bias/.ATTRIBUTES/VARIABLE_VALUE", tf::kFloat, {1}, pod_bytes(std::vector<float>{3}));
        }));
  // Tables of several blocks (small block size), as the whole input and as the index part.
  tf::TableEntries many;
  for (int i = 0; i < 40; ++i) many.emplace_back("key/" + std::to_string(100 + i), std::string(i % 7, 'v'));
  const std::string table = tf::build_table(many, 128);
  write(dir / "table-blocks", table);
  write(dir / "table-blocks-as-index", checkpoint_input(table, ""));
  write(dir / "table-empty", checkpoint_input(tf::build_table({}), "", 1));
  write(dir / "v1-slices", checkpoint_input(v1_file(), "", 1));
  // The real checkpoints TensorFlow wrote (the estimator's data shard cut to its first 8 KB:
  // the variables past it then fail cleanly, and the inputs stay small).
  const fs::path fixtures = source_root / "tests" / "fixtures" / "tf";
  for (const std::string name : {"half_plus_two_cpu", "half_plus_two_mkl", "half_plus_two_tf2"})
    write(dir / ("tf-" + name),
          checkpoint_input(orchard::read_file((fixtures / name / "variables.index").string()),
                           orchard::read_file((fixtures / name / "variables.data-00000-of-00001").string())));
  write(dir / "tf-estimator",
        checkpoint_input(
            orchard::read_file((fixtures / "estimator_ckpt" / "model.ckpt-1000.index").string()),
            orchard::read_file((fixtures / "estimator_ckpt" / "model.ckpt-1000.data-00000-of-00001").string())
                .substr(0, 8192)));
  write(dir / "tf-ssd-index",
        checkpoint_input(
            orchard::read_file((fixtures / "ssd_mobilenet_v2_coco_2018_03_29" / "model.ckpt.index").string()), "", 1));
  write(
      dir / "tf-v1",
      checkpoint_input(orchard::read_file((fixtures / "half_plus_two_v1" / "export-00000-of-00001").string()), "", 1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <out_dir> <orchard_source_root>\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1], source_root = argv[2];
  try {
    for (const char* target : {"tfrecord", "example", "image", "pipeline_config", "coco_json", "tf_checkpoint"})
      fs::create_directories(out / target);
    const fs::path work = out / ".work";
    fs::remove_all(work);
    write_records(out / "tfrecord", out / "example", work);
    fs::remove_all(work);
    write_images(out / "image");
    write_configs(out / "pipeline_config", source_root);
    write_coco(out / "coco_json");
    write_checkpoints(out / "tf_checkpoint", source_root, work);
    fs::remove_all(work);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seed_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
