#include "orchard/models/mobilenet_v2.h"

#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"

namespace orchard::models {
namespace {

using layers::batch_norm;
using layers::ConvNormActivation;
using layers::ConvNormActivationImpl;
using layers::ConvNormActivationOptions;
using layers::make_divisible;

namespace F = torch::nn::functional;

// One stage of V2_DEF / torchvision's inverted_residual_setting: expansion factor t,
// output channels c, n blocks, the first with stride s.
struct Stage {
  int64_t t, c, n, s;
};
constexpr Stage kStages[] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                             {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
constexpr int64_t kNumFeatures = 19;  // conv + 17 blocks + conv

// expand 1x1 (absent when hidden == in) -> depthwise 3x3 -> project 1x1 (linear), with a
// residual when shapes allow. Children under "conv" are numbered as torchvision's
// (conv.0 expand, conv.1 depthwise, conv.2 project, conv.3 its BN; without expansion
// everything shifts down by one).
class InvertedResidualImpl : public torch::nn::Module, public layers::Quantizable {
 public:
  InvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t hidden, const MobileNetV2Options& o)
      : residual_(stride == 1 && in == out) {
    conv_ = register_module("conv", torch::nn::ModuleList());
    if (hidden != in) {
      expand_ =
          ConvNormActivation(ConvNormActivationOptions(in, hidden, 1).bn_momentum(o.bn_momentum).bn_eps(o.bn_eps));
      conv_->push_back(expand_);
    }
    depthwise_ = ConvNormActivation(ConvNormActivationOptions(hidden, hidden, 3)
                                        .stride(stride)
                                        .groups(hidden)
                                        .tf_same_padding(o.tf_same_padding && stride > 1)
                                        .bn_momentum(o.bn_momentum)
                                        .bn_eps(o.bn_eps));
    conv_->push_back(depthwise_);
    project_ = torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, out, 1).bias(false));
    conv_->push_back(project_);
    project_bn_ = torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out).momentum(o.bn_momentum).eps(o.bn_eps));
    conv_->push_back(project_bn_);
  }

  bool has_expansion() const { return !expand_.is_empty(); }
  // TF's "expansion_output" (the input itself when the block has no expansion).
  torch::Tensor expand(const torch::Tensor& x) { return has_expansion() ? expand_->forward(x) : x; }
  // The block's output given its input x and expand(x).
  torch::Tensor finish(const torch::Tensor& x, const torch::Tensor& expanded) {
    if (weights_quant_) {  // quantization-aware training: the linear projection, then the sum
      auto y = act_quant_->forward(
          layers::quantized_conv_bn(*project_, *project_bn_, *weights_quant_, depthwise_->forward(expanded), false));
      return residual_ ? add_quant_->forward(y + x) : y;
    }
    auto y = batch_norm(*project_bn_, project_->forward(depthwise_->forward(expanded)));
    return residual_ ? y + x : y;
  }
  // The projection's quantizers ("weights_quant", "act_quant") and the residual sum's ("add_quant").
  void enable_quantization(const std::shared_ptr<layers::QuantizationControl>& control) override {
    weights_quant_ = register_module("weights_quant", layers::FakeQuant(control, true));
    act_quant_ = register_module("act_quant", layers::FakeQuant(control, false));
    if (residual_) add_quant_ = register_module("add_quant", layers::FakeQuant(control, false));
  }
  torch::Tensor forward(const torch::Tensor& x) { return finish(x, expand(x)); }

 private:
  bool residual_;
  layers::FakeQuant weights_quant_{nullptr}, act_quant_{nullptr}, add_quant_{nullptr};
  torch::nn::ModuleList conv_{nullptr};
  ConvNormActivation expand_{nullptr};
  ConvNormActivation depthwise_{nullptr};
  torch::nn::Conv2d project_{nullptr};
  torch::nn::BatchNorm2d project_bn_{nullptr};
};
TORCH_MODULE(InvertedResidual);

}  // namespace

