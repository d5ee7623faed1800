// orchard data fashion-mnist|images|shapes|coco|voc|pets|inspect
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>

#include "orchard/cli/commands.h"
#include "orchard/core/files.h"
#include "orchard/data/conversions.h"
#include "orchard/data/shapes.h"
#include "orchard/detect/config/shapes_config.h"

namespace stdfs = std::filesystem;

namespace orchard::cli {

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
    c->callback([o] { data::run_fashion_mnist(*o); });
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
    c->callback([o] { data::run_image_folder(*o); });
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
        atomic_write_file(
            config, detect::shapes_pipeline_config(
                        is_local_path(o->out_dir) ? stdfs::absolute(local_path(o->out_dir)).lexically_normal().string()
                                                  : o->out_dir,
                        o->image_size));
        spdlog::info(
            "wrote {} train and {} validation detection records{} to {} (+ label_map.pbtxt); train with: "
            "orchard detect train --pipeline_config_path {} --model_dir MODEL_DIR",
            tr, va, o->include_masks ? " with instance masks" : "", o->out_dir, config);
      } else if (o->task == "captioning") {
        spdlog::info(
            "wrote {} train and {} validation images, 5 caption records each, to {} (+ word_counts.txt); "
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
    c->callback([o, cap, task] { data::run_coco(*task, *o, *cap); });
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
    c->callback([o] { data::run_voc(*o); });
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
    c->callback([o] { data::run_pets(*o); });
  }
  {
    auto o = std::make_shared<data::RecordInspectOptions>();
    auto* c = data->add_subcommand("inspect", "Print each record's features as one JSON line");
    c->add_option("file", o->pattern, "TFRecord file, directory or pattern")->required();
    c->add_option("--limit", o->limit, "Stop after N records (0 = all)");
    c->add_flag("--skip_corrupt_records", o->skip_corrupt, "Skip records with bad CRCs instead of failing");
    c->add_option("--dump_images", o->dump_images,
                  "Also write each record's image/encoded (image, image/data) bytes to DIR/<n>.<jpg|png>");
    c->callback([o] { data::inspect_records(*o); });
  }
}

}  // namespace orchard::cli
