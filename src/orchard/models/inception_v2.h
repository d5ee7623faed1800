// Inception-v2 (Ioffe & Szegedy 2015, BN-Inception) as TF-Slim's nets/inception_v2.py builds
// inception_v2_base to Mixed_5c, the base of the TF Object Detection API's ssd_inception_v2
// (ssd_inception_v2_{coco,pets}.config): under the config's conv_hyperparams every convolution
// is conv (no bias) -> batch norm (with gamma) -> ReLU6, all 'SAME'.
//
//   Conv2d_1a_7x7   separable 7x7 stride 2: depthwise 3 -> 3 * m (m = min(int(depth(64) / 3), 8),
//                   no batch norm between), pointwise 1x1 -> depth(64), batch norm, ReLU6
//   MaxPool_2a_3x3, Conv2d_2b_1x1 (64), Conv2d_2c_3x3 (192), MaxPool_3a_3x3
//   Mixed_3b, Mixed_3c, Mixed_4a (stride 2), Mixed_4b..Mixed_4e, Mixed_5a (stride 2), Mixed_5b,
//   Mixed_5c: four branches concatenated (Branch_3 a 3x3 'SAME' average pool, not counting the
//   padding, then a 1x1; in Mixed_5c a max pool); the reductions end in 3x3 stride-2 convs and a
//   max pool.
// Channels depth(d) = max(int(d * depth_multiplier), min_depth).
//
// Module names are TF's scopes with '/' as '.': Mixed_3b.Branch_1.Conv2d_0b_3x3.conv.weight,
// ....bn.running_mean; Conv2d_1a_7x7.depthwise.weight, .pointwise.weight, .bn.*.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::models {

struct InceptionV2Options {
  double depth_multiplier = 1.0;
  int64_t min_depth = 16;
  double bn_momentum = 0.0003, bn_eps = 0.001;  // the configs' decay 0.9997, epsilon 0.001
  double init_stddev = 0.03;                    // the configs' truncated normal
  // The layers built, from the stem (Conv2d_1a_7x7) or a mixed layer to a mixed layer: Faster
  // R-CNN's first stage is Conv2d_1a_7x7 .. Mixed_4e, its second stage Mixed_5a .. Mixed_5c.
  std::string first_layer = "Conv2d_1a_7x7";
  std::string final_endpoint = "Mixed_5c";
  // ReLU6 (the SSD configs' conv_hyperparams) or slim.conv2d's default ReLU with Glorot-uniform
  // kernels (the Faster R-CNN extractor's arg scope, which sets only the batch norm).
  bool relu6 = true;
};

class InceptionV2Impl : public torch::nn::Module {
 public:
  explicit InceptionV2Impl(const InceptionV2Options& options);
  // Mixed_4c (stride 16) and Mixed_5c (stride 32), the maps ssd_inception_v2 takes.
  std::vector<torch::Tensor> forward(const torch::Tensor& x);
  // The built layers in order -> the last one's output (first_layer .. final_endpoint).
  torch::Tensor forward_layers(const torch::Tensor& x);
  int64_t output_channels() const { return output_channels_; }
  int64_t mixed_4c_channels() const { return mixed_4c_channels_; }
  int64_t mixed_5c_channels() const { return mixed_5c_channels_; }
  // TF's name of a variable under `scope` ("FeatureExtractor/InceptionV2" in the OD API);
  // throws std::invalid_argument for a name Inception-v2 does not have.
  std::optional<TfName> tf_name(const std::string& name, const std::string& scope) const;

 private:
  int64_t mixed_4c_channels_ = 0, mixed_5c_channels_ = 0, output_channels_ = 0, stem_multiplier_ = 1;
  std::vector<std::shared_ptr<torch::nn::Module>> stem_, mixed_;  // in order
  std::vector<std::string> mixed_names_;
};
TORCH_MODULE(InceptionV2);

}  // namespace orchard::models