MobileNetV2Endpoint parse_mobilenet_v2_endpoint(const std::string& name) {
  static const std::string kLayer = "layer_", kExpansion = "/expansion_output";
  MobileNetV2Endpoint e;
  std::string rest = name;
  if (rest.size() > kExpansion.size() &&
      rest.compare(rest.size() - kExpansion.size(), kExpansion.size(), kExpansion) == 0) {
    e.expansion_output = true;
    rest.resize(rest.size() - kExpansion.size());
  }
  const bool digits =
      rest.size() > kLayer.size() && rest.size() <= kLayer.size() + 2 && rest.compare(0, kLayer.size(), kLayer) == 0 &&
      std::all_of(rest.begin() + kLayer.size(), rest.end(), [](unsigned char c) { return std::isdigit(c); });
  const int64_t n = digits ? std::stoll(rest.substr(kLayer.size())) : 0;
  TORCH_CHECK(n >= 1 && n <= kNumFeatures && !(e.expansion_output && (n < 3 || n > kNumFeatures - 1)),
              "unknown MobileNetV2 endpoint '", name, "': expected layer_N (N = 1..", kNumFeatures,
              ") or layer_N/expansion_output (N = 3..", kNumFeatures - 1, ")");
  e.index = n - 1;
  return e;
}

MobileNetV2Impl::MobileNetV2Impl(const MobileNetV2Options& o) : options_(o) {
  TORCH_CHECK(o.width_mult > 0, "MobileNetV2 width_mult must be positive, got ", o.width_mult);
  TORCH_CHECK(o.round_nearest >= 1 && o.min_depth >= 1, "MobileNetV2 round_nearest and min_depth must be >= 1");
  const auto depth = [&](double c) { return make_divisible(c * o.width_mult, o.round_nearest, o.min_depth); };

  features_ = register_module("features", torch::nn::ModuleList());
  int64_t in = depth(32);
  features_->push_back(ConvNormActivation(ConvNormActivationOptions(3, in, 3)
                                              .stride(2)
                                              .tf_same_padding(o.tf_same_padding)
                                              .bn_momentum(o.bn_momentum)
                                              .bn_eps(o.bn_eps)));
  out_channels_.push_back(in);
  expansion_channels_.push_back(0);
  for (const Stage& st : kStages) {
    const int64_t out = depth(st.c);
    for (int64_t i = 0; i < st.n; ++i) {
      // TF's expand_input_by_factor (divisible by 8); torchvision's round(in * t) is the same
      // number whenever `in` is a multiple of 8 (always, with the defaults).
      const int64_t hidden =
          st.t == 1 ? in : make_divisible(static_cast<double>(in * st.t), o.round_nearest, o.round_nearest);
      features_->push_back(InvertedResidual(in, out, i == 0 ? st.s : 1, hidden, o));
      out_channels_.push_back(out);
      expansion_channels_.push_back(hidden != in ? hidden : 0);
      in = out;
    }
  }
  TORCH_CHECK(o.include_last_conv || !o.include_top, "MobileNetV2: the classifier needs the last 1x1 convolution");
  last_channels_ = in;
  if (o.include_last_conv) {
    last_channels_ =
        make_divisible(1280 * (o.finegrain_classification_mode ? std::max(1.0, o.width_mult) : o.width_mult),
                       o.round_nearest, o.min_depth);
    features_->push_back(ConvNormActivation(
        ConvNormActivationOptions(in, last_channels_, 1).bn_momentum(o.bn_momentum).bn_eps(o.bn_eps)));
    out_channels_.push_back(last_channels_);
    expansion_channels_.push_back(0);
  }
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(features_->size()) == kNumFeatures - (o.include_last_conv ? 0 : 1));
  if (o.include_top) {
    TORCH_CHECK(o.num_classes >= 1, "MobileNetV2 num_classes must be >= 1 with include_top");
    classifier_ = register_module(
        "classifier",
        torch::nn::Sequential(torch::nn::Dropout(o.dropout), torch::nn::Linear(last_channels_, o.num_classes)));
  }

  // torchvision's initialisation.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    } else if (auto* l = m->as<torch::nn::Linear>()) {
      l->weight.normal_(0, 0.01);
      l->bias.zero_();
    }
  }
}

std::vector<torch::Tensor> MobileNetV2Impl::endpoints(const torch::Tensor& x,
                                                      const std::vector<MobileNetV2Endpoint>& wanted) {
  std::vector<torch::Tensor> out(wanted.size());
  int64_t last = -1;
  bool last_needs_output = false;  // of the deepest block asked for: its output, or only its expansion
  for (const auto& e : wanted) {
    endpoint_channels(e);  // validates
    if (e.index > last) last_needs_output = false;
    last = std::max(last, e.index);
    if (e.index == last && !e.expansion_output) last_needs_output = true;
  }
  torch::Tensor h = x;
  for (int64_t i = 0; i <= last; ++i) {
    const auto& m = features_[i];
    if (auto* block = m->as<InvertedResidualImpl>()) {
      auto expanded = block->expand(h);
      for (size_t j = 0; j < wanted.size(); ++j)
        if (wanted[j].index == i && wanted[j].expansion_output) out[j] = expanded;
      if (i == last && !last_needs_output) break;
      h = block->finish(h, expanded);
    } else {
      h = m->as<ConvNormActivationImpl>()->forward(h);
    }
    for (size_t j = 0; j < wanted.size(); ++j)
      if (wanted[j].index == i && !wanted[j].expansion_output) out[j] = h;
  }
  return out;
}

