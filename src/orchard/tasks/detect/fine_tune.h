// fine_tune_checkpoint as the OD API restores it: which of a detection model's variables a
// fine_tune_checkpoint_type takes (model_lib's restore_map), that only those the checkpoint
// holds with the model's shape are taken (variables_helper.get_variables_available_in_checkpoint;
// the rest are listed and left as initialised), and, from the checkpoint itself, why the others
// do not fit. Shared by `detect train`, which restores, and `orchard checkpoint inspect
// --pipeline_config_path`, which says what training would restore.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "orchard/models/tf_weights.h"

namespace object_detection::protos {
class TrainConfig;
class TrainEvalPipelineConfig;
}  // namespace object_detection::protos
namespace orchard::tf {
class CheckpointReader;
}

namespace orchard::tasks {

class DetectionTask;

// train_config.fine_tune_checkpoint_type; unset: from the deprecated from_detection_checkpoint
// (detection when true, else classification), as the OD API's model_lib derives it.
std::string fine_tune_checkpoint_type(const object_detection::protos::TrainConfig& config);

struct FineTuneSelection {
  // Model variables the type leaves as initialised: detection, the box predictor (re-initialised
  // heads); classification, all but the backbone. Empty: none.
  std::function<bool(const std::string&)> skip;
  // An Orchard checkpoint's name for a model variable (classification: a classifier's features.*).
  std::function<std::string(const std::string&)> source_name;
  std::string why;  // what `skip` leaves out, for the log
  // Wanted variables the checkpoint lacks or holds with another shape are left as initialised
  // (classification, detection: get_variables_available_in_checkpoint) or are errors (full: TF2's
  // tf.train.Checkpoint restore, which refuses a shape mismatch).
  bool skip_unavailable = true;
};
// `load_all`: load_all_detection_checkpoint_vars (type detection): the heads too, where they
// fit. Throws Error for a type other than classification, detection, full. `task` must outlive
// the selection.
FineTuneSelection fine_tune_selection(const DetectionTask& task, const std::string& type, bool load_all);

// What a TensorFlow checkpoint itself says about why `unfit` (kMissing / kShapeMismatch matches
// of `config`'s model against `checkpoint`) do not fit, one line each, none when it says nothing:
//  - a pipeline.config beside the checkpoint (the zoo's tarballs have one) whose model differs
//    from `config`'s: whether the model it builds takes them, and the fields that differ;
//  - layers the checkpoint holds as separable convolutions (<scope>_depthwise/depthwise_weights
//    then a 1x1 <scope>/weights) where the model has full ones, or the other way round:
//    use_depthwise.
std::vector<std::string> fine_tune_hints(const tf::CheckpointReader& checkpoint,
                                         const std::vector<models::TfMatch>& unfit,
                                         const object_detection::protos::TrainEvalPipelineConfig& config);

// "<tf name> is [1, 1, 256, 512] in the checkpoint, [3, 3, 256, 512] in the model (<orchard
// name>)" or "<tf name> is not in the checkpoint (for <orchard name>)"; the model's shape in
// the checkpoint's layout.
std::string describe_unfit(const models::TfMatch& v);

}  // namespace orchard::tasks
