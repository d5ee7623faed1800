// The meta-architecture registry and the shipped meta-architectures: one line each. A new one
// adds its folder under tasks/detect/ and its line here (docs/ARCHITECTURE.md, "Adding a
// detection meta-architecture").
#include <utility>

#include "orchard/core/error.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/meta_arch/faster_rcnn.h"
#include "orchard/detect/meta_arch/meta_architecture.h"
#include "orchard/detect/meta_arch/ssd.h"
#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::tasks {
namespace {

std::vector<MetaArchitectureEntry>& entries() {
  static std::vector<MetaArchitectureEntry> list;
  return list;
}

}  // namespace

void register_builtin_meta_architectures() {
  static bool done = false;
  if (done) return;
  done = true;
  register_meta_architecture(ssd_meta_architecture());
  register_meta_architecture(faster_rcnn_meta_architecture());
}

void validate_detection_pipeline(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                                 const std::string& source_name) {
  register_builtin_meta_architectures();
  std::vector<detect::ModelValidator> models;
  for (const auto& e : entries()) models.push_back({e.name, e.validate});
  detect::validate_pipeline_config(pipeline, source_name, models);
}

void parse_image_resizer(const object_detection::protos::ImageResizer& resizer, ParsedModel* parsed) {
  if (resizer.has_keep_aspect_ratio_resizer()) {
    const auto& k = resizer.keep_aspect_ratio_resizer();
    data::KeepAspectRatioResize keep;
    keep.min_dimension = k.min_dimension();
    keep.max_dimension = k.max_dimension();
    keep.pad_to_max_dimension = k.pad_to_max_dimension();
    for (int c = 0; c < 3 && c < k.per_channel_pad_value_size(); ++c)
      keep.pad_value[static_cast<size_t>(c)] = k.per_channel_pad_value(c);
    parsed->keep_aspect_ratio = keep;
    parsed->height = parsed->width = keep.max_dimension;  // the sample buffer
  } else {
    parsed->height = resizer.fixed_shape_resizer().height();
    parsed->width = resizer.fixed_shape_resizer().width();
  }
}

std::string parse_post_processing(const object_detection::protos::PostProcessing& post, detect::BatchNmsOptions* nms) {
  const auto& batch = post.batch_non_max_suppression();
  nms->score_threshold = batch.score_threshold();
  nms->iou_threshold = batch.iou_threshold();
  nms->max_detections_per_class = batch.max_detections_per_class();
  nms->max_total_detections = batch.max_total_detections();
  return object_detection::protos::PostProcessing::ScoreConverter_Name(post.score_converter());
}

void register_meta_architecture(MetaArchitectureEntry entry) {
  for (const auto& e : entries())
    if (e.name == entry.name) throw Error("meta-architecture '" + entry.name + "' is registered twice");
  entries().push_back(std::move(entry));
}

const MetaArchitectureEntry& meta_architecture_for(const object_detection::protos::TrainEvalPipelineConfig& pipeline) {
  const auto& model = pipeline.model();
  const auto* oneof = model.GetDescriptor()->FindOneofByName("model");
  const auto* set = model.GetReflection()->GetOneofFieldDescriptor(model, oneof);
  std::string known;
  for (const auto& e : entries()) {
    if (set && e.name == set->name()) return e;
    known += (known.empty() ? "" : " or ") + e.name;
  }
  throw Error(set ? "model." + set->name() + " is not supported; Orchard implements " + known
                  : "model is not set; Orchard implements " + known);
}

}  // namespace orchard::tasks
