// MnasFPN (Chen et al. 2020) as the OD API's ssd_mobilenet_v2_mnasfpn feature extractor builds
// it over MobileNetV2's layer_7, layer_14 and layer_18 (levels 3, 4, 5):
//   C6           3x3 stride-2 'SAME' max pool of level 5, 1x1 conv + batch norm to `depth`
//   cell_0..N-1  the same five blocks each (own weights). A block takes two nodes (nodes 0..3 the
//                cell's inputs at levels 3..6, node 4 + b block b's output), brings each to its
//                output level (a finer one: 3x3 'SAME' max pool stride 2^d, then 1x1 conv + batch
//                norm to the expansion; a coarser one: 1x1 conv + batch norm, then nearest
//                upsampling x 2^d), sums them, ReLU6, then a k x k depthwise and 1x1 pointwise
//                convolution to `depth` and one batch norm (no activation). After the five
//                blocks each output (nodes 5..8) adds its cell input where the shapes agree.
// The feature maps are the last cell's outputs, levels 3..6, all `depth` channels. Every
// convolution is without bias, every batch norm epsilon 0.01 / decay 0.99 (the extractor's own
// scope; the config's conv_hyperparams are not used), everything TF 'SAME'. Inputs must be
// multiples of 64 (the OD API checks it: the upsampled maps must meet the pooled ones).
//
// Module names: c6.{conv,bn}, cells.<c>.<b>.inputs.<i>.{conv,bn}, cells.<c>.<b>.{depthwise,
// pointwise,bn}; TF names FeatureExtractor/MnasFPN/C6_Conv1x1/..., .../cell_<c>/block_<b>/
// input_<i>/Conv1x1/..., .../cell_<c>/block_<b>/SepConv/{depthwise_weights,pointwise_weights,
// BatchNorm/*}.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::detect {

struct MnasFpnOptions {
  std::vector<int64_t> in_channels;  // levels 3, 4, 5
  int64_t depth = 48;                // additional_layer_depth (after the depth multiplier)
  double depth_multiplier = 1.0;     // the blocks' expansion sizes: make_divisible(e * m, 8, min_depth)
  int64_t min_depth = 16;
  int64_t num_cells = 4;
  double bn_momentum = 0.01, bn_eps = 0.01;
};

class MnasFpnImpl : public torch::nn::Module {
 public:
  explicit MnasFpnImpl(const MnasFpnOptions& options);
  // Levels 3, 4, 5 -> levels 3, 4, 5, 6.
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& levels);
  // TF's name of a variable (relative to this module) under `scope` ("FeatureExtractor/MnasFPN").
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& scope) const;

 private:
  MnasFpnOptions options_;
  std::shared_ptr<torch::nn::Module> c6_;
  torch::nn::ModuleList cells_{nullptr};
};
TORCH_MODULE(MnasFpn);

}  // namespace orchard::detect
