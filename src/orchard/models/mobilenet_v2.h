// MobileNetV2 (Sandler et al. 2018) as torchvision's mobilenet_v2 and TF-Slim's
// nets/mobilenet/mobilenet_v2.py (V2_DEF): parameter names and shapes match torchvision's
// state dict (features.0.{0,1}, features.N.conv.*, features.18.{0,1}, classifier.1), so its
// weights import by name; the depth multiplier, min_depth and the endpoints follow TF-Slim,
// which is what the TF Object Detection API's ssd_mobilenet_v2 feature extractor builds.
//
// Input: float32 [N, 3, H, W] (channels_last memory format welcome).
// Output of forward: logits [N, num_classes], or the pooled features [N, last_channels()]
// when include_top is false.
//
// A classification backbone (`--model mobilenet_v2`, an ImageModel) and the SSD feature
// extractor's base (orchard/detect/meta_arch/ssd_model.h).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <string>
#include <vector>

#include "orchard/models/image_model.h"
#include "orchard/models/tf_names.h"

namespace orchard::models {

struct MobileNetV2Options {
  int64_t num_classes = 1000;
  double width_mult = 1.0;    // TF's depth_multiplier: scales every layer's channels
  int64_t round_nearest = 8;  // channel counts are rounded to multiples of this
  int64_t min_depth = 8;      // and never below this (TF's min_depth; torchvision: 8)
  // Keep the last 1x1 layer at 1280 channels when width_mult < 1, as torchvision always
  // does. TF-Slim's mobilenet_base (so ssd_mobilenet_v2) scales it: set false there.
  bool finegrain_classification_mode = true;
  bool include_top = true;  // global pool + dropout + classifier.1 = Linear(last, num_classes)
  // false: stop at layer_18 (features.17), mobilenet_base(final_endpoint='layer_18') as the
  // OD API's ssd_mobilenet_v2_mnasfpn builds it (no Conv_1; needs include_top false).
  bool include_last_conv = true;
  double dropout = 0.2;      // before the classifier (TF: dropout_keep_prob 0.8)
  double bn_momentum = 0.1;  // torchvision; TF's SSD: 0.0003 (decay 0.9997)
  double bn_eps = 1e-5;      // torchvision; TF-Slim: 0.001
  // The strided 3x3 convolutions padded as TF's 'SAME' (TF-Slim, the OD API's SSD: the odd
  // padding pixel at the bottom/right) instead of torchvision's 1 on every side: what weights
  // trained in TensorFlow expect.
  bool tf_same_padding = false;
};

// An endpoint of TF-Slim's mobilenet_base, in TF's numbering: "layer_N" is the output of
// torchvision's features[N - 1] (N = 1..19); "layer_N/expansion_output" is the output of the
// expansion 1x1 conv + BN + ReLU6 of inverted residual features[N - 1] (N = 3..18; block 2,
// features[1], has no expansion). ssd_mobilenet_v2 takes "layer_15/expansion_output"
// (features[14].conv[0], 576 channels at stride 16) and "layer_19" (features[18], 1280
// channels at stride 32).
struct MobileNetV2Endpoint {
  int64_t index = 0;              // into features
  bool expansion_output = false;  // the expansion's output instead of the block's
};
// Throws c10::Error naming the accepted forms for anything else.
MobileNetV2Endpoint parse_mobilenet_v2_endpoint(const std::string& name);

class MobileNetV2Impl : public ImageModelImpl {
 public:
  explicit MobileNetV2Impl(const MobileNetV2Options& options);
  torch::Tensor forward(torch::Tensor x) override;
  // Globally average-pooled output of features[18], [N, last_channels()].
  torch::Tensor features(torch::Tensor x) override;
  // The requested endpoints, in the order asked; runs the network only as far as needed.
  std::vector<torch::Tensor> endpoints(const torch::Tensor& x, const std::vector<MobileNetV2Endpoint>& wanted);
  int64_t endpoint_channels(const MobileNetV2Endpoint& e) const;
  int64_t last_channels() const { return last_channels_; }
  const MobileNetV2Options& options() const { return options_; }

 private:
  MobileNetV2Options options_;
  int64_t last_channels_ = 0;
  std::vector<int64_t> out_channels_;        // of features[i]
  std::vector<int64_t> expansion_channels_;  // of features[i]'s expansion, 0 if none
  torch::nn::ModuleList features_{nullptr};
  torch::nn::Sequential classifier_{nullptr};
};
TORCH_MODULE(MobileNetV2);

// TF-Slim's name (nets/mobilenet/mobilenet_v2.py) of a MobileNetV2 variable under `scope`:
// "MobilenetV2" in TF-Slim's classification checkpoints, "FeatureExtractor/MobilenetV2" in
// the OD API's ssd_mobilenet_v2. features.0 is Conv, features.1 expanded_conv, features.N
// expanded_conv_<N-1> (expand, depthwise, project; each with BatchNorm), features.18 Conv_1,
// classifier.1 Logits/Conv2d_1c_1x1 (a 1x1 convolution; 1001 classes, 0 the background).
// Throws std::invalid_argument for a name MobileNetV2 does not have.
std::optional<TfName> mobilenet_v2_tf_name(const std::string& name, const std::string& scope = "MobilenetV2");

}  // namespace orchard::models
