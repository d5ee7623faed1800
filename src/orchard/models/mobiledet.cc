#include "orchard/models/mobiledet.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "orchard/layers/activation.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/init.h"
#include "orchard/layers/squeeze_excite.h"

namespace orchard::models {
namespace {

using layers::scale_filters;
using layers::truncated_normal_;
using Act = layers::Activation;  // kHardSwish: the OD API's _swish6, h * relu6(h + 3) / 6

enum class Kind { kStem, kIbnNoExpansion, kIbn, kFused, kTucker };

// One call of ssd_mobiledet_feature_extractor's block helpers, at depth multiplier 1.
struct BlockDef {
  Kind kind;
  int64_t kernel, stride;
  double expansion;  // IBN / FusedConv: in * expansion; TuckerConv: the input rank ratio
  int64_t filters;
  bool residual;
  double output_rank = 0;  // TuckerConv
};
constexpr Kind S = Kind::kStem, N = Kind::kIbnNoExpansion, I = Kind::kIbn, F = Kind::kFused, T = Kind::kTucker;

constexpr BlockDef kCpu[] = {
    {S, 3, 2, 0, 16, false}, {N, 3, 1, 0, 8, false},  {I, 3, 2, 4, 16, false}, {I, 3, 2, 8, 32, false},
    {I, 3, 1, 4, 32, true},  {I, 3, 1, 4, 32, true},  {I, 3, 1, 4, 32, true},  {I, 5, 2, 8, 72, false},
    {I, 3, 1, 8, 72, true},  {I, 5, 1, 4, 72, true},  {I, 3, 1, 4, 72, true},  {I, 3, 1, 8, 72, false},
    {I, 3, 1, 8, 72, true},  {I, 3, 1, 8, 72, true},  {I, 3, 1, 8, 72, true},  {I, 5, 2, 8, 104, false},
    {I, 5, 1, 4, 104, true}, {I, 5, 1, 4, 104, true}, {I, 3, 1, 4, 104, true}, {I, 3, 1, 8, 144, false}};
constexpr BlockDef kDsp[] = {
    {S, 3, 2, 0, 32, false}, {N, 3, 1, 0, 24, false},          {F, 3, 2, 4, 32, false},  {F, 3, 1, 4, 32, true},
    {I, 3, 1, 4, 32, true},  {T, 3, 1, 0.25, 32, true, 0.75},  {F, 3, 2, 8, 64, false},  {I, 3, 1, 4, 64, true},
    {F, 3, 1, 4, 64, true},  {F, 3, 1, 4, 64, true},           {F, 3, 2, 8, 120, false}, {I, 3, 1, 4, 120, true},
    {I, 3, 1, 8, 120, true}, {I, 3, 1, 8, 120, true},          {F, 3, 1, 8, 144, false}, {I, 3, 1, 8, 144, true},
    {I, 3, 1, 8, 144, true}, {I, 3, 1, 8, 144, true},          {I, 3, 2, 4, 160, false}, {I, 3, 1, 4, 160, true},
    {F, 3, 1, 4, 160, true}, {T, 3, 1, 0.75, 160, true, 0.75}, {I, 3, 1, 8, 240, false}};
constexpr BlockDef kEdgeTpu[] = {
    {S, 3, 2, 0, 32, false}, {T, 3, 1, 0.25, 16, false, 0.75}, {F, 3, 2, 8, 16, false},  {F, 3, 1, 4, 16, true},
    {F, 3, 1, 8, 16, true},  {F, 3, 1, 4, 16, true},           {F, 5, 2, 8, 40, false},  {F, 3, 1, 4, 40, true},
    {F, 3, 1, 4, 40, true},  {F, 3, 1, 4, 40, true},           {I, 3, 2, 8, 72, false},  {I, 3, 1, 8, 72, true},
    {F, 3, 1, 4, 72, true},  {F, 3, 1, 4, 72, true},           {I, 5, 1, 8, 96, false},  {I, 5, 1, 8, 96, true},
    {I, 3, 1, 8, 96, true},  {I, 3, 1, 8, 96, true},           {I, 5, 2, 8, 120, false}, {I, 3, 1, 8, 120, true},
    {I, 5, 1, 4, 120, true}, {I, 3, 1, 8, 120, true},          {I, 5, 1, 8, 384, false}};
constexpr BlockDef kGpu[] = {
    {S, 3, 2, 0, 32, false},         {T, 3, 1, 0.25, 16, false, 0.25}, {F, 3, 2, 8, 32, false},
    {T, 3, 1, 0.25, 32, true, 0.25}, {T, 3, 1, 0.25, 32, true, 0.25},  {T, 3, 1, 0.25, 32, true, 0.25},
    {F, 3, 2, 8, 64, false},         {F, 3, 1, 8, 64, true},           {F, 3, 1, 8, 64, true},
    {F, 3, 1, 4, 64, true},          {F, 3, 2, 8, 128, false},         {F, 3, 1, 4, 128, true},
    {F, 3, 1, 4, 128, true},         {F, 3, 1, 4, 128, true},          {F, 3, 1, 8, 128, false},
    {F, 3, 1, 8, 128, true},         {F, 3, 1, 8, 128, true},          {F, 3, 1, 8, 128, true},
    {F, 3, 2, 4, 128, false},        {F, 3, 1, 4, 128, true},          {F, 3, 1, 4, 128, true},
    {F, 3, 1, 4, 128, true},         {I, 3, 1, 8, 384, false}};

struct Variant {
  const char* name;
  const char* scope;
  const BlockDef* blocks;
  size_t size;
  int64_t c4;  // the block whose output is C4
  Act act;
  bool se;
};
const Variant kVariants[] = {
    {"cpu", "MobileDetCPU", kCpu, std::size(kCpu), 14, Act::kHardSwish, true},
    {"dsp", "MobileDetDSP", kDsp, std::size(kDsp), 17, Act::kRelu6, false},
    {"edgetpu", "MobileDetEdgeTPU", kEdgeTpu, std::size(kEdgeTpu), 17, Act::kRelu6, false},
    {"gpu", "MobileDetGPU", kGpu, std::size(kGpu), 17, Act::kRelu6, false},
};

const Variant& variant_of(const std::string& name) {
  for (const Variant& v : kVariants)
    if (name == v.name) return v;
  TORCH_CHECK(false, "MobileDet variant '", name, "' is not one of cpu, dsp, edgetpu, gpu");
}

// Convolution ('SAME', no bias) + batch norm + the activation: children "0" and "1".
layers::ConvNormActivation conv_bn(int64_t in, int64_t out, int64_t kernel, int64_t stride, bool depthwise, Act act,
                                   const MobileDetOptions& o) {
  return layers::ConvNormActivation(layers::ConvNormActivationOptions(in, out, kernel)
                                        .stride(stride)
                                        .groups(depthwise ? in : 1)
                                        .tf_same_padding(true)
                                        .bn_momentum(o.bn_momentum)
                                        .bn_eps(o.bn_eps)
                                        .activation(act));
}

// _squeeze_and_excite: global mean, 1x1 (bias) + the block's activation, 1x1 (bias) + sigmoid.
layers::SqueezeExcite squeeze_excite(int64_t channels, int64_t hidden, Act act) {
  return layers::SqueezeExcite(
      layers::SqueezeExciteOptions(channels, hidden).inner(act).gate(layers::Activation::kSigmoid));
}

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t in, int64_t out, const BlockDef& d, Act act, bool se, const MobileDetOptions& o)
      : residual_(d.residual) {
    TORCH_CHECK(!d.residual || (d.stride == 1 && in == out), "MobileDet: a residual block must keep its shape");
    switch (d.kind) {
      case Kind::kStem: add("conv", conv_bn(in, out, d.kernel, d.stride, false, act, o)); return;
      case Kind::kIbnNoExpansion:
        add("depthwise", conv_bn(in, in, d.kernel, d.stride, true, act, o));
        if (se) se_ = register_module("se", squeeze_excite(in, scale_filters(in, 0.25), act));
        break;
      case Kind::kIbn: {
        const auto e = static_cast<int64_t>(static_cast<double>(in) * d.expansion);
        add("expand", conv_bn(in, e, 1, 1, false, act, o));
        add("depthwise", conv_bn(e, e, d.kernel, d.stride, true, act, o));
        if (se) se_ = register_module("se", squeeze_excite(e, scale_filters(e, 0.25), act));
        in = e;
        break;
      }
      case Kind::kFused: {
        const auto e = static_cast<int64_t>(static_cast<double>(in) * d.expansion);
        add("expand", conv_bn(in, e, d.kernel, d.stride, false, act, o));
        in = e;
        break;
      }
      case Kind::kTucker: {
        const int64_t rank_in = scale_filters(in, d.expansion), rank_out = scale_filters(out, d.output_rank);
        add("reduce", conv_bn(in, rank_in, 1, 1, false, act, o));
        add("core", conv_bn(rank_in, rank_out, d.kernel, d.stride, false, act, o));
        in = rank_out;
        break;
      }
    }
    add("project", conv_bn(in, out, 1, 1, false, Act::kNone, o));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x;
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (se_ && names_[i] == "project") h = se_->forward(h);
      h = layers_[i]->forward(h);
    }
    return residual_ ? h + x : h;
  }

 private:
  void add(const std::string& name, layers::ConvNormActivation layer) {
    layers_.push_back(register_module(name, layer));
    names_.push_back(name);
  }
  bool residual_;
  std::vector<layers::ConvNormActivation> layers_;
  std::vector<std::string> names_;
  layers::SqueezeExcite se_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

