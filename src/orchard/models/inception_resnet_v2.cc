#include "orchard/models/inception_resnet_v2.h"

#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <stdexcept>

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/tf_same.h"

namespace orchard::models {
namespace {

namespace F = torch::nn::functional;
using Options = InceptionResnetV2Options;

// slim.batch_norm(scale=False): beta, moving mean and moving variance, gamma fixed at 1. The
// weight leaves the parameters for a buffer of ones rather than going undefined, because
// batch_norm()'s synchronized override and the ONNX export read bn.weight.
class BetaBatchNormImpl : public torch::nn::BatchNorm2dImpl {
 public:
  BetaBatchNormImpl(int64_t channels, const Options& o)
      : torch::nn::BatchNorm2dImpl(torch::nn::BatchNorm2dOptions(channels).momentum(o.bn_momentum).eps(o.bn_eps)) {
    parameters_.erase("weight");
    weight = register_buffer("weight", torch::ones({channels}));
  }
  // Its own, because libtorch does not export BatchNormImplBase's for a derived vtable to use.
  void pretty_print(std::ostream& stream) const override {
    stream << "BatchNorm2d(" << options.num_features() << ", eps=" << options.eps()
           << ", momentum=" << options.momentum().value() << ", gamma=1)";
  }
};
TORCH_MODULE(BetaBatchNorm);

// slim.conv2d under inception_resnet_v2_arg_scope: conv (no bias) -> batch norm -> ReLU, 'SAME'
// or 'VALID'; `rate` is the atrous rate (block17 at output stride 8).
class UnitImpl : public torch::nn::Module {
 public:
  UnitImpl(int64_t in, int64_t out, torch::ExpandingArray<2> kernel, int64_t stride, int64_t rate, bool same,
           const Options& o)
      : same_(same) {
    conv = register_module(
        "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).dilation(rate).bias(false)));
    bn = register_module("bn", BetaBatchNorm(out, o));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::relu(layers::batch_norm(*bn, same_ ? layers::conv2d_tf_same(*conv, x) : conv->forward(x)));
  }
  torch::nn::Conv2d conv{nullptr};
  BetaBatchNorm bn{nullptr};

 private:
  bool same_;
};
TORCH_MODULE(Unit);

// A 3x3 max pool, 'SAME' (the padding never wins) or 'VALID'.
torch::Tensor max_pool(const torch::Tensor& x, int64_t stride, bool same) {
  return same ? layers::max_pool2d_tf_same(x, 3, stride) : F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(stride));
}

// One branch of a mixed layer or residual block: units and pools in order.
class BranchImpl : public torch::nn::Module {
 public:
  BranchImpl(int64_t in, int64_t rate, const Options& o) : channels_(in), rate_(rate), options_(o) {}
  // slim.conv2d(net, out, kernel, stride, padding, scope=name).
  BranchImpl& conv(const std::string& name, int64_t out, torch::ExpandingArray<2> kernel, int64_t stride = 1,
                   bool same = true) {
    auto unit = register_module(name, Unit(channels_, out, kernel, stride, rate_, same, options_));
    steps_.push_back([unit](const torch::Tensor& x) { return unit->forward(x); });
    channels_ = out;
    return *this;
  }
  BranchImpl& max_pool_3x3(int64_t stride, bool same) {
    steps_.push_back([stride, same](const torch::Tensor& x) { return max_pool(x, stride, same); });
    return *this;
  }
  // 3x3 stride-1 'SAME' average pool: TF leaves the padding out of the border averages.
  BranchImpl& avg_pool_3x3() {
    steps_.push_back([](const torch::Tensor& x) { return layers::avg_pool2d_tf_same(x, 3); });
    return *this;
  }
  torch::Tensor forward(torch::Tensor x) {
    for (const auto& step : steps_) x = step(x);
    return x;
  }
  int64_t channels() const { return channels_; }

