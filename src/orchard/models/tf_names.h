// TensorFlow names of Orchard's variables: what a TensorFlow checkpoint calls a model's
// parameter or buffer, and how its layout differs. Each model declares its map beside itself
// (mobilenet_v2.h, inception_v3.h, ...); models/tf_weights.h converts with them.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace orchard::models {

enum class TfLayout {
  kSame,       // vectors, scalars: the same values
  kConv,       // TF [H, W, in, out] <-> torch [out, in, H, W]
  kDepthwise,  // TF [H, W, in, multiplier] <-> torch [in * multiplier, 1, H, W] (TfName's depthwise_multiplier)
  kDense,      // TF [in, out] <-> torch Linear [out, in]
  kConvDense,  // TF 1x1 conv [1, 1, in, out] <-> torch Linear [out, in] (TF-Slim's logits)
};

struct TfName {
  std::string name;  // the TensorFlow variable, e.g. "MobilenetV2/Conv/weights"
  TfLayout layout = TfLayout::kSame;
  // The value to use when the checkpoint lacks the variable (TF-Slim's batch_norm with
  // scale=False has no gamma: 1); unset: the variable is required.
  std::optional<float> default_value;
  // kDepthwise: the channel multiplier TensorFlow's variable has (its last dimension).
  int64_t depthwise_multiplier = 1;
};

// An Orchard variable's TensorFlow name, or nullopt for one TensorFlow does not have
// (num_batches_tracked).
using TfNameMap = std::function<std::optional<TfName>(const std::string& orchard_name)>;

// A batch norm's variable under TF-Slim's naming ("<scope>/BatchNorm/gamma", ...): `field` is
// torch's (weight, bias, running_mean, running_var, num_batches_tracked). `scale`: whether the
// checkpoint has gamma (TF-Slim batch_norm's scale; without it gamma is 1).
std::optional<TfName> tf_batch_norm_name(const std::string& scope, const std::string& field, bool scale = true);

}  // namespace orchard::models
