// pipeline.config -> DetectionConfig, with the meta-architectures' parsers (meta_arch/): the one
// place that reads the TF OD API messages (detectron2's from_config step).
#include "orchard/detect/builders/detection_config.h"

#include <algorithm>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/detect/metrics/voc_eval.h"
#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::tasks {
namespace {

// The fields the crop operation messages share (RandomCropImage, SSDRandomCropOperation,
// SSDRandomCropFixedAspectRatioOperation); the aspect ratio range is each one's own.
template <class Op>
data::SsdRandomCropOperation crop_operation(const Op& op) {
  data::SsdRandomCropOperation o;
  o.min_object_covered = op.min_object_covered();
  o.min_area = op.min_area();
  o.max_area = op.max_area();
  o.overlap_thresh = op.overlap_thresh();
  o.clip_boxes = op.clip_boxes();
  o.random_coef = op.random_coef();
  return o;
}

// load_instance_masks of one input reader; masks are read as PNG_MASKS only (mask_type unset
// reads them too: the bench's and the samples' records hold PNGs whatever the proto's default).
bool loads_instance_masks(const object_detection::protos::InputReader& reader, const char* name) {
  if (!reader.load_instance_masks()) return false;
  if (reader.has_mask_type() && reader.mask_type() != object_detection::protos::PNG_MASKS)
    throw Error(std::string(name) + ".mask_type " +
                object_detection::protos::InstanceMaskType_Name(reader.mask_type()) +
                " is not supported: Orchard reads PNG_MASKS (image/object/mask as one PNG per object, as "
                "create_coco_tf_record.py --include_masks writes them)");
  return true;
}

}  // namespace

DetectionConfig detection_config(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                                 bool channels_last) {
  register_builtin_meta_architectures();
  const ParsedModel model = meta_architecture_for(pipeline).parse(pipeline);
  DetectionConfig c;
  c.model = model.config;
  c.num_classes = model.num_classes;
  c.l2_weight = model.l2_weight;
  c.input.height = model.height;
  c.input.width = model.width;
  c.input.keep_aspect_ratio = model.keep_aspect_ratio;
  c.input.channels_last = channels_last;
  c.input.max_boxes = pipeline.train_input_reader().max_number_of_boxes();
  // Training and evaluation share one sample layout: the masks are loaded for both when either
  // input reader asks for them (Orchard reads the first eval_input_reader).
  const bool train_masks = loads_instance_masks(pipeline.train_input_reader(), "train_input_reader");
  const bool eval_masks =
      pipeline.eval_input_reader_size() > 0 && loads_instance_masks(pipeline.eval_input_reader(0), "eval_input_reader");
  c.input.load_instance_masks = train_masks || eval_masks;
  for (const auto& step : pipeline.train_config().data_augmentation_options()) {
    if (step.has_random_horizontal_flip()) {
      c.input.augmentation.random_horizontal_flip = true;
      c.input.augmentation.flip_probability = step.random_horizontal_flip().probability();
    }
    if (step.has_random_crop_image()) {
      const auto& r = step.random_crop_image();
      auto o = crop_operation(r);
      o.min_aspect_ratio = r.min_aspect_ratio();
      o.max_aspect_ratio = r.max_aspect_ratio();
      c.input.augmentation.random_crop_image = {o};
    }
    // ssd_random_crop, and the same with the crop's aspect ratio fixed; without operations the
    // OD API's 7 defaults (min_object_covered = overlap_thresh = 0 .. 1, area 0.1 .. 1,
    // random_coef 0.15).
    if (step.has_ssd_random_crop()) {
      auto& ops = c.input.augmentation.ssd_random_crop;
      ops = step.ssd_random_crop().operations_size() == 0 ? data::default_ssd_random_crop()
                                                          : std::vector<data::SsdRandomCropOperation>{};
      for (const auto& op : step.ssd_random_crop().operations()) {
        ops.push_back(crop_operation(op));
        ops.back().min_aspect_ratio = op.min_aspect_ratio();
        ops.back().max_aspect_ratio = op.max_aspect_ratio();
      }
    }
    if (step.has_ssd_random_crop_fixed_aspect_ratio()) {
      const auto& crop = step.ssd_random_crop_fixed_aspect_ratio();
      auto& ops = c.input.augmentation.ssd_random_crop;
      ops = crop.operations_size() == 0 ? data::default_ssd_random_crop() : std::vector<data::SsdRandomCropOperation>{};
      for (const auto& op : crop.operations()) ops.push_back(crop_operation(op));
      for (auto& o : ops) o.min_aspect_ratio = o.max_aspect_ratio = crop.aspect_ratio();
      c.input.augmentation.crop_to_aspect_ratio = crop.aspect_ratio();
    }
  }
  c.per_category_metrics = pipeline.eval_config().include_metrics_per_category();
  // Sets Orchard does not compute were reported by validate_pipeline_config and are left out.
  std::vector<std::string> sets;
  for (const auto& set : pipeline.eval_config().metrics_set())
    if (set == "coco_detection_metrics" || set == "coco_mask_metrics" || detect::VocMetricsOptions::is_metrics_set(set))
      if (std::find(sets.begin(), sets.end(), set) == sets.end()) sets.push_back(set);
  if (!sets.empty()) c.metrics_sets = sets;
  c.empty_image_labels_mean_all = pipeline.eval_config().image_classes_field_map_empty_to_ones();
  c.num_visualizations = static_cast<int>(pipeline.eval_config().num_visualizations());
  c.visualization_min_score = pipeline.eval_config().min_score_threshold();
  return c;
}

}  // namespace orchard::tasks
