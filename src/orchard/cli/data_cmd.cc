// orchard data fashion-mnist|images|shapes|coco|voc|pets|inspect
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "orchard/cli/commands.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/detect/dataset_tools/coco.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/detect/dataset_tools/pets.h"
#include "orchard/data/shapes.h"
#include "orchard/data/tools.h"
#include "orchard/detect/dataset_tools/voc.h"
#include "orchard/detect/config/shapes_config.h"

namespace stdfs = std::filesystem;

namespace orchard::cli {

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
    const char* ext = data::sniff_format(bytes) == data::ImageFormat::kPng ? "png" : "jpg";
    ensure_writable_dir(dir);
    atomic_write_file(dir + "/" + std::to_string(n) + "." + ext, bytes);
    return;
  }
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Make and look at TFRecord data sets");
  data->require_subcommand(1);

  {
    auto o = std::make_shared<data::FashionMnistOptions>();
    auto* c = data->add_subcommand("fashion-mnist", "Fashion-MNIST idx files -> ImageNet-schema TFRecord shards");
    c->add_option("--out_dir", o->out_dir, "Output directory")->required();
    c->add_option("--source_dir", o->source_dir, "Directory with the idx .gz files")->capture_default_str();
    c->add_option("--num_shards", o->train_shards, "Number of train shards")->capture_default_str();
    c->add_option("--num_validation_shards", o->validation_shards, "Number of validation shards")
        ->capture_default_str();
    c->add_option("--format", o->format, "Image encoding: png or jpeg")->capture_default_str();
    c->add_option("--limit", o->limit, "Only the first N images of each split (0 = all)");
    c->callback([o] {
      auto [tr, va] = data::convert_fashion_mnist(*o);
      spdlog::info("wrote {} train and {} validation records to {} (+ labels.txt)", tr, va, o->out_dir);
    });
  }
  {
    auto o = std::make_shared<data::ImageFolderOptions>();
    auto* c = data->add_subcommand("images", "A class-per-folder image tree -> ImageNet-schema TFRecord shards");
    c->add_option("--input_dir", o->input_dir, "input_dir/<class>/<image>.{jpg,png}")->required();
    c->add_option("--out_dir", o->out_dir, "Output directory")->required();
    c->add_option("--num_shards", o->num_shards, "Number of train shards")->capture_default_str();
    c->add_option("--validation_fraction", o->validation_fraction, "Fraction held out for validation")
        ->capture_default_str();
    c->add_option("--seed", o->seed, "Shuffle seed")->capture_default_str();
    c->callback([o] {
      auto [tr, va] = data::convert_image_folder(*o);
      spdlog::info("wrote {} train and {} validation records to {} (+ labels.txt)", tr, va, o->out_dir);
      if (va == 0)
        spdlog::warn("no validation records (--validation_fraction {} of {} images): training on {} needs --skip_eval, "
                     "or a larger --validation_fraction",
                     o->validation_fraction, tr, o->out_dir);
    });
  }
  {
    auto o = std::make_shared<data::ShapesOptions>();
    auto* c = data->add_subcommand("shapes", "Synthetic coloured circles, squares and triangles -> TFRecord shards");
    c->add_option("--task", o->task,
                  "Record schema: multilabel (Tencent ML-Images) | detection (TF OD API, + label_map.pbtxt and a "
                  "ready pipeline.config) | captioning (im2txt SequenceExamples, 5 captions per image, + "
                  "word_counts.txt)")
        ->required();
    c->add_option("--out_dir", o->out_dir, "Output directory")->required();
    c->add_option("--num_train", o->num_train, "Number of train images")->capture_default_str();
    c->add_option("--num_validation", o->num_validation, "Number of validation images")->capture_default_str();
    c->add_option("--image_size", o->image_size, "Image side in pixels (square images)")->capture_default_str();
    c->add_option("--image_width", o->image_width,
                  "Image width in pixels, for images image_size high and this wide (default: square)");
    c->add_option("--train_shards", o->train_shards, "Number of train shards")->capture_default_str();
    c->add_option("--validation_shards", o->validation_shards, "Number of validation shards")->capture_default_str();
    c->add_option("--seed", o->seed, "Generator seed (same seed, same bytes)")->capture_default_str();
    c->add_option("--format", o->format, "Image encoding: jpeg or png")->capture_default_str();
    c->add_option("--min_objects", o->min_objects,
                  "Fewest objects per image (default: 1, captioning 2; captions describe 1 or 2)");
    c->add_option("--max_objects", o->max_objects, "Most objects per image (default: 4, captioning 2)");
    c->add_flag("--include_masks", o->include_masks,
                "detection: each object's visible pixels as its instance mask (image/object/mask, one 0/1 PNG per "
                "box; Mask R-CNN's load_instance_masks)");
    c->callback([o] {
      auto [tr, va] = data::write_shapes_dataset(*o);
      if (o->task == "detection") {
        const std::string config = join_path(o->out_dir, "pipeline.config");
        atomic_write_file(config,
                          detect::shapes_pipeline_config(is_local_path(o->out_dir)
                                                             ? stdfs::absolute(local_path(o->out_dir)).lexically_normal().string()
                                                             : o->out_dir,
                                                         o->image_size));
        spdlog::info(
            "wrote {} train and {} validation detection records{} to {} (+ label_map.pbtxt); train with: "
            "orchard detect train --pipeline_config_path {} --model_dir MODEL_DIR",
            tr, va, o->include_masks ? " with instance masks" : "", o->out_dir, config);
      } else if (o->task == "captioning") {
        spdlog::info("wrote {} train and {} validation images, 5 caption records each, to {} (+ word_counts.txt); "
                     "train with: orchard caption train --input_file_pattern '{}/train-*' --train_dir TRAIN_DIR",
                     tr, va, o->out_dir, o->out_dir);
      } else {
        spdlog::info("wrote {} train and {} validation {} records to {} (+ labels.txt)", tr, va, o->task, o->out_dir);
      }
    });
  }
  {
    auto o = std::make_shared<data::CocoConvertOptions>();
    auto cap = std::make_shared<data::CocoCaptionOptions>();
    auto task = std::make_shared<std::string>();
    auto* c = data->add_subcommand(
        "coco", "COCO json + images -> TF OD API detection records (instances) or im2txt caption records (captions)");
    c->add_option("--task", *task, "detection (instances_*.json) | captioning (captions_*.json)")->required();
    c->add_option("--annotations", o->annotations, "instances_*.json or captions_*.json")->required();
    c->add_option("--image_dir", o->image_dir, "Directory of the json's file_name entries")->required();
    c->add_option("--out_dir", o->out_dir, "Output directory")->required();
    c->add_option("--num_shards", o->num_shards, "Number of shards")->capture_default_str();
    c->add_option("--prefix", o->prefix, "Shard name prefix (train, validation, ...)")->capture_default_str();
    c->add_option("--limit", o->limit, "Only the first N images (0 = all)");
    c->add_flag("--include_masks", o->include_masks,
                "detection: each annotation's segmentation as its instance mask (image/object/mask, one 0/1 PNG per "
                "box), as create_coco_tf_record.py --include_masks");
    c->add_option("--vocab_file", cap->vocab_file,
                  "captioning: use this word_counts.txt (e.g. the training set's) instead of building one");
    c->add_option("--min_word_count", cap->min_word_count, "captioning: words seen fewer times become <UNK>")
        ->capture_default_str();
    c->callback([o, cap, task] {
      if (*task == "captioning") {
        if (o->include_masks)
          throw Error("--include_masks writes instance masks into detection records: it needs --task detection");
        cap->annotations = o->annotations;
        cap->image_dir = o->image_dir;
        cap->out_dir = o->out_dir;
        cap->num_shards = o->num_shards;
        cap->prefix = o->prefix;
        cap->limit = o->limit;
        const auto r = data::convert_coco_captions(*cap);
        spdlog::info("wrote {} caption records of {} images to {}/{}-*; vocabulary {} words{} ({} caption words are "
                     "<UNK>)",
                     r.captions, r.images, o->out_dir, o->prefix, r.vocab_size,
                     cap->vocab_file.empty() ? " (word_counts.txt)" : " from " + cap->vocab_file, r.unknown_words);
        return;
      }
      if (*task != "detection") throw Error("--task must be detection or captioning, not '" + *task + "'");
      const auto r = data::convert_coco_detection(*o);
      spdlog::info(
          "wrote {} images with {} boxes{} ({} crowd; {} empty or outside the image skipped) to {}/{}-*; "
          "label_map.pbtxt has ids up to {} (model.ssd.num_classes)",
          r.images, r.boxes, o->include_masks ? " and their masks" : "", r.crowd, r.skipped_boxes, o->out_dir,
          o->prefix, r.max_category_id);
    });
  }
  {
    auto o = std::make_shared<data::VocConvertOptions>();
    auto* c = data->add_subcommand(
        "voc", "PASCAL VOC (VOCdevkit) -> one TF OD API detection record file, as create_pascal_tf_record.py");
    c->add_option("--data_dir", o->data_dir, "The VOCdevkit folder (holding VOC2007/, VOC2012/)")->required();
    c->add_option("--year", o->year, "VOC2007, VOC2012 or merged (both)")->capture_default_str();
    c->add_option("--set", o->set, "train, val, trainval or test (ImageSets/Main/<set>.txt)")->capture_default_str();
    c->add_option("--annotations_dir", o->annotations_dir, "Annotation folder, relative to data_dir/<year>")
        ->capture_default_str();
    c->add_option("--output_path", o->output_path, "The TFRecord file to write")->required();
    c->add_option("--label_map_path", o->label_map_path,
                  "Label map (class names -> ids); default: the 20 PASCAL classes, written as pascal_label_map.pbtxt "
                  "beside --output_path");
    c->add_flag("--ignore_difficult_instances,!--noignore_difficult_instances", o->ignore_difficult_instances,
                "Leave out the objects marked <difficult>1</difficult>");
    c->callback([o] {
      const auto r = data::convert_voc(*o);
      spdlog::info("wrote {} images with {} boxes{} to {}; labels from {}", r.images, r.boxes,
                   o->ignore_difficult_instances ? " (" + std::to_string(r.difficult_skipped) + " difficult left out)"
                                                 : std::string(),
                   o->output_path, r.label_map_path);
    });
  }
  {
    auto o = std::make_shared<data::PetsConvertOptions>();
    auto* c = data->add_subcommand(
        "pets", "Oxford-IIIT Pets -> sharded TF OD API detection records (70/30 split), as create_pet_tf_record.py");
    c->add_option("--data_dir", o->data_dir, "The folder holding images/ and annotations/")->required();
    c->add_option("--output_dir", o->output_dir, "Output directory")->required();
    c->add_option("--label_map_path", o->label_map_path,
                  "Label map (breed names -> ids); default: the 37 breeds, written as output_dir/pet_label_map.pbtxt");
    c->add_flag("--faces_only,!--nofaces_only", o->faces_only,
                "Default true: each pet's head box from the xmls; --faces_only=false (--nofaces_only): the whole pet's "
                "box and mask from the trimap");
    c->add_option("--mask_type", o->mask_type,
                  "Without faces_only: png (one 0/1 PNG per box, what Orchard reads) or numerical (a float list)")
        ->capture_default_str();
    c->add_option("--num_shards", o->num_shards, "Shards per split")->capture_default_str();
    c->callback([o] {
      const auto r = data::convert_pets(*o);
      spdlog::info("wrote {} train records to {}-*-of-{:05d} and {} validation records to {}-*-of-{:05d}{}; labels "
                   "from {}",
                   r.train, r.train_prefix, o->num_shards, r.validation, r.validation_prefix, o->num_shards,
                   r.missing_xml + r.invalid
                       ? " (" + std::to_string(r.missing_xml) + " without an xml and " + std::to_string(r.invalid) +
                             " invalid skipped)"
                       : std::string(),
                   r.label_map_path);
    });
  }
  {
    struct InspectOptions {
      std::string pattern;
      int64_t limit = 0;
      bool skip_corrupt = false;
      std::string dump_images;
    };
    auto o = std::make_shared<InspectOptions>();
    auto* c = data->add_subcommand("inspect", "Print each record's features as one JSON line");
    c->add_option("file", o->pattern, "TFRecord file, directory or pattern")->required();
    c->add_option("--limit", o->limit, "Stop after N records (0 = all)");
    c->add_flag("--skip_corrupt_records", o->skip_corrupt, "Skip records with bad CRCs instead of failing");
    c->add_option("--dump_images", o->dump_images,
                  "Also write each record's image/encoded (image, image/data) bytes to DIR/<n>.<jpg|png>");
    c->callback([o] {
      TFRecordReaderOptions ropt;
      ropt.skip_corrupt_records = o->skip_corrupt;
      int64_t n = 0, skipped = 0;
      for (const auto& file : expand_file_pattern(o->pattern)) {
        TFRecordReader reader(file, ropt);
        std::string rec;
        while ((o->limit <= 0 || n < o->limit) && reader.next(&rec)) {
          try {
            std::cout << data::record_to_json(rec) << "\n";
            if (!o->dump_images.empty()) dump_image(rec, o->dump_images, n);
          } catch (const Error& e) {
            throw DataError(where(file, reader.records_read() - 1, -1, e.what()));
          }
          ++n;
        }
        skipped += reader.skipped();
        if (o->limit > 0 && n >= o->limit) break;
      }
      std::cout.flush();
      if (skipped) spdlog::warn("skipped {} corrupt records", skipped);
    });
  }
}

}  // namespace orchard::cli
