#include "orchard/models/mobilenet_v1.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/init.h"

namespace orchard::models {
namespace {

// MOBILENETV1_CONV_DEFS: (stride, depth) of Conv2d_0 and the 13 separable layers.
struct LayerDef {
  int64_t stride, depth;
};
constexpr LayerDef kLayers[MobileNetV1Impl::kNumLayers] = {{2, 32},  {1, 64},  {2, 128},  {1, 128}, {2, 256},
                                                           {1, 256}, {2, 512}, {1, 512},  {1, 512}, {1, 512},
                                                           {1, 512}, {1, 512}, {2, 1024}, {1, 1024}};

}  // namespace

MobileNetV1Impl::MobileNetV1Impl(const MobileNetV1Options& o) : options_(o) {
  TORCH_CHECK(o.depth_multiplier > 0, "MobileNetV1 depth_multiplier must be positive, got ", o.depth_multiplier);
  TORCH_CHECK(o.min_depth >= 1, "MobileNetV1 min_depth must be >= 1, got ", o.min_depth);
  const auto depth = [&](int64_t d) { return layers::scale_depth(d, o.depth_multiplier, o.min_depth); };
  const auto layer = [&](int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups) {
    return layers::ConvNormActivation(layers::ConvNormActivationOptions(in, out, kernel)
                                          .stride(stride)
                                          .groups(groups)
                                          .tf_same_padding(o.tf_same_padding && stride > 1)
                                          .bn_momentum(o.bn_momentum)
                                          .bn_eps(o.bn_eps));
  };
  features_ = register_module("features", torch::nn::ModuleList());
  int64_t in = depth(kLayers[0].depth);
  features_->push_back(layer(3, in, 3, kLayers[0].stride, 1));
  channels_.push_back(in);
  for (int64_t i = 1; i < kNumLayers; ++i) {
    const int64_t out = depth(kLayers[i].depth);
    // slim.separable_conv2d(num_outputs=None, depth_multiplier=1) then a 1x1 slim.conv2d.
    features_->push_back(torch::nn::Sequential(layer(in, in, 3, kLayers[i].stride, in), layer(in, out, 1, 1, 1)));
    channels_.push_back(out);
    in = out;
  }
  // TF-Slim's mobilenet_v1_arg_scope: truncated_normal_initializer(stddev 0.09) for the
  // weights (a fine-tune checkpoint usually replaces them); BN gamma 1, beta 0.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      layers::truncated_normal_(c->weight, 0.09);
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
}

std::vector<torch::Tensor> MobileNetV1Impl::endpoints(const torch::Tensor& x, const std::vector<int64_t>& layers) {
  int64_t last = -1;
  for (int64_t l : layers) {
    layer_channels(l);  // validates
    last = std::max(last, l);
  }
  std::vector<torch::Tensor> out(layers.size());
  torch::Tensor h = x;
  for (int64_t i = 0; i <= last; ++i) {
    const auto& m = features_[i];
    if (auto* first = m->as<layers::ConvNormActivationImpl>()) h = first->forward(h);
    else h = m->as<torch::nn::SequentialImpl>()->forward(h);
    for (size_t j = 0; j < layers.size(); ++j)
      if (layers[j] == i) out[j] = h;
  }
  return out;
}

int64_t MobileNetV1Impl::layer_channels(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < kNumLayers, "MobileNetV1 has layers 0..", kNumLayers - 1, ", not ", layer);
  return channels_[layer];
}

int64_t parse_mobilenet_v1_endpoint(const std::string& name) {
  int n = -1, consumed = 0;
  const bool zero = name == "Conv2d_0";
  if (!zero && (std::sscanf(name.c_str(), "Conv2d_%d_pointwise%n", &n, &consumed) != 1 ||
                consumed != static_cast<int>(name.size()) || n < 1 || n >= MobileNetV1Impl::kNumLayers))
    TORCH_CHECK(false, "unknown MobileNetV1 endpoint '", name, "': expected Conv2d_0 or Conv2d_N_pointwise (N = 1..",
                MobileNetV1Impl::kNumLayers - 1, ")");
  return zero ? 0 : n;
}

std::optional<TfName> mobilenet_v1_tf_name(const std::string& name, const std::string& scope) {
  const auto bad = [&] { return std::invalid_argument("not a MobileNetV1 variable: '" + name + "'"); };
  int index = -1, consumed = 0;
  if (std::sscanf(name.c_str(), "features.%d%n", &index, &consumed) != 1 || index < 0 ||
      index >= MobileNetV1Impl::kNumLayers)
    throw bad();
  const size_t dot = name.rfind('.');
  const std::string rest = name.substr(static_cast<size_t>(consumed), dot - static_cast<size_t>(consumed));
  const std::string field = name.substr(dot + 1);
  std::string layer;
  std::string part;  // ".0" the convolution, ".1" its batch norm
  bool depthwise = false;
  if (index == 0) {
    layer = "Conv2d_0";
    part = rest;
  } else if (rest.size() == 4 && (rest.compare(0, 2, ".0") == 0 || rest.compare(0, 2, ".1") == 0)) {
    depthwise = rest[1] == '0';
    layer = "Conv2d_" + std::to_string(index) + (depthwise ? "_depthwise" : "_pointwise");
    part = rest.substr(2);
  } else {
    throw bad();
  }
  const std::string tf_scope = scope + "/" + layer;
  if (part == ".0") {
    if (field != "weight") throw bad();
    return depthwise ? TfName{tf_scope + "/depthwise_weights", TfLayout::kDepthwise}
                     : TfName{tf_scope + "/weights", TfLayout::kConv};
  }
  if (part == ".1") return tf_batch_norm_name(tf_scope, field);
  throw bad();
}

}  // namespace orchard::models