 private:
  int64_t channels_, rate_;
  Options options_;
  std::vector<std::function<torch::Tensor(const torch::Tensor&)>> steps_;
};
TORCH_MODULE(Branch);

// Branch_0, Branch_1, ... on the same input, concatenated along channels.
class MixedImpl : public torch::nn::Module {
 public:
  MixedImpl(int64_t in, const Options& o, int64_t rate = 1) : in_(in), rate_(rate), options_(o) {}
  BranchImpl& add_branch() {
    branches_.push_back(register_module("Branch_" + std::to_string(branches_.size()), Branch(in_, rate_, options_)));
    return *branches_.back();
  }
  torch::Tensor forward(const torch::Tensor& x) {
    std::vector<torch::Tensor> outs;
    for (auto& b : branches_) outs.push_back(b->forward(x));
    return torch::cat(outs, 1);
  }
  int64_t channels() const {
    int64_t c = 0;
    for (const auto& b : branches_) c += b->channels();
    return c;
  }
  int64_t in_channels() const { return in_; }

 private:
  int64_t in_, rate_;
  Options options_;
  std::vector<Branch> branches_;
};

// block35 / block17 / block8: act(x + scale * up(concat(branches))), where the 'up' projection
// Conv2d_1x1 back to the input's channels has a bias and no batch norm or activation.
class ResidualBlockImpl : public MixedImpl {
 public:
  ResidualBlockImpl(int64_t in, double scale, bool relu, int64_t rate, const Options& o)
      : MixedImpl(in, o, rate), scale_(scale), relu_(relu) {}
  // After the branches, so that the projection sees their channels.
  void add_up_projection() {
    up = register_module("Conv2d_1x1", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels(), in_channels(), 1)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto y = x + scale_ * up->forward(MixedImpl::forward(x));
    return relu_ ? torch::relu(y) : y;
  }
  torch::nn::Conv2d up{nullptr};

 private:
  double scale_;
  bool relu_;
};
TORCH_MODULE(ResidualBlock);

// slim.repeat's scope: the blocks <name>_1, <name>_2, ... in order.
class RepeatImpl : public torch::nn::Module {
 public:
  void add(const std::string& name, ResidualBlock block) { blocks_.push_back(register_module(name, block)); }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : blocks_) x = b->forward(x);
    return x;
  }

 private:
  std::vector<ResidualBlock> blocks_;
};
TORCH_MODULE(Repeat);

// The 35x35 block on 320 channels.
ResidualBlock block35(double scale, const Options& o) {
  ResidualBlock b(320, scale, /*relu=*/true, /*rate=*/1, o);
  b->add_branch().conv("Conv2d_1x1", 32, 1);
  b->add_branch().conv("Conv2d_0a_1x1", 32, 1).conv("Conv2d_0b_3x3", 32, 3);
  b->add_branch().conv("Conv2d_0a_1x1", 32, 1).conv("Conv2d_0b_3x3", 48, 3).conv("Conv2d_0c_3x3", 64, 3);
  b->add_up_projection();
  return b;
}

// The 17x17 block on 1088 channels; every convolution at `rate`.
ResidualBlock block17(double scale, int64_t rate, const Options& o) {
  ResidualBlock b(1088, scale, /*relu=*/true, rate, o);
  b->add_branch().conv("Conv2d_1x1", 192, 1);
  b->add_branch().conv("Conv2d_0a_1x1", 128, 1).conv("Conv2d_0b_1x7", 160, {1, 7}).conv("Conv2d_0c_7x1", 192, {7, 1});
  b->add_up_projection();
  return b;
}

// The 8x8 block on 2080 channels.
ResidualBlock block8(double scale, bool relu, const Options& o) {
  ResidualBlock b(2080, scale, relu, /*rate=*/1, o);
  b->add_branch().conv("Conv2d_1x1", 192, 1);
  b->add_branch().conv("Conv2d_0a_1x1", 192, 1).conv("Conv2d_0b_1x3", 224, {1, 3}).conv("Conv2d_0c_3x1", 256, {3, 1});
  b->add_up_projection();
  return b;
}

}  // namespace

