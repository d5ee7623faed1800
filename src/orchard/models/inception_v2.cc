#include "orchard/models/inception_v2.h"

#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <stdexcept>

#include "orchard/layers/activation.h"
#include "orchard/layers/batch_norm.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/init.h"
#include "orchard/layers/tf_same.h"

namespace orchard::models {
namespace {

using layers::batch_norm;
using layers::conv2d_tf_same;
using layers::max_pool2d_tf_same;

torch::Tensor activation(const torch::Tensor& x, bool relu6) {
  return layers::activate(relu6 ? layers::Activation::kRelu6 : layers::Activation::kRelu, x);
}

// slim.conv2d under the config's arg scope: conv ('SAME', no bias), batch norm, ReLU6 (or ReLU).
class UnitImpl : public torch::nn::Module {
 public:
  UnitImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, const InceptionV2Options& o) : relu6(o.relu6) {
    conv = register_module("conv",
                           torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).bias(false)));
    bn = register_module(
        "bn", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out).momentum(o.bn_momentum).eps(o.bn_eps)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return activation(batch_norm(*bn, conv2d_tf_same(*conv, x)), relu6); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  bool relu6 = true;
};
TORCH_MODULE(Unit);

// Conv2d_1a_7x7: slim.separable_conv2d(depth(64), [7, 7], depth_multiplier=m, stride 2): the
// depthwise and pointwise convolutions back to back, then batch norm and ReLU6.
class SeparableStemImpl : public torch::nn::Module {
 public:
  SeparableStemImpl(int64_t multiplier, int64_t out, const InceptionV2Options& o) : relu6(o.relu6) {
    depthwise = register_module(
        "depthwise", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 3 * multiplier, 7).stride(2).groups(3).bias(false)));
    pointwise =
        register_module("pointwise", torch::nn::Conv2d(torch::nn::Conv2dOptions(3 * multiplier, out, 1).bias(false)));
    bn = register_module(
        "bn", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out).momentum(o.bn_momentum).eps(o.bn_eps)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return activation(batch_norm(*bn, pointwise->forward(conv2d_tf_same(*depthwise, x))), relu6);
  }
  torch::nn::Conv2d depthwise{nullptr}, pointwise{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  bool relu6 = true;
};
TORCH_MODULE(SeparableStem);

enum class Pool { kNone, kAvg, kMax };

// One branch: units and at most one pool, in order.
class BranchImpl : public torch::nn::Module {
 public:
  void add_unit(const std::string& name, Unit unit) { steps_.push_back({register_module(name, unit), Pool::kNone, 1}); }
  void add_pool(Pool pool, int64_t stride) { steps_.push_back({Unit{nullptr}, pool, stride}); }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& s : steps_) {
      if (s.unit) x = s.unit->forward(x);
      else if (s.pool == Pool::kMax) x = max_pool2d_tf_same(x, 3, s.stride);
      else  // 3x3 stride 1 'SAME' average pool
        x = layers::avg_pool2d_tf_same(x, 3);
    }
    return x;
  }

 private:
  struct Step {
    Unit unit;
    Pool pool;
    int64_t stride;
  };
  std::vector<Step> steps_;
};
TORCH_MODULE(Branch);

class MixedImpl : public torch::nn::Module {
 public:
  Branch add_branch() {
    branches_.push_back(register_module("Branch_" + std::to_string(branches_.size()), Branch()));
    return branches_.back();
  }
  torch::Tensor forward(const torch::Tensor& x) {
    std::vector<torch::Tensor> outs;
    for (auto& b : branches_) outs.push_back(b->forward(x));
    return torch::cat(outs, 1);
  }
  int64_t channels = 0;

 private:
  std::vector<Branch> branches_;
};
TORCH_MODULE(Mixed);

}  // namespace

