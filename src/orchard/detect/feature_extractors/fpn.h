// The OD API's feature pyramid top-down pathway (feature_map_generators.fpn_top_down_feature_maps,
// used by the ssd_*_fpn feature extractors): the coarsest base feature map is projected to
// `depth` channels by a 1x1 convolution with bias (no batch norm, no activation); each finer one
// is the 2x nearest-neighbour upsampling of the level above plus the 1x1 projection of its base
// map, then smoothed by a 3x3 convolution + batch norm + ReLU6 (the conv_hyperparams).
//
// Module names (k = 0 for the finest base map):
//   projection.<k>.{weight,bias}   TF fpn/projection_<k+1>
//   smoothing.<k>.{0,1}.*          TF fpn/smoothing_<k+1> (every level but the coarsest); with
//                                  use_depthwise (FPN-lite) a SeparableConv: smoothing.<k>.0 the
//                                  3x3 depthwise conv, smoothing.<k>.1.{0,1} the 1x1 conv + BN
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/layers/fake_quant.h"
#include "orchard/models/tf_names.h"

namespace orchard::detect {

// slim.separable_conv2d(depth_multiplier=1) under conv_hyperparams: a kernel x kernel depthwise
// convolution ('SAME', no bias, no normalisation) then a 1x1 convolution + batch norm + ReLU6.
// Children "0" (the depthwise Conv2d) and "1" (a layers::ConvNormActivation); TF names
// <scope>/depthwise_weights, <scope>/pointwise_weights, <scope>/BatchNorm/*.
// Under quantization-aware training the depthwise conv has its own quantizers ("weights_quant",
// "act_quant"; TF <scope>/depthwise/...), the 1x1 ConvNormActivation its own.
class SeparableConvImpl : public torch::nn::Module, public layers::Quantizable {
 public:
  // tf_same: the depthwise conv padded as TF's 'SAME'; false: (kernel - 1) / 2 on each side
  // (use_explicit_padding).
  SeparableConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, double bn_momentum, double bn_eps,
                    bool tf_same = true);
  torch::Tensor forward(const torch::Tensor& x);
  void enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) override;
  bool tf_same = true;
  torch::nn::Conv2d depthwise{nullptr};
  std::shared_ptr<torch::nn::Module> pointwise;
  layers::FakeQuant weights_quant{nullptr}, act_quant{nullptr};  // the depthwise conv's, under quantization
};
TORCH_MODULE(SeparableConv);

// The TF name of a variable of a conv-BN-ReLU6 layer under `scope`: a layers::ConvNormActivation
// (".0.weight", ".1.<bn field>", quantizers ".weights_quant.min" ...) or a SeparableConv
// (".0.weight" depthwise, ".1.0.weight", ".1.1.<bn field>"; quantizers: the depthwise conv's
// ".act_quant.max" ..., TF <scope>/depthwise/act_quant/max, the 1x1's ".1.act_quant.max" ...);
// `rest` is the name after the layer's own.
std::optional<models::TfName> conv_layer_tf_name(const std::string& scope, const std::string& rest, bool separable);

struct FpnOptions {
  std::vector<int64_t> in_channels;  // of the base feature maps, finest first
  int64_t depth = 256;
  double bn_momentum = 0.003, bn_eps = 0.001;
  bool use_depthwise = false;  // separable smoothing convolutions (FPN-lite)
};

// Under quantization-aware training each projection has its quantizers (projection_quant.<k>:
// weights_quant, act_quant; TF fpn/projection_<k+1>/...) and each sum of a level its own
// (top_down_quant.<k>.add_quant; TF fpn/top_down_<k+1>/add_quant); the smoothing layers quantize
// themselves.
class FpnTopDownImpl : public torch::nn::Module, public layers::Quantizable {
 public:
  explicit FpnTopDownImpl(const FpnOptions& options);
  void enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) override;
  // base maps, finest first, each half the size (rounded up) of the one before -> the
  // top-down maps, finest first, each `depth` channels at its base map's size (an upsampled map
  // larger than the finer base map, from an odd size, is cropped at the bottom/right).
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& base);
  // TF's name under "<scope>/fpn/" of a variable named without the module's prefix.
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& fpn_scope) const;

 private:
  torch::Tensor project(size_t k, const torch::Tensor& x);

  FpnOptions options_;
  torch::nn::ModuleList projection_{nullptr}, smoothing_{nullptr};
  torch::nn::ModuleList projection_quant_{nullptr}, add_quant_{nullptr};  // under quantization
};
TORCH_MODULE(FpnTopDown);

}  // namespace orchard::detect
