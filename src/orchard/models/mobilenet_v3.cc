#include "orchard/models/mobilenet_v3.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "orchard/layers/activation.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/init.h"
#include "orchard/layers/squeeze_excite.h"

namespace orchard::models {
namespace {

using layers::make_divisible;
using layers::truncated_normal_;
using Act = layers::Activation;  // kHardSwish: x * relu6(x + 3) / 6, TF-Slim's hard_swish

// One row of V3_LARGE / V3_SMALL: a convolution (expansion 0) or an inverted residual block.
struct LayerDef {
  int64_t kernel, stride;
  double expansion;  // 0: a plain slim.conv2d layer
  int64_t outputs;
  Act act;
  bool se;
  bool fused = false;    // mbv3_fused: expand is the k x k stride-s convolution, no depthwise
  bool residual = true;  // expanded_conv's residual flag (added when the shapes allow)
};
constexpr Act R = Act::kRelu, H = Act::kHardSwish;
constexpr LayerDef kLarge[] = {
    {3, 2, 0, 16, H, false},         {3, 1, 1, 16, R, false},         {3, 2, 4, 24, R, false},
    {3, 1, 3, 24, R, false},         {5, 2, 3, 40, R, true},          {5, 1, 3, 40, R, true},
    {5, 1, 3, 40, R, true},          {3, 2, 6, 80, H, false},         {3, 1, 2.5, 80, H, false},
    {3, 1, 184 / 80., 80, H, false}, {3, 1, 184 / 80., 80, H, false}, {3, 1, 6, 112, H, true},
    {3, 1, 6, 112, H, true},         {5, 2, 6, 160, H, true},         {5, 1, 6, 160, H, true},
    {5, 1, 6, 160, H, true},         {1, 1, 0, 960, H, false}};
constexpr LayerDef kSmall[] = {{3, 2, 0, 16, H, false},        {3, 2, 1, 16, R, true}, {3, 2, 72. / 16, 24, R, false},
                               {3, 1, 88. / 24, 24, R, false}, {5, 2, 4, 40, H, true}, {5, 1, 6, 40, H, true},
                               {5, 1, 6, 40, H, true},         {5, 1, 3, 48, H, true}, {5, 1, 3, 48, H, true},
                               {5, 2, 6, 96, H, true},         {5, 1, 6, 96, H, true}, {5, 1, 6, 96, H, true},
                               {1, 1, 0, 576, H, false}};
// V3_EDGETPU through layer_23 (ReLU, no SE): fused blocks, then depthwise ones.
constexpr LayerDef kEdgeTpu[] = {
    {3, 2, 0, 32, R, false},       {3, 1, 1, 16, R, false, true}, {3, 2, 8, 32, R, false, true},
    {3, 1, 4, 32, R, false, true}, {3, 1, 4, 32, R, false, true}, {3, 1, 4, 32, R, false, true},
    {3, 2, 8, 48, R, false, true}, {3, 1, 4, 48, R, false, true}, {3, 1, 4, 48, R, false, true},
    {3, 1, 4, 48, R, false, true}, {3, 2, 8, 96, R, false},       {3, 1, 4, 96, R, false},
    {3, 1, 4, 96, R, false},       {3, 1, 4, 96, R, false},       {3, 1, 8, 96, R, false, false, false},
    {3, 1, 4, 96, R, false},       {3, 1, 4, 96, R, false},       {3, 1, 4, 96, R, false},
    {5, 2, 8, 160, R, false},      {5, 1, 4, 160, R, false},      {5, 1, 4, 160, R, false},
    {5, 1, 4, 160, R, false},      {3, 1, 8, 192, R, false}};
// _reduce_consecutive_layers(V3_LARGE, 13, 16) / (V3_SMALL, 9, 12): the first halved layer.
constexpr int64_t kLargeDetectionFirst = 13, kSmallDetectionFirst = 9;

// slim.conv2d (or separable_conv2d with num_outputs None: groups == channels), no bias, then
// batch norm and the activation. Children "0" and "1".
layers::ConvNormActivation conv_bn(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups, Act act,
                                   bool tf_same, const MobileNetV3Options& o) {
  return layers::ConvNormActivation(layers::ConvNormActivationOptions(in, out, kernel)
                                        .stride(stride)
                                        .groups(groups)
                                        .tf_same_padding(tf_same)
                                        .bn_momentum(o.bn_momentum)
                                        .bn_eps(o.bn_eps)
                                        .activation(act));
}

// conv_blocks.squeeze_excite(squeeze_factor=4, inner ReLU, gating relu6(x + 3) * 0.16667).
layers::SqueezeExcite squeeze_excite(int64_t channels, int64_t squeeze) {
  return layers::SqueezeExcite(layers::SqueezeExciteOptions(channels, squeeze)
                                   .inner(layers::Activation::kRelu)
                                   .gate(layers::Activation::kHardSigmoid));
}

// conv_blocks.expanded_conv: expand (when wider than the input) -> depthwise -> SE -> project,
// plus the input when the stride is 1 and the depth unchanged.
class BlockImpl : public torch::nn::Module, public layers::Quantizable {
 public:
  BlockImpl(int64_t in, int64_t hidden, int64_t out, const LayerDef& d, const MobileNetV3Options& o)
      : residual_(d.residual && d.stride == 1 && in == out) {
    const bool same = o.tf_same_padding && d.stride > 1;
    if (d.fused) {
      TORCH_CHECK(hidden > in || d.stride == 1, "MobileNetV3: a fused block without expansion cannot stride");
      if (hidden > in) expand_ = register_module("expand", conv_bn(in, hidden, d.kernel, d.stride, 1, d.act, same, o));
    } else {
      if (hidden > in) expand_ = register_module("expand", conv_bn(in, hidden, 1, 1, 1, d.act, false, o));
      depthwise_ = register_module("depthwise", conv_bn(hidden, hidden, d.kernel, d.stride, hidden, d.act, same, o));
    }
    if (d.se) se_ = register_module("se", squeeze_excite(hidden, make_divisible(hidden / 4.0, 8, 8)));
    project_ = register_module("project", conv_bn(std::max(hidden, in), out, 1, 1, 1, Act::kNone, false, o));
  }
  torch::Tensor expand(const torch::Tensor& x) { return expand_ ? expand_->forward(x) : x; }
  torch::Tensor finish(const torch::Tensor& x, const torch::Tensor& expanded) {
    auto h = depthwise_ ? depthwise_->forward(expanded) : expanded;
    if (se_) h = se_->forward(h);
    h = project_->forward(h);
    if (!residual_) return h;
    return add_quant_ ? add_quant_->forward(h + x) : h + x;
  }
  // The layers' own quantizers come from their ConvNormActivations; the residual sum's here
  // ("add_quant"). Squeeze-excite (MobileNetV3 proper) is not written for quantization.
  void enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) override {
    if (se_) throw std::invalid_argument("quantization-aware training of squeeze-excite is not implemented");
    if (residual_) add_quant_ = register_module("add_quant", layers::FakeQuant(control, false));
  }

