// pipeline.config -> DetectionConfig: the one place that reads the TF OD API's messages for a
// detection task (the model's part by the meta-architecture registered for its `model` oneof
// case, meta_arch/meta_architecture.h); everything downstream takes plain options.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "orchard/data/detection.h"
#include "orchard/detect/meta_arch/meta_architecture.h"

namespace object_detection::protos {
class TrainEvalPipelineConfig;
}

namespace orchard::tasks {

struct DetectionConfig {
  int64_t num_classes = 90;  // without the background
  // The model: pipeline.config's `model` oneof case, parsed by its registered meta-architecture.
  std::shared_ptr<const MetaArchitectureConfig> model;
  data::DetectionInputOptions input;     // training augmentation included
  double l2_weight = 4e-5;               // conv_hyperparams l2_regularizer weight
  std::vector<std::string> class_names;  // index = label-map id - 1
  bool per_category_metrics = false;     // eval_config.include_metrics_per_category
  // eval_config.metrics_set: coco_detection_metrics (the default), pascal_voc_detection_metrics,
  // weighted_pascal_voc_detection_metrics, oid_V2_detection_metrics (=
  // open_images_V2_detection_metrics), oid_challenge_detection_metrics.
  std::vector<std::string> metrics_sets{"coco_detection_metrics"};
  // eval_config.image_classes_field_map_empty_to_ones (oid_challenge_detection_metrics): an eval
  // image without image/class/label has every class verified (true, the proto's default) or only
  // its boxes' classes (false).
  bool empty_image_labels_mean_all = true;
  int num_visualizations = 10;           // eval_config: eval images drawn into TensorBoard
  float visualization_min_score = 0.5f;  // eval_config.min_score_threshold
};

// The typed configuration of a pipeline.config (already validated by
// detect::validate_pipeline_config); the model's part by the meta-architecture registered
// for its `model` oneof case.
DetectionConfig detection_config(const object_detection::protos::TrainEvalPipelineConfig& pipeline, bool channels_last);

}  // namespace orchard::tasks
