#include "orchard/data/conversions.h"

#include <spdlog/spdlog.h>

#include <iostream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"

namespace orchard::data {
namespace {

// Writes the encoded image of an Example (image/encoded, or ML-Images' "image") or of an im2txt
// SequenceExample (context image/data; a SequenceExample's context has the field number of an
// Example's features, so it parses as one) to dir/<n>.<ext>.
void dump_image(const std::string& record, const std::string& dir, int64_t n) {
  tensorflow::Example ex;
  if (!ex.ParseFromString(record)) return;
  for (const char* key : {"image/encoded", "image", "image/data"}) {
    auto it = ex.features().feature().find(key);
    if (it == ex.features().feature().end() || it->second.bytes_list().value_size() == 0) continue;
    const std::string& bytes = it->second.bytes_list().value(0);
    const char* ext = sniff_format(bytes) == ImageFormat::kPng ? "png" : "jpg";
    ensure_writable_dir(dir);
    atomic_write_file(dir + "/" + std::to_string(n) + "." + ext, bytes);
    return;
  }
}

}  // namespace

void run_fashion_mnist(const FashionMnistOptions& o) {
  auto [tr, va] = convert_fashion_mnist(o);
  spdlog::info("wrote {} train and {} validation records to {} (+ labels.txt)", tr, va, o.out_dir);
}

void run_image_folder(const ImageFolderOptions& o) {
  auto [tr, va] = convert_image_folder(o);
  spdlog::info("wrote {} train and {} validation records to {} (+ labels.txt)", tr, va, o.out_dir);
  if (va == 0)
    spdlog::warn(
        "no validation records (--validation_fraction {} of {} images): training on {} needs --skip_eval, "
        "or a larger --validation_fraction",
        o.validation_fraction, tr, o.out_dir);
}

void run_coco(const std::string& task, const CocoConvertOptions& o, CocoCaptionOptions cap) {
  if (task == "captioning") {
    if (o.include_masks)
      throw Error("--include_masks writes instance masks into detection records: it needs --task detection");
    cap.annotations = o.annotations;
    cap.image_dir = o.image_dir;
    cap.out_dir = o.out_dir;
    cap.num_shards = o.num_shards;
    cap.prefix = o.prefix;
    cap.limit = o.limit;
    const auto r = convert_coco_captions(cap);
    spdlog::info(
        "wrote {} caption records of {} images to {}/{}-*; vocabulary {} words{} ({} caption words are "
        "<UNK>)",
        r.captions, r.images, o.out_dir, o.prefix, r.vocab_size,
        cap.vocab_file.empty() ? " (word_counts.txt)" : " from " + cap.vocab_file, r.unknown_words);
    return;
  }
  if (task != "detection") throw Error("--task must be detection or captioning, not '" + task + "'");
  const auto r = convert_coco_detection(o);
  spdlog::info(
      "wrote {} images with {} boxes{} ({} crowd; {} empty or outside the image skipped) to {}/{}-*; "
      "label_map.pbtxt has ids up to {} (model.ssd.num_classes)",
      r.images, r.boxes, o.include_masks ? " and their masks" : "", r.crowd, r.skipped_boxes, o.out_dir, o.prefix,
      r.max_category_id);
}

void run_voc(const VocConvertOptions& o) {
  const auto r = convert_voc(o);
  spdlog::info("wrote {} images with {} boxes{} to {}; labels from {}", r.images, r.boxes,
               o.ignore_difficult_instances ? " (" + std::to_string(r.difficult_skipped) + " difficult left out)"
                                            : std::string(),
               o.output_path, r.label_map_path);
}

void run_pets(const PetsConvertOptions& o) {
  const auto r = convert_pets(o);
  spdlog::info(
      "wrote {} train records to {}-*-of-{:05d} and {} validation records to {}-*-of-{:05d}{}; labels "
      "from {}",
      r.train, r.train_prefix, o.num_shards, r.validation, r.validation_prefix, o.num_shards,
      r.missing_xml + r.invalid ? " (" + std::to_string(r.missing_xml) + " without an xml and " +
                                      std::to_string(r.invalid) + " invalid skipped)"
                                : std::string(),
      r.label_map_path);
}

void inspect_records(const RecordInspectOptions& o) {
  TFRecordReaderOptions ropt;
  ropt.skip_corrupt_records = o.skip_corrupt;
  int64_t n = 0, skipped = 0;
  for (const auto& file : expand_file_pattern(o.pattern)) {
    TFRecordReader reader(file, ropt);
    std::string rec;
    while ((o.limit <= 0 || n < o.limit) && reader.next(&rec)) {
      try {
        std::cout << record_to_json(rec) << "\n";
        if (!o.dump_images.empty()) dump_image(rec, o.dump_images, n);
      } catch (const Error& e) {
        throw DataError(where(file, reader.records_read() - 1, -1, e.what()));
      }
      ++n;
    }
    skipped += reader.skipped();
    if (o.limit > 0 && n >= o.limit) break;
  }
  std::cout.flush();
  if (skipped) spdlog::warn("skipped {} corrupt records", skipped);
}

}  // namespace orchard::data
