// MobileNetV3 (Howard et al. 2019) as TF-Slim's nets/mobilenet/mobilenet_v3.py builds it
// (V3_LARGE, V3_SMALL, V3_EDGETPU, and the *_DETECTION variants, whose last four layers have half the
// outputs): a 3x3 stride-2 convolution + batch norm + hard-swish, then inverted residual blocks
// (expansion 1x1 -> depthwise k x k -> squeeze-excite -> linear projection 1x1, each convolution
// with batch norm; ReLU or hard-swish inside), then a 1x1 convolution + batch norm + hard-swish.
// The base of the TF Object Detection API's ssd_mobilenet_v3_large / ssd_mobilenet_v3_small
// feature extractors (ssdlite_mobilenet_v3_{large,small}_320x320_coco.config). The classifier
// head (reduce_to_1x1 and the 1x1 logits convolutions) is not built: the OD API uses the base.
//
// Layers (TF's endpoint layer_N is features.{N-1}):
//   features.0        Conv         3x3 stride 2, 16 channels, hard-swish
//   features.1..K-2   expanded_conv, expanded_conv_1, ... (large: 15 blocks, small: 11)
//   features.K-1      Conv_1       1x1 (large 960, small 576; halved in the detection variants)
// A block's children: expand (absent when the expansion is not wider than the input), depthwise,
// se.fc1 / se.fc2 (squeeze-excite: global average pool, 1x1 conv with bias + ReLU, 1x1 conv with
// bias + hard-sigmoid relu6(x + 3) * 0.16667, times the depthwise output), project; each conv
// layer's children are "0" (the convolution, no bias) and "1" (its batch norm).
//
// Channels: depth(d) = make_divisible(d * depth_multiplier, 8, min_depth) for every layer's
// outputs; a block's expansion make_divisible(in * factor, 8, 8); squeeze-excite's inner
// make_divisible(expansion / 4, 8, 8) (TF-Slim's _make_divisible).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::models {

struct MobileNetV3Options {
  bool small = false;  // V3_SMALL; false: V3_LARGE
  // V3_EDGETPU (MobileNet-EdgeTPU, the base of the OD API's ssd_mobilenet_edgetpu) up to
  // layer_23, its final_endpoint there (the 1280-channel Conv_1 is not built): ReLU everywhere,
  // no squeeze-excite, the first six blocks "fused" (expand is a k x k stride-s convolution,
  // no depthwise), expanded_conv_13 without its residual. `small` and `detection` do not apply.
  bool edgetpu = false;
  bool detection = false;  // V3_*_DETECTION: layers 13..16 (large) / 9..12 (small) at half width
  double depth_multiplier = 1.0;
  int64_t min_depth = 8;                       // TF-Slim's default; the OD API's configs say 16
  double bn_momentum = 0.003, bn_eps = 0.001;  // training_scope: decay 0.997, epsilon 0.001
  // The strided convolutions padded as TF's 'SAME' (the odd pixel bottom/right); false: (k-1)/2
  // on every side (the OD API's use_explicit_padding).
  bool tf_same_padding = true;
  double init_stddev = 0.09;  // training_scope's truncated normal
};

// An endpoint of TF-Slim's mobilenet_base: "layer_N" is features.{N-1}'s output,
// "layer_N/expansion_output" its expansion's (blocks that have one).
struct MobileNetV3Endpoint {
  int64_t index = 0;
  bool expansion_output = false;
};

class MobileNetV3Impl : public torch::nn::Module {
 public:
  explicit MobileNetV3Impl(const MobileNetV3Options& options);
  int64_t num_layers() const { return static_cast<int64_t>(out_channels_.size()); }
  // The outputs asked for, in the order asked; runs the network only as far as needed.
  std::vector<torch::Tensor> endpoints(const torch::Tensor& x, const std::vector<MobileNetV3Endpoint>& wanted);
  int64_t endpoint_channels(const MobileNetV3Endpoint& e) const;
  // "layer_14/expansion_output" -> {13, true}; throws c10::Error naming the accepted forms.
  MobileNetV3Endpoint parse_endpoint(const std::string& name) const;
  const MobileNetV3Options& options() const { return options_; }

  // TF-Slim's name of a variable under `scope` ("MobilenetV3"; "FeatureExtractor/MobilenetV3"
  // in the OD API): features.0 Conv, features.i (blocks) expanded_conv[_<i-1>]/{expand,
  // depthwise, squeeze_excite/Conv, squeeze_excite/Conv_1, project}, the last Conv_1. Throws
  // std::invalid_argument for a name MobileNetV3 does not have.
  std::optional<TfName> tf_name(const std::string& name, const std::string& scope = "MobilenetV3") const;

 private:
  MobileNetV3Options options_;
  std::vector<int64_t> out_channels_, expansion_channels_;  // per layer; expansion 0 if none, -1 a plain conv
  torch::nn::ModuleList features_{nullptr};
};
TORCH_MODULE(MobileNetV3);

}  // namespace orchard::models