MobileDetImpl::MobileDetImpl(const MobileDetOptions& o) : options_(o) {
  TORCH_CHECK(o.depth_multiplier > 0, "MobileDet depth_multiplier must be positive, got ", o.depth_multiplier);
  const Variant& v = variant_of(o.variant);
  c4_ = v.c4;
  features_ = register_module("features", torch::nn::ModuleList());
  std::map<std::string, int> used;  // TF's default_name uniquification per block type
  int64_t in = 3;
  for (size_t i = 0; i < v.size; ++i) {
    const BlockDef& d = v.blocks[i];
    const int64_t out = scale_filters(static_cast<double>(d.filters), o.depth_multiplier);
    features_->push_back(
        Block(in, out, d, v.act, v.se && (d.kind == Kind::kIbn || d.kind == Kind::kIbnNoExpansion), o));
    const char* type = d.kind == Kind::kStem             ? "Conv"
                       : d.kind == Kind::kIbnNoExpansion ? "IBNNoExpansion"
                       : d.kind == Kind::kIbn            ? "IBN"
                       : d.kind == Kind::kFused          ? "FusedConv"
                                                         : "TuckerConv";
    const int n = used[type]++;
    block_scopes_.push_back(n == 0 ? type : std::string(type) + "_" + std::to_string(n));
    out_channels_.push_back(out);
    in = out;
  }
  // The backbone's initializers: he_normal convolutions (fan in), truncated normal depthwise
  // ones (stddev sqrt(2 / k^2) / 0.8796); batch norm gamma 1, beta 0; SE biases 0.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      const int64_t k = c->weight.size(2) * c->weight.size(3);
      if (c->options.groups() > 1)
        truncated_normal_(c->weight, std::sqrt(2.0 / static_cast<double>(k)) / 0.87962566103423978);
      else
        truncated_normal_(c->weight, std::sqrt(2.0 / static_cast<double>(k * c->weight.size(1))) / 0.87962566103423978);
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
}