InceptionV2Impl::InceptionV2Impl(const InceptionV2Options& o) {
  TORCH_CHECK(o.depth_multiplier > 0, "InceptionV2 depth_multiplier must be positive, got ", o.depth_multiplier);
  const auto depth = [&](int64_t d) { return layers::scale_depth(d, o.depth_multiplier, o.min_depth); };
  static const std::vector<std::string> kMixed = {"Mixed_3b", "Mixed_3c", "Mixed_4a", "Mixed_4b", "Mixed_4c",
                                                  "Mixed_4d", "Mixed_4e", "Mixed_5a", "Mixed_5b", "Mixed_5c"};
  const auto first = std::find(kMixed.begin(), kMixed.end(), o.first_layer);
  const auto final = std::find(kMixed.begin(), kMixed.end(), o.final_endpoint);
  TORCH_CHECK(o.first_layer == "Conv2d_1a_7x7" || first != kMixed.end(), "InceptionV2 has no layer ", o.first_layer);
  TORCH_CHECK(final != kMixed.end() && (first == kMixed.end() || first <= final), "InceptionV2 cannot end at ",
              o.final_endpoint, " after starting at ", o.first_layer);
  const auto built = [&](const std::string& name) {
    const auto at = std::find(kMixed.begin(), kMixed.end(), name);
    return (first == kMixed.end() || at >= first) && at <= final;
  };
  const int64_t multiplier = std::min<int64_t>(depth(64) / 3, 8);
  stem_multiplier_ = multiplier;
  if (first == kMixed.end()) {
    stem_.push_back(register_module("Conv2d_1a_7x7", SeparableStem(multiplier, depth(64), o)));
    stem_.push_back(register_module("Conv2d_2b_1x1", Unit(depth(64), depth(64), 1, 1, o)));
    stem_.push_back(register_module("Conv2d_2c_3x3", Unit(depth(64), depth(192), 3, 1, o)));
  }
  int64_t in = depth(192);
  // A standard block: Branch_0 1x1; Branch_1 1x1, 3x3; Branch_2 1x1, 3x3, 3x3; Branch_3 pool, 1x1.
  const auto standard = [&](const std::string& name, int64_t b0, int64_t b1a, int64_t b1b, int64_t b2a, int64_t b2b,
                            int64_t b3, Pool pool) {
    Mixed m;
    m->add_branch()->add_unit("Conv2d_0a_1x1", Unit(in, depth(b0), 1, 1, o));
    auto second = m->add_branch();
    second->add_unit("Conv2d_0a_1x1", Unit(in, depth(b1a), 1, 1, o));
    second->add_unit("Conv2d_0b_3x3", Unit(depth(b1a), depth(b1b), 3, 1, o));
    auto third = m->add_branch();
    third->add_unit("Conv2d_0a_1x1", Unit(in, depth(b2a), 1, 1, o));
    third->add_unit("Conv2d_0b_3x3", Unit(depth(b2a), depth(b2b), 3, 1, o));
    third->add_unit("Conv2d_0c_3x3", Unit(depth(b2b), depth(b2b), 3, 1, o));
    auto pooled = m->add_branch();
    pooled->add_pool(pool, 1);
    pooled->add_unit("Conv2d_0b_1x1", Unit(in, depth(b3), 1, 1, o));
    in = depth(b0) + depth(b1b) + depth(b2b) + depth(b3);
    if (!built(name)) return;
    mixed_.push_back(register_module(name, m));
    mixed_names_.push_back(name);
    output_channels_ = in;
  };
  // A reduction: Branch_0 1x1, 3x3 stride 2; Branch_1 1x1, 3x3, 3x3 stride 2; Branch_2 max pool.
  const auto reduction = [&](const std::string& name, int64_t b0a, int64_t b0b, int64_t b1a, int64_t b1b) {
    Mixed m;
    auto first = m->add_branch();
    first->add_unit("Conv2d_0a_1x1", Unit(in, depth(b0a), 1, 1, o));
    first->add_unit("Conv2d_1a_3x3", Unit(depth(b0a), depth(b0b), 3, 2, o));
    auto second = m->add_branch();
    second->add_unit("Conv2d_0a_1x1", Unit(in, depth(b1a), 1, 1, o));
    second->add_unit("Conv2d_0b_3x3", Unit(depth(b1a), depth(b1b), 3, 1, o));
    second->add_unit("Conv2d_1a_3x3", Unit(depth(b1b), depth(b1b), 3, 2, o));
    m->add_branch()->add_pool(Pool::kMax, 2);
    in = depth(b0b) + depth(b1b) + in;
    if (!built(name)) return;
    mixed_.push_back(register_module(name, m));
    mixed_names_.push_back(name);
    output_channels_ = in;
  };
  standard("Mixed_3b", 64, 64, 64, 64, 96, 32, Pool::kAvg);
  standard("Mixed_3c", 64, 64, 96, 64, 96, 64, Pool::kAvg);
  reduction("Mixed_4a", 128, 160, 64, 96);
  standard("Mixed_4b", 224, 64, 96, 96, 128, 128, Pool::kAvg);
  standard("Mixed_4c", 192, 96, 128, 96, 128, 128, Pool::kAvg);
  mixed_4c_channels_ = in;
  standard("Mixed_4d", 160, 128, 160, 128, 160, 96, Pool::kAvg);
  standard("Mixed_4e", 96, 128, 192, 160, 192, 96, Pool::kAvg);
  reduction("Mixed_5a", 128, 192, 192, 256);
  standard("Mixed_5b", 352, 192, 320, 160, 224, 128, Pool::kAvg);
  standard("Mixed_5c", 352, 192, 320, 192, 224, 128, Pool::kMax);
  mixed_5c_channels_ = in;

  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      if (o.relu6) layers::truncated_normal_(c->weight, o.init_stddev);
      else  // slim.conv2d's default: xavier_initializer (uniform, fan average)
        torch::nn::init::xavier_uniform_(c->weight);
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
}

