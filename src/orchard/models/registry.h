// Models by name. Registration is explicit (register_builtin_models), not by static
// initialisers that static libraries drop; a failed lookup lists what exists.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "orchard/models/image_model.h"
#include "orchard/models/resnet.h"
#include "orchard/models/tf_names.h"

namespace orchard::models {

struct ModelConfig {
  std::string arch = "resnet50";
  int64_t num_classes = 1000;
  int64_t width = 0;                // 0: the architecture's own base width (ResNets only)
  bool zero_init_residual = false;  // ResNets only
  // false: skip the ResNets' own initialisation (he_normal draws) when a checkpoint is
  // restored right after (predict, eval, export): faster start-up, same restored model.
  bool initialize = true;
  // "" or "default": the model's own initialisation; "torchvision": inception_v3 only,
  // torchvision's and TF-Slim's trunc_normal(std 0.1) convolutions (see inception_v3.h).
  std::string init;
  // inception_v3 only: TF-Slim's depth_multiplier (channels x this, at least 16); 1 otherwise.
  double depth_multiplier = 1.0;
};

// Names: resnet18/34/50/101/152 (ImageNet stem), the same with a "_small" suffix (3x3
// stem, no max-pool; for inputs of 64 px or less), resnet_tiny (tests), inception_v3
// (torchvision's, inputs of at least 75 px; no auxiliary classifier) and mobilenet_v2
// (torchvision's); for TensorFlow's checkpoints, resnet_v1_50/101/152 (TF-Slim's resnet_v1),
// mobilenet_v2_slim and inception_v3_slim (TF-Slim's: 'SAME' padding, TF's pooling),
// resnet50_garden (TF Model Garden's Keras ResNet-50) and resnet50/101/152_ml_images (Tencent
// ML-Images' pre-activation ResNets).
ImageModel build_model(const ModelConfig& config);
std::vector<std::string> model_names();

// Whether the model takes RGB scaled to [-1, 1] (Inception-v3, TF-Slim's MobileNetV2,
// ML-Images' ResNets) rather than RGB minus the ImageNet means.
bool takes_unit_range_inputs(const std::string& arch);

// The TensorFlow names of a registered model's variables (TF-Slim's checkpoints:
// mobilenet_v2 "MobilenetV2/...", inception_v3 "InceptionV3/...", resnet_v1_N
// "resnet_v1_N/..."; Model Garden's Keras ResNet-50: resnet50_garden "conv1/kernel", ...), or
// an empty function for a model without a TensorFlow counterpart mapped yet.
TfNameMap tf_name_map(const std::string& arch);

// The ResNets alone (an error for other names).
ResNet build_resnet(const ModelConfig& config);
ResNetOptions resnet_options(const ModelConfig& config);

}  // namespace orchard::models
