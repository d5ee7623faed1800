// MobileDets (Xiong et al. 2021) as the TF Object Detection API's ssd_mobiledet_feature_extractor
// builds them: mobiledet_cpu_backbone, mobiledet_dsp_backbone, mobiledet_edgetpu_backbone,
// mobiledet_gpu_backbone, the bases of ssdlite_mobiledet_{cpu,dsp,edgetpu,gpu}_320x320_coco.
//
// A 3x3 stride-2 stem convolution, then blocks of four kinds, every convolution without bias and
// followed by batch norm (epsilon 0.01, decay 0.99: the backbone's own arg scope, not the
// config's); projections are linear; a residual is added where the block list says so:
//   IBNNoExpansion  depthwise k x k / s + act, [squeeze-excite], 1x1 projection
//   IBN             1x1 expansion (in * factor) + act, depthwise k x k / s + act, [SE], 1x1 projection
//   FusedConv       k x k / s expansion (in * factor) + act, 1x1 projection
//   TuckerConv      1x1 to rank_in + act, k x k / s to rank_out + act, 1x1 projection
// CPU: hard-swish h * relu6(h + 3) / 6 and squeeze-excite (global mean, 1x1 with bias + act,
// 1x1 with bias + sigmoid) on every IBN; the others ReLU6 and no SE. All padding is TF 'SAME'.
// Widths: _scale_filters(f, m) = max(8, 8 * int(f * m / 8 + 0.5)) for outputs, SE widths
// (ratio 0.25 of the input) and Tucker ranks; expansions are in * factor, unrounded.
//
// Module names: features.i (features.0 the stem), each conv layer a Sequential-like pair "0"
// (convolution) and "1" (batch norm) under the block's "expand", "depthwise", "reduce",
// "core", "project", and se.fc1 / se.fc2. TF names: <scope>/{Conv | IBN[_n] | FusedConv[_n] |
// TuckerConv[_n] | IBNNoExpansion}/{Conv, Conv_1, Conv_2, SeparableConv2d, SqueezeExcite/Conv[_1]}.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::models {

struct MobileDetOptions {
  std::string variant = "cpu";  // cpu, dsp, edgetpu, gpu
  double depth_multiplier = 1.0;
  double bn_momentum = 0.01, bn_eps = 0.01;  // the backbone's arg scope: decay 0.99, epsilon 0.01
};

class MobileDetImpl : public torch::nn::Module {
 public:
  explicit MobileDetImpl(const MobileDetOptions& options);
  // C4 (stride 16) and C5 (stride 32), the maps the SSD takes.
  std::vector<torch::Tensor> forward(const torch::Tensor& x);
  int64_t c4_channels() const { return out_channels_[static_cast<size_t>(c4_)]; }
  int64_t c5_channels() const { return out_channels_.back(); }
  // "MobileDetCPU", "MobileDetDSP", "MobileDetEdgeTPU", "MobileDetGPU".
  std::string scope() const;
  // TF's name of a variable (`name` relative to this module) under `scope`; throws
  // std::invalid_argument for a name MobileDet does not have.
  std::optional<TfName> tf_name(const std::string& name, const std::string& scope) const;

 private:
  MobileDetOptions options_;
  std::vector<int64_t> out_channels_;
  std::vector<std::string> block_scopes_;  // TF's scope of each features.i
  int64_t c4_ = 0;                         // index of the block whose output is C4
  torch::nn::ModuleList features_{nullptr};
};
TORCH_MODULE(MobileDet);

}  // namespace orchard::models