int64_t MobileNetV2Impl::endpoint_channels(const MobileNetV2Endpoint& e) const {
  TORCH_CHECK(e.index >= 0 && e.index < static_cast<int64_t>(out_channels_.size()), "MobileNetV2 has no layer_",
              e.index + 1, options_.include_last_conv ? "" : " (built to layer_18)");
  if (!e.expansion_output) return out_channels_[e.index];
  TORCH_CHECK(expansion_channels_[e.index] > 0, "MobileNetV2 layer_", e.index + 1, " has no expansion_output");
  return expansion_channels_[e.index];
}

torch::Tensor MobileNetV2Impl::features(torch::Tensor x) {
  torch::Tensor h = x;
  for (const auto& m : *features_) {
    if (auto* block = m->as<InvertedResidualImpl>()) h = block->forward(h);
    else h = m->as<ConvNormActivationImpl>()->forward(h);
  }
  return h.mean({2, 3});
}

torch::Tensor MobileNetV2Impl::forward(torch::Tensor x) {
  auto pooled = features(x);
  return options_.include_top ? classifier_->forward(pooled) : pooled;
}

std::optional<TfName> mobilenet_v2_tf_name(const std::string& name, const std::string& scope) {
  const auto bad = [&] { return std::invalid_argument("not a MobileNetV2 variable: '" + name + "'"); };
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) throw bad();
  const std::string module = name.substr(0, dot), field = name.substr(dot + 1);
  if (module == "classifier.1") {
    if (field == "weight") return TfName{scope + "/Logits/Conv2d_1c_1x1/weights", TfLayout::kConvDense};
    if (field == "bias") return TfName{scope + "/Logits/Conv2d_1c_1x1/biases"};
    throw bad();
  }
  int index = -1, consumed = 0;
  if (std::sscanf(module.c_str(), "features.%d%n", &index, &consumed) != 1 || index < 0 || index >= kNumFeatures)
    throw bad();
  std::string rest = module.substr(static_cast<size_t>(consumed));  // ".0", ".conv.1.0", ...
  // A convolution's weight, or its batch norm's field.
  const auto layer = [&](const std::string& tf_scope, bool is_conv, TfLayout layout) -> std::optional<TfName> {
    if (is_conv) {
      if (field != "weight") throw bad();
      return TfName{scope + "/" + tf_scope + (layout == TfLayout::kDepthwise ? "/depthwise_weights" : "/weights"),
                    layout};
    }
    return tf_batch_norm_name(scope + "/" + tf_scope, field);
  };
  if (index == 0 || index == kNumFeatures - 1) {
    const std::string tf_scope = index == 0 ? "Conv" : "Conv_1";
    if (rest == ".0") return layer(tf_scope, true, TfLayout::kConv);
    if (rest == ".1") return layer(tf_scope, false, TfLayout::kConv);
    throw bad();
  }
  // Inverted residual blocks: torchvision's conv.<i>[.<j>], TF's expand / depthwise / project.
  const std::string block = index == 1 ? "expanded_conv" : "expanded_conv_" + std::to_string(index - 1);
  static const char* const kExpanded[][2] = {{".conv.0.0", "expand"},    {".conv.0.1", "expand"},
                                             {".conv.1.0", "depthwise"}, {".conv.1.1", "depthwise"},
                                             {".conv.2", "project"},     {".conv.3", "project"}};
  static const char* const kPlain[][2] = {
      {".conv.0.0", "depthwise"}, {".conv.0.1", "depthwise"}, {".conv.1", "project"}, {".conv.2", "project"}};
  // features.1 (the t=1 stage) is the one block without an expansion.
  const bool expanded = index != 1;
  const auto* table = expanded ? kExpanded : kPlain;
  const size_t n = expanded ? 6 : 4;
  for (size_t i = 0; i < n; ++i) {
    if (rest != table[i][0]) continue;
    const std::string part = table[i][1];
    const bool is_bn = i % 2 == 1;  // each table lists a convolution, then its batch norm
    const TfLayout layout = part == "depthwise" ? TfLayout::kDepthwise : TfLayout::kConv;
    return layer(block + "/" + part, !is_bn, layout);
  }
  throw bad();
}

}  // namespace orchard::models
