#include "orchard/tasks/detect/load_pipeline.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "orchard/core/error.h"

namespace orchard::tasks {

DetectionPipeline load_detection_pipeline(const std::string& config_path, const PipelineLoadOptions& o) {
  DetectionPipeline p;
  p.pipeline = detect::load_pipeline_config(config_path, o.strict, nullptr, o.allow_unknown_fields);
  if (!o.config_override.empty()) {
    // export_inference_graph's text_format.Merge: singular fields replaced, repeated ones appended.
    p.pipeline.MergeFrom(detect::parse_pipeline_config(o.config_override, "--config_override", o.strict, nullptr,
                                                       o.allow_unknown_fields));
    spdlog::info("{}: --config_override merged over it", config_path);
  }
  if (o.train_batch_size < 0) throw Error("--train_batch_size must be positive");
  if (o.train_batch_size > 0) {
    spdlog::info("--train_batch_size {} overrides train_config.batch_size {}", o.train_batch_size,
                 p.pipeline.train_config().batch_size());
    p.pipeline.mutable_train_config()->set_batch_size(static_cast<uint32_t>(o.train_batch_size));
  }
  validate_detection_pipeline(p.pipeline, config_path);
  p.config = detection_config(p.pipeline, o.channels_last);
  return p;
}

void read_label_map(DetectionPipeline* p) {
  std::string path = p->pipeline.train_input_reader().label_map_path();
  if (path.empty() && p->pipeline.eval_input_reader_size() > 0)
    path = p->pipeline.eval_input_reader(0).label_map_path();
  detect::LabelMap map;
  if (!path.empty()) {
    map = detect::load_label_map(path);
    detect::check_label_map(map, static_cast<int>(p->config.num_classes), path);
  }
  use_label_map(p, std::move(map));
}

void use_label_map(DetectionPipeline* p, detect::LabelMap label_map) {
  p->label_map = std::move(label_map);
  p->config.class_names.clear();
  for (int64_t id = 1; id <= p->config.num_classes; ++id)
    p->config.class_names.push_back(p->label_map.display(static_cast<int>(id)));
}

}  // namespace orchard::tasks