std::vector<torch::Tensor> MobileDetImpl::forward(const torch::Tensor& x) {
  std::vector<torch::Tensor> out;
  torch::Tensor h = x;
  for (size_t i = 0; i < features_->size(); ++i) {
    h = features_[i]->as<BlockImpl>()->forward(h);
    if (static_cast<int64_t>(i) == c4_) out.push_back(h);
  }
  out.push_back(h);
  return out;
}

std::string MobileDetImpl::scope() const { return variant_of(options_.variant).scope; }

std::optional<TfName> MobileDetImpl::tf_name(const std::string& name, const std::string& scope) const {
  const auto bad = [&] { return std::invalid_argument("not a MobileDet variable: '" + name + "'"); };
  int index = -1, consumed = 0;
  if (std::sscanf(name.c_str(), "features.%d%n", &index, &consumed) != 1 || index < 0 ||
      index >= static_cast<int>(block_scopes_.size()) || name[static_cast<size_t>(consumed)] != '.')
    throw bad();
  const std::string rest = name.substr(static_cast<size_t>(consumed) + 1);  // e.g. "expand.1.weight"
  const size_t dot = rest.rfind('.');
  const std::string module = rest.substr(0, dot), field = rest.substr(dot + 1);
  const std::string& block = block_scopes_[static_cast<size_t>(index)];
  const std::string prefix = scope + "/" + (index == 0 ? "" : block + "/");
  if (module == "se.fc1" || module == "se.fc2") {
    const std::string se = prefix + (module == "se.fc1" ? "SqueezeExcite/Conv" : "SqueezeExcite/Conv_1");
    if (field == "weight") return TfName{se + "/weights", TfLayout::kConv};
    if (field == "bias") return TfName{se + "/biases"};
    throw bad();
  }
  const size_t part_dot = module.rfind('.');
  if (part_dot == std::string::npos) throw bad();
  const std::string layer = module.substr(0, part_dot), part = module.substr(part_dot + 1);
  // The scope of each conv layer inside its block (slim's default names, uniquified in order).
  const bool no_expansion = block.rfind("IBNNoExpansion", 0) == 0;
  std::string tf;
  if (layer == "conv" && index == 0) tf = "Conv";
  else if (layer == "depthwise") tf = "SeparableConv2d";
  else if (layer == "expand" || layer == "reduce") tf = "Conv";
  else if (layer == "core") tf = "Conv_1";
  else if (layer == "project") tf = no_expansion ? "Conv" : block.rfind("TuckerConv", 0) == 0 ? "Conv_2" : "Conv_1";
  else throw bad();
  const std::string layer_scope = prefix + tf;
  if (part == "0") {
    if (field != "weight") throw bad();
    if (layer == "depthwise") return TfName{layer_scope + "/depthwise_weights", TfLayout::kDepthwise};
    return TfName{layer_scope + "/weights", TfLayout::kConv};
  }
  if (part == "1") return tf_batch_norm_name(layer_scope, field);
  throw bad();
}

}  // namespace orchard::models