torch::Tensor InceptionV2Impl::forward_layers(const torch::Tensor& x) {
  auto h = x;
  if (!stem_.empty()) {
    h = stem_[0]->as<SeparableStemImpl>()->forward(h);
    h = max_pool2d_tf_same(h, 3, 2);  // MaxPool_2a_3x3
    h = stem_[1]->as<UnitImpl>()->forward(h);
    h = stem_[2]->as<UnitImpl>()->forward(h);
    h = max_pool2d_tf_same(h, 3, 2);  // MaxPool_3a_3x3
  }
  for (auto& m : mixed_) h = m->as<MixedImpl>()->forward(h);
  return h;
}

std::vector<torch::Tensor> InceptionV2Impl::forward(const torch::Tensor& x) {
  TORCH_CHECK(!stem_.empty() && mixed_names_.back() == "Mixed_5c", "InceptionV2::forward needs the whole base");
  auto h = stem_[0]->as<SeparableStemImpl>()->forward(x);
  h = max_pool2d_tf_same(h, 3, 2);  // MaxPool_2a_3x3
  h = stem_[1]->as<UnitImpl>()->forward(h);
  h = stem_[2]->as<UnitImpl>()->forward(h);
  h = max_pool2d_tf_same(h, 3, 2);  // MaxPool_3a_3x3
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < mixed_.size(); ++i) {
    h = mixed_[i]->as<MixedImpl>()->forward(h);
    if (mixed_names_[i] == "Mixed_4c") out.push_back(h);
  }
  out.push_back(h);
  return out;
}

std::optional<TfName> InceptionV2Impl::tf_name(const std::string& name, const std::string& scope) const {
  // Module names are TF's scopes: '.' -> '/', then the variable.
  const size_t last = name.rfind('.');
  const size_t layer = last == std::string::npos ? std::string::npos : name.rfind('.', last - 1);
  if (layer == std::string::npos) throw std::invalid_argument("not an InceptionV2 variable: '" + name + "'");
  std::string path = name.substr(0, layer);
  std::replace(path.begin(), path.end(), '.', '/');
  const std::string part = name.substr(layer + 1, last - layer - 1), field = name.substr(last + 1);
  const std::string prefix = scope + "/" + path;
  if (part == "bn") return tf_batch_norm_name(prefix, field);
  if (field == "weight" && part == "conv") return TfName{prefix + "/weights", TfLayout::kConv};
  if (field == "weight" && part == "depthwise") {
    TfName n{prefix + "/depthwise_weights", TfLayout::kDepthwise};
    n.depthwise_multiplier = stem_multiplier_;  // [7, 7, 3, m]
    return n;
  }
  if (field == "weight" && part == "pointwise") return TfName{prefix + "/pointwise_weights", TfLayout::kConv};
  throw std::invalid_argument("not an InceptionV2 variable: '" + name + "'");
}

}  // namespace orchard::models
