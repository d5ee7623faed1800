// A pipeline.config made into what a detection task is built from, in one place for every
// command that reads one (`detect train|eval|export|predict`, `checkpoint inspect
// --pipeline_config_path`): parsed, overridden, validated, resolved into a DetectionConfig, and
// with its label map.
#pragma once

#include <cstdint>
#include <string>

#include "orchard/detect/config/config.h"
#include "orchard/detect/config/label_map.h"
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/detection.h"

namespace orchard::tasks {

struct PipelineLoadOptions {
  bool strict = false;                // fields Orchard does not implement are errors, not warnings
  bool allow_unknown_fields = false;  // fields not in the schema are warnings, not errors
  std::string config_override;        // a text proto merged over the file (singular replaced, repeated appended)
  int64_t train_batch_size = 0;       // > 0: replaces train_config.batch_size; < 0: an error
  bool channels_last = false;
};

struct DetectionPipeline {
  object_detection::protos::TrainEvalPipelineConfig pipeline;
  DetectionConfig config;  // class_names filled by use_label_map
  detect::LabelMap label_map;
};

// load_pipeline_config, --config_override, --train_batch_size, validate_pipeline_config and
// detection_config; the label map is not read (read_label_map).
DetectionPipeline load_detection_pipeline(const std::string& config_path, const PipelineLoadOptions& options);

// The label map the input readers name (train_input_reader's, else the first eval reader's),
// checked against num_classes, and the class names from it ("" path: ids as names).
void read_label_map(DetectionPipeline* p);

// `label_map` as the pipeline's: config.class_names from its display names, ids 1..num_classes.
void use_label_map(DetectionPipeline* p, detect::LabelMap label_map);

}  // namespace orchard::tasks
