#include "orchard/tasks/detect/fine_tune.h"

#include <set>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/detect/config/config.h"
#include "orchard/layers/fake_quant.h"
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/detection.h"

namespace pb = object_detection::protos;

namespace orchard::tasks {

std::string fine_tune_checkpoint_type(const pb::TrainConfig& config) {
  if (!config.fine_tune_checkpoint_type().empty()) return config.fine_tune_checkpoint_type();
  return config.from_detection_checkpoint() ? "detection" : "classification";
}

FineTuneSelection fine_tune_selection(const DetectionTask& task, const std::string& type, bool load_all) {
  FineTuneSelection s;
  if (type == "classification") {
    // The meta-architecture's feature extractor says which (SSD's base network; Faster R-CNN's
    // first- and second-stage extractor layers).
    const MetaArchitecture* meta = &task.meta_architecture();
    s.skip = [meta](const std::string& name) { return !meta->restored_by_classification(name); };
    s.source_name = [meta](const std::string& name) { return meta->classification_source_name(name); };
    s.why = "not part of the classification backbone";
  } else if (type == "detection" && load_all) {
    // load_all_detection_checkpoint_vars: every variable, the heads too, where it fits.
  } else if (type == "detection") {
    const MetaArchitecture* meta = &task.meta_architecture();
    s.skip = [meta](const std::string& name) { return meta->is_prediction_head_parameter(name); };
    s.why = "box and class prediction heads (re-initialised)";
  } else if (type == "full") {
    s.skip_unavailable = false;
  } else {
    throw Error("fine_tune_checkpoint_type must be classification, detection or full, not '" + type + "'");
  }
  // Quantization-aware training's ranges start afresh (layers::is_quantization_state).
  bool quantized = false;
  for (const auto& b : const_cast<DetectionTask&>(task).module()->named_buffers())
    quantized = quantized || layers::is_quantization_state(b.key());
  if (!quantized) return s;
  if (s.skip)
    s.skip = [skip = s.skip](const std::string& name) { return layers::is_quantization_state(name) || skip(name); };
  else s.skip = [](const std::string& name) { return layers::is_quantization_state(name); };
  s.why = (s.why.empty() ? "" : s.why + "; ") + "quantization-aware training's ranges, which start afresh";
  return s;
}

std::string describe_unfit(const models::TfMatch& v) {
  if (v.status == models::TfMatch::kMissing) return v.tf + " is not in the checkpoint (for " + v.orchard + ")";
  return v.tf + " is " + tf::shape_string(v.tf_shape) + " in the checkpoint, " +
         tf::shape_string(models::torch_to_tf_shape(v.orchard_shape, v.name.layout, v.name.depthwise_multiplier)) +
         " in the model (" + v.orchard + ")";
}

namespace {

std::string join(const std::vector<std::string>& items, size_t most) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < most; ++i) s += (i ? "; " : "") + items[i];
  if (items.size() > most) s += "; ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

// The pipeline.config beside the checkpoint, against `config`: the model it builds matched with
// the checkpoint under `config`'s fine-tuning type.
std::vector<std::string> own_config_hint(const tf::CheckpointReader& checkpoint, size_t unfit,
                                         const pb::TrainEvalPipelineConfig& config) {
  const std::string own = join_path(parent_path(checkpoint.prefix()), "pipeline.config");
  if (!file_exists(own)) return {};
  pb::TrainEvalPipelineConfig theirs;
  std::vector<std::string> differences;
  size_t theirs_unfit = 0;
  try {
    std::vector<std::string> unknown;  // fields of older OD APIs (batch_norm_trainable): not the model's shape
    detect::parse_text_proto(read_file(own), own, &theirs, &unknown);
    differences = detect::message_differences(config.model(), theirs.model(), "model");
    if (differences.empty()) return {};
    validate_detection_pipeline(theirs, own);
    DetectionTask task(detection_config(theirs, false));
    const std::string type = fine_tune_checkpoint_type(config.train_config());
    const auto selection = fine_tune_selection(task, type, config.train_config().load_all_detection_checkpoint_vars());
    const auto m = models::match_tf_checkpoint(checkpoint, *task.module(), task.meta_architecture().tf_name_map(type),
                                               selection.skip);
    theirs_unfit = m.count(models::TfMatch::kMissing) + m.count(models::TfMatch::kShapeMismatch);
  } catch (const Error& e) {
    return {"the checkpoint's own " + own + " could not be compared: " + e.what()};
  }
  const std::string fields = "its model differs from this config's in: " + join(differences, 8);
  if (theirs_unfit >= unfit)
    return {"the checkpoint's own " + own + " does not fit it better (its model leaves out " +
            std::to_string(theirs_unfit) + "); " + fields};
  return {"the checkpoint's own " + own + " builds a model that " +
          (theirs_unfit == 0 ? std::string("takes every variable it would restore")
                             : "leaves out " + std::to_string(theirs_unfit) + " instead of " + std::to_string(unfit)) +
          "; " + fields};
}

// The OD API names a separable convolution <scope>_depthwise/depthwise_weights (then the 1x1
// <scope>/weights) where use_depthwise is set, a full one <scope>/weights.
std::vector<std::string> depthwise_hint(const tf::CheckpointReader& checkpoint,
                                        const std::vector<models::TfMatch>& unfit) {
  std::vector<std::string> separable, full;  // in the checkpoint
  std::set<std::string> model_separable;
  for (const auto& v : unfit) {
    const std::string suffix = "_depthwise/depthwise_weights";
    if (v.status == models::TfMatch::kMissing && v.tf.size() > suffix.size() &&
        v.tf.compare(v.tf.size() - suffix.size(), suffix.size(), suffix) == 0)
      model_separable.insert(v.tf.substr(0, v.tf.size() - suffix.size()));
  }
  for (const auto& v : unfit) {
    const std::string tail = "/weights";
    if (v.status != models::TfMatch::kShapeMismatch || v.tf.size() <= tail.size() ||
        v.tf.compare(v.tf.size() - tail.size(), tail.size(), tail) != 0 || v.tf_shape.size() != 4)
      continue;
    const std::string scope = v.tf.substr(0, v.tf.size() - tail.size());
    const auto model_shape = models::torch_to_tf_shape(v.orchard_shape, v.name.layout, v.name.depthwise_multiplier);
    if (model_shape.size() != 4) continue;
    const bool ckpt_pointwise = v.tf_shape[0] == 1 && v.tf_shape[1] == 1;
    const bool model_pointwise = model_shape[0] == 1 && model_shape[1] == 1;
    if (ckpt_pointwise && !model_pointwise && checkpoint.find(scope + "_depthwise/depthwise_weights"))
      separable.push_back(scope);
    else if (!ckpt_pointwise && model_pointwise && model_separable.count(scope)) full.push_back(scope);
  }
  const auto field = [](const std::vector<std::string>& scopes) {
    const bool extractor = scopes.front().rfind("FeatureExtractor/", 0) == 0;
    return extractor ? std::string("model.ssd.feature_extractor.use_depthwise")
                     : std::string("the box predictor's use_depthwise");
  };
  std::vector<std::string> out;
  if (!separable.empty())
    out.push_back("the checkpoint holds " + std::to_string(separable.size()) +
                  " of these layers as separable convolutions (" + separable.front() +
                  "_depthwise/depthwise_weights, then a 1x1 " + separable.front() +
                  "/weights): its model was built with " + field(separable) +
                  ": true, this config builds full convolutions there");
  if (!full.empty())
    out.push_back("the checkpoint holds " + std::to_string(full.size()) + " of these layers as full convolutions (" +
                  full.front() + "/weights): its model was built without " + field(full) +
                  ", this config builds separable ones there");
  return out;
}

}  // namespace

std::vector<std::string> fine_tune_hints(const tf::CheckpointReader& checkpoint,
                                         const std::vector<models::TfMatch>& unfit,
                                         const pb::TrainEvalPipelineConfig& config) {
  if (unfit.empty()) return {};
  auto out = own_config_hint(checkpoint, unfit.size(), config);
  for (auto& line : depthwise_hint(checkpoint, unfit)) out.push_back(std::move(line));
  return out;
}

}  // namespace orchard::tasks