 private:
  bool residual_;
  layers::FakeQuant add_quant_{nullptr};
  layers::ConvNormActivation expand_{nullptr}, depthwise_{nullptr}, project_{nullptr};
  layers::SqueezeExcite se_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

MobileNetV3Impl::MobileNetV3Impl(const MobileNetV3Options& o) : options_(o) {
  TORCH_CHECK(o.depth_multiplier > 0, "MobileNetV3 depth_multiplier must be positive, got ", o.depth_multiplier);
  TORCH_CHECK(o.min_depth >= 1, "MobileNetV3 min_depth must be >= 1, got ", o.min_depth);
  const LayerDef* defs = o.edgetpu ? kEdgeTpu : o.small ? kSmall : kLarge;
  const int64_t n = o.edgetpu ? std::size(kEdgeTpu) : o.small ? std::size(kSmall) : std::size(kLarge);
  const int64_t halved_from = o.detection && !o.edgetpu ? (o.small ? kSmallDetectionFirst : kLargeDetectionFirst) : n;
  features_ = register_module("features", torch::nn::ModuleList());
  int64_t in = 3;
  for (int64_t i = 0; i < n; ++i) {
    const LayerDef& d = defs[i];
    const double outputs = i >= halved_from ? std::round(d.outputs * 0.5) : static_cast<double>(d.outputs);
    const int64_t out = make_divisible(outputs * o.depth_multiplier, 8, o.min_depth);
    if (d.expansion == 0) {
      features_->push_back(conv_bn(in, out, d.kernel, d.stride, 1, d.act, o.tf_same_padding && d.stride > 1, o));
      expansion_channels_.push_back(-1);
    } else {
      const int64_t hidden = make_divisible(static_cast<double>(in) * d.expansion, 8, 8);
      features_->push_back(Block(in, hidden, out, d, o));
      expansion_channels_.push_back(hidden > in ? hidden : 0);
    }
    out_channels_.push_back(out);
    in = out;
  }
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      truncated_normal_(c->weight, o.init_stddev);
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
}

std::vector<torch::Tensor> MobileNetV3Impl::endpoints(const torch::Tensor& x,
                                                      const std::vector<MobileNetV3Endpoint>& wanted) {
  int64_t last = -1;
  for (const auto& e : wanted) {
    endpoint_channels(e);  // validates
    last = std::max(last, e.index);
  }
  std::vector<torch::Tensor> out(wanted.size());
  torch::Tensor h = x;
  for (int64_t i = 0; i <= last; ++i) {
    if (auto* block = features_[i]->as<BlockImpl>()) {
      auto expanded = block->expand(h);
      for (size_t j = 0; j < wanted.size(); ++j)
        if (wanted[j].index == i && wanted[j].expansion_output) out[j] = expanded;
      h = block->finish(h, expanded);
    } else {
      h = features_[i]->as<layers::ConvNormActivationImpl>()->forward(h);
    }
    for (size_t j = 0; j < wanted.size(); ++j)
      if (wanted[j].index == i && !wanted[j].expansion_output) out[j] = h;
  }
  return out;
}

int64_t MobileNetV3Impl::endpoint_channels(const MobileNetV3Endpoint& e) const {
  TORCH_CHECK(e.index >= 0 && e.index < num_layers(), "MobileNetV3 has layer_1..layer_", num_layers(), ", not layer_",
              e.index + 1);
  if (!e.expansion_output) return out_channels_[e.index];
  TORCH_CHECK(expansion_channels_[e.index] > 0, "MobileNetV3 layer_", e.index + 1, " has no expansion_output");
  return expansion_channels_[e.index];
}

MobileNetV3Endpoint MobileNetV3Impl::parse_endpoint(const std::string& name) const {
  static const std::string kExpansion = "/expansion_output";
  MobileNetV3Endpoint e;
  std::string rest = name;
  if (rest.size() > kExpansion.size() &&
      rest.compare(rest.size() - kExpansion.size(), kExpansion.size(), kExpansion) == 0) {
    e.expansion_output = true;
    rest.resize(rest.size() - kExpansion.size());
  }
  int n = -1, consumed = 0;
  TORCH_CHECK(std::sscanf(rest.c_str(), "layer_%d%n", &n, &consumed) == 1 &&
                  consumed == static_cast<int>(rest.size()) && n >= 1 && n <= num_layers(),
              "unknown MobileNetV3 endpoint '", name, "': expected layer_N or layer_N/expansion_output, N = 1..",
              num_layers());
  e.index = n - 1;
  endpoint_channels(e);
  return e;
}

std::optional<TfName> MobileNetV3Impl::tf_name(const std::string& name, const std::string& scope) const {
  const auto bad = [&] { return std::invalid_argument("not a MobileNetV3 variable: '" + name + "'"); };
  int index = -1, consumed = 0;
  if (std::sscanf(name.c_str(), "features.%d%n", &index, &consumed) != 1 || index < 0 || index >= num_layers())
    throw bad();
  const size_t dot = name.rfind('.');
  const std::string module = name.substr(static_cast<size_t>(consumed), dot - static_cast<size_t>(consumed));
  const std::string field = name.substr(dot + 1);
  const auto conv_bn = [&](const std::string& layer_scope, const std::string& part, bool depthwise) {
    if (part == ".0") {
      if (field != "weight") throw bad();
      return depthwise ? std::optional<TfName>(TfName{layer_scope + "/depthwise_weights", TfLayout::kDepthwise})
                       : std::optional<TfName>(TfName{layer_scope + "/weights", TfLayout::kConv});
    }
    if (part == ".1") return tf_batch_norm_name(layer_scope, field);
    throw bad();
  };
  if (expansion_channels_[index] < 0) {
    // slim.conv2d's default scopes: the first Conv, the last Conv_1.
    return conv_bn(scope + (index == 0 ? "/Conv" : "/Conv_1"), module, false);
  }
  const std::string block = scope + "/expanded_conv" + (index == 1 ? "" : "_" + std::to_string(index - 1));
  for (const char* part : {"expand", "depthwise", "project"}) {
    const std::string prefix = std::string(".") + part;
    if (module.rfind(prefix, 0) == 0)
      return conv_bn(block + "/" + part, module.substr(prefix.size()), std::string(part) == "depthwise");
  }
  for (const auto& [child, tf] :
       {std::pair{".se.fc1", "/squeeze_excite/Conv"}, std::pair{".se.fc2", "/squeeze_excite/Conv_1"}}) {
    if (module != child) continue;
    if (field == "weight") return TfName{block + tf + "/weights", TfLayout::kConv};
    if (field == "bias") return TfName{block + tf + "/biases"};
  }
  throw bad();
}

}  // namespace orchard::models
