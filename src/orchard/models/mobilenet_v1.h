// MobileNetV1 (Howard et al. 2017) as TF-Slim's nets/mobilenet_v1.py builds it
// (mobilenet_v1_base, MOBILENETV1_CONV_DEFS): a 3x3 stride-2 convolution then 13 depthwise
// separable layers (3x3 depthwise + 1x1 pointwise), each convolution followed by batch norm and
// ReLU6, 'SAME' padding. The base of the TF Object Detection API's ssd_mobilenet_v1 feature
// extractors (ssd_mobilenet_v1_coco, the 0.75-depth and *_sync configs, ssdlite_mobilenet_v1,
// the FPN and PPN variants).
//
// Layers (depth_multiplier 1; depth(d) = max(int(d * depth_multiplier), min_depth)):
//   features.0        Conv2d_0              3x3 stride 2, 32 channels
//   features.N (1..13) Conv2d_N_depthwise (features.N.0) + Conv2d_N_pointwise (features.N.1)
//                     depths 64, 128, 128, 256, 256, 512 x 6, 1024, 1024; stride 2 at N = 2, 4,
//                     6, 12 (so Conv2d_11_pointwise is at stride 16, Conv2d_13_pointwise at 32)
// Each layer is a layers::ConvNormActivation: children "0" (the convolution, no bias) and "1"
// (its batch norm). No classifier: the OD API uses the base only.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::models {

struct MobileNetV1Options {
  double depth_multiplier = 1.0;
  int64_t min_depth = 8;                        // TF-Slim's default; the OD API's configs say 16
  double bn_momentum = 0.0003, bn_eps = 0.001;  // mobilenet_v1_arg_scope: decay 0.9997, epsilon 0.001
  // The strided convolutions padded as TF's 'SAME' (the odd pixel bottom/right); false: 1 on
  // every side.
  bool tf_same_padding = true;
};

class MobileNetV1Impl : public torch::nn::Module {
 public:
  static constexpr int64_t kNumLayers = 14;  // Conv2d_0 .. Conv2d_13

  explicit MobileNetV1Impl(const MobileNetV1Options& options);
  // The outputs of the layers asked for (0 = Conv2d_0, N = Conv2d_N_pointwise), in the order
  // asked; runs the network only as far as needed.
  std::vector<torch::Tensor> endpoints(const torch::Tensor& x, const std::vector<int64_t>& layers);
  int64_t layer_channels(int64_t layer) const;
  const MobileNetV1Options& options() const { return options_; }

 private:
  MobileNetV1Options options_;
  std::vector<int64_t> channels_;
  torch::nn::ModuleList features_{nullptr};
};
TORCH_MODULE(MobileNetV1);

// "Conv2d_11_pointwise" -> 11, "Conv2d_0" -> 0; throws c10::Error naming the accepted forms.
int64_t parse_mobilenet_v1_endpoint(const std::string& name);

// TF-Slim's name of a MobileNetV1 variable under `scope` ("MobilenetV1" in TF-Slim's
// classification checkpoints, "FeatureExtractor/MobilenetV1" in the OD API's): features.0 is
// Conv2d_0, features.N.0 Conv2d_N_depthwise (depthwise_weights), features.N.1 Conv2d_N_pointwise,
// each with its BatchNorm. Throws std::invalid_argument for a name MobileNetV1 does not have.
std::optional<TfName> mobilenet_v1_tf_name(const std::string& name, const std::string& scope = "MobilenetV1");

}  // namespace orchard::models