InceptionResnetV2Impl::InceptionResnetV2Impl(const InceptionResnetV2Options& o) : options_(o) {
  TORCH_CHECK(o.output_stride == 8 || o.output_stride == 16, "InceptionResnetV2 output_stride must be 8 or 16, got ",
              o.output_stride);
  const auto add = [this](const std::string& name, auto module) {
    auto m = register_module(name, module);
    layers_.push_back([m](const torch::Tensor& x) { return m->forward(x); });
  };
  const auto add_repeat = [&](const std::string& name, int n, const std::string& block,
                              const std::function<ResidualBlock()>& make) {
    Repeat repeat;
    for (int i = 1; i <= n; ++i) repeat->add(block + "_" + std::to_string(i), make());
    add(name, repeat);
  };

  if (o.part == InceptionResnetV2Part::kFirstStage) {
    // slim's 'VALID' layers; 'SAME' with align_feature_maps.
    const bool same = o.align_feature_maps;
    const bool atrous = o.output_stride == 8;
    add("Conv2d_1a_3x3", Unit(3, 32, 3, 2, 1, same, o));
    add("Conv2d_2a_3x3", Unit(32, 32, 3, 1, 1, same, o));
    add("Conv2d_2b_3x3", Unit(32, 64, 3, 1, 1, true, o));
    layers_.push_back([same](const torch::Tensor& x) { return max_pool(x, 2, same); });  // MaxPool_3a_3x3
    add("Conv2d_3b_1x1", Unit(64, 80, 1, 1, 1, same, o));
    add("Conv2d_4a_3x3", Unit(80, 192, 3, 1, 1, same, o));
    layers_.push_back([same](const torch::Tensor& x) { return max_pool(x, 2, same); });  // MaxPool_5a_3x3

    auto mixed_5b = std::make_shared<MixedImpl>(192, o);
    mixed_5b->add_branch().conv("Conv2d_1x1", 96, 1);
    mixed_5b->add_branch().conv("Conv2d_0a_1x1", 48, 1).conv("Conv2d_0b_5x5", 64, 5);
    mixed_5b->add_branch().conv("Conv2d_0a_1x1", 64, 1).conv("Conv2d_0b_3x3", 96, 3).conv("Conv2d_0c_3x3", 96, 3);
    mixed_5b->add_branch().avg_pool_3x3().conv("Conv2d_0b_1x1", 64, 1);  // AvgPool_0a_3x3
    TORCH_CHECK(mixed_5b->channels() == 320);
    add("Mixed_5b", mixed_5b);

    add_repeat("Repeat", 10, "block35", [&] { return block35(0.17, o); });

    const int64_t stride = atrous ? 1 : 2;
    auto mixed_6a = std::make_shared<MixedImpl>(320, o);
    mixed_6a->add_branch().conv("Conv2d_1a_3x3", 384, 3, stride, same);
    mixed_6a->add_branch()
        .conv("Conv2d_0a_1x1", 256, 1)
        .conv("Conv2d_0b_3x3", 256, 3)
        .conv("Conv2d_1a_3x3", 384, 3, stride, same);
    mixed_6a->add_branch().max_pool_3x3(stride, same);  // MaxPool_1a_3x3
    TORCH_CHECK(mixed_6a->channels() == 1088);
    add("Mixed_6a", mixed_6a);

    add_repeat("Repeat_1", 20, "block17", [&] { return block17(0.10, atrous ? 2 : 1, o); });
    output_channels_ = 1088;
  } else {
    // The extractor's Mixed_7a: 'VALID' stride-2 layers whatever align_feature_maps says.
    auto mixed_7a = std::make_shared<MixedImpl>(1088, o);
    mixed_7a->add_branch().conv("Conv2d_0a_1x1", 256, 1).conv("Conv2d_1a_3x3", 384, 3, 2, false);
    mixed_7a->add_branch().conv("Conv2d_0a_1x1", 256, 1).conv("Conv2d_1a_3x3", 288, 3, 2, false);
    mixed_7a->add_branch()
        .conv("Conv2d_0a_1x1", 256, 1)
        .conv("Conv2d_0b_3x3", 288, 3)
        .conv("Conv2d_1a_3x3", 320, 3, 2, false);
    mixed_7a->add_branch().max_pool_3x3(2, false);  // MaxPool_1a_3x3
    TORCH_CHECK(mixed_7a->channels() == 2080);
    add("Mixed_7a", mixed_7a);

    add_repeat("Repeat", 9, "block8", [&] { return block8(0.20, /*relu=*/true, o); });
    add("Block8", block8(1.0, /*relu=*/false, o));  // block8(net, activation_fn=None): scale 1
    add("Conv2d_7b_1x1", Unit(2080, 1536, 1, 1, 1, true, o));
    output_channels_ = 1536;
  }

  // slim's defaults under the arg scope, which sets only the regularizers: xavier_initializer
  // (Glorot uniform, fan average) kernels, zero biases, beta 0, moving mean 0, variance 1.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::xavier_uniform_(c->weight);
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->bias.zero_();
      b->reset_running_stats();
    }
  }
}

