// A model's variables from, and to, TensorFlow checkpoints (core/tf_checkpoint.h), through
// the model's TfNameMap (tf_names.h): names matched, shapes checked, layouts converted.
#pragma once

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::tf {
class CheckpointReader;
struct Tensor;
}  // namespace orchard::tf

namespace orchard::models {

// How a model's variables and a checkpoint's meet.
struct TfMatch {
  std::string orchard, tf;                       // tf "" when TensorFlow has no such variable
  std::string key;                               // the checkpoint's key for `tf` ("" when absent)
  TfName name;                                   // the map's answer: layout, default value
  std::vector<int64_t> orchard_shape, tf_shape;  // tf_shape as the checkpoint stores it
  enum Status { kMatched, kDefaulted, kMissing, kShapeMismatch, kNoTfName, kSkipped } status = kMatched;
};
struct TfMapping {
  std::vector<TfMatch> variables;   // every model variable, in the model's order
  std::vector<std::string> unused;  // checkpoint variables no model variable takes
  int count(TfMatch::Status s) const;
};
// `skip`: model variables not wanted (e.g. a detector's heads when fine-tuning from a
// classifier); they are reported as kSkipped.
TfMapping match_tf_checkpoint(const tf::CheckpointReader& checkpoint, torch::nn::Module& model, const TfNameMap& map,
                              const std::function<bool(const std::string&)>& skip = {});

// Copies the matched variables into the model (converted to its layout and dtype). Throws
// Error, naming the checkpoint and the variables, if any wanted variable is missing or has
// another shape; nothing is changed then. With `skip_unavailable` those are left as they are
// and returned in `unavailable` (kMissing, kShapeMismatch) instead: the OD API's
// get_variables_available_in_checkpoint. A V2 checkpoint whose data file is missing is an
// Error naming the file, before anything is changed. Returns the variables restored (defaults
// included) and skipped.
struct TfRestore {
  std::vector<std::string> restored, skipped, unused;
  std::vector<TfMatch> unavailable;
};
TfRestore restore_tf_checkpoint(const std::string& path, torch::nn::Module& model, const TfNameMap& map,
                                const std::function<bool(const std::string&)>& skip = {},
                                bool skip_unavailable = false);

// Layout conversions (tf_names.h). `tf_shape` is the shape the checkpoint stores.
at::Tensor tf_to_torch(const tf::Tensor& value, TfLayout layout);
std::vector<int64_t> torch_to_tf_shape(const std::vector<int64_t>& shape, TfLayout layout,
                                       int64_t depthwise_multiplier = 1);
// Contiguous, in TF's layout.
at::Tensor torch_to_tf(const at::Tensor& value, TfLayout layout, int64_t depthwise_multiplier = 1);

// Writes the model as a V2 checkpoint under TensorFlow's names (plus global_step), as TF's
// Saver would: `prefix`.index and `prefix`.data-00000-of-00001. Variables without a TF name
// are left out and returned.
std::vector<std::string> write_tf_checkpoint(const std::string& prefix, torch::nn::Module& model, const TfNameMap& map,
                                             int64_t global_step);

}  // namespace orchard::models