torch::Tensor InceptionResnetV2Impl::forward(const torch::Tensor& x) {
  const int64_t in = options_.part == InceptionResnetV2Part::kFirstStage ? 3 : 1088;
  TORCH_CHECK(x.dim() == 4 && x.size(1) == in, "InceptionResnetV2's ",
              options_.part == InceptionResnetV2Part::kFirstStage ? "first" : "second", " stage expects [N, ", in,
              ", H, W], got ", x.sizes());
  auto h = x;
  for (const auto& layer : layers_) h = layer(h);
  return h;
}

std::optional<TfName> InceptionResnetV2Impl::tf_name(const std::string& name, const std::string& scope,
                                                     bool classification) const {
  const auto invalid = [&] { return std::invalid_argument("not an InceptionResnetV2 variable: '" + name + "'"); };
  // Walk the module path, so that only this part's own variables have names.
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    const size_t dot = name.find('.', begin);
    parts.push_back(name.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin));
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  if (parts.size() < 2) throw invalid();
  const torch::nn::Module* owner = this;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const auto children = owner->named_children();
    const auto* child = children.find(parts[i]);
    if (!child) throw invalid();
    owner = child->get();
  }
  const std::string& field = parts.back();
  if (!owner->named_parameters(/*recurse=*/false).contains(field) &&
      !owner->named_buffers(/*recurse=*/false).contains(field))
    throw invalid();

  // The TF scope: the path without the unit's "conv" / "bn" child.
  const bool unit_child = parts.size() >= 3 && (parts[parts.size() - 2] == "conv" || parts[parts.size() - 2] == "bn");
  std::string path = scope;
  for (size_t i = 0; i + (unit_child ? 2 : 1) < parts.size(); ++i) {
    const bool block8_repeat =
        classification && i == 0 && options_.part == InceptionResnetV2Part::kSecondStage && parts[0] == "Repeat";
    path += "/" + (block8_repeat ? std::string("Repeat_2") : parts[i]);
  }
  if (owner->as<torch::nn::BatchNorm2d>()) {
    if (field == "weight") return std::nullopt;  // scale=False: the constant gamma TF does not have
    return tf_batch_norm_name(path, field, /*scale=*/false);
  }
  if (field == "weight") return TfName{path + "/weights", TfLayout::kConv};
  if (field == "bias") return TfName{path + "/biases", TfLayout::kSame};  // the up projections
  throw invalid();
}

}  // namespace orchard::models
