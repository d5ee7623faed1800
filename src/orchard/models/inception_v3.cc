#include "orchard/models/inception_v3.h"

#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <vector>

#include "orchard/layers/activation.h"
#include "orchard/layers/batch_norm.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/tf_same.h"

namespace orchard::models {
namespace inception {

namespace F = torch::nn::functional;
using torch::ExpandingArray;

// Kernel and padding as (height, width); torchvision's kernel_size=(1, 7), padding=(0, 3).
struct Conv {
  int64_t in, out;
  ExpandingArray<2> kernel;
  ExpandingArray<2> padding = ExpandingArray<2>(0);
  int64_t stride = 1;
};

// Batch norm and activation of every BasicConv2d.
struct Norm {
  double momentum = 0.1, eps = 0.001;
  bool relu6 = false;
};

// TF-Slim's inception_v3 `depth`: every convolution's output channels scaled by the depth
// multiplier, never below min_depth. Multiplier 1 is the published (and torchvision's) network.
struct Depth {
  double multiplier = 1.0;
  int64_t min_depth = 16;
  int64_t operator()(int64_t channels) const { return layers::scale_depth(channels, multiplier, min_depth); }
};

class BasicConv2dImpl : public torch::nn::Module {
 public:
  BasicConv2dImpl(const Conv& c, const Norm& norm)
      : relu6(norm.relu6),
        conv(register_module(
            "conv",
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(c.in, c.out, c.kernel).stride(c.stride).padding(c.padding).bias(false)))),
        bn(register_module(
            "bn", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(c.out).eps(norm.eps).momentum(norm.momentum)))) {
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = layers::batch_norm(*bn, conv->forward(x));
    return layers::activate(relu6 ? layers::Activation::kRelu6 : layers::Activation::kRelu, y);
  }

  bool relu6;
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
};

// Registers a BasicConv2d under `name` in `parent`.
std::shared_ptr<BasicConv2dImpl> basic(torch::nn::Module& parent, const std::string& name, const Conv& c,
                                       const Norm& norm) {
  return parent.register_module(name, std::make_shared<BasicConv2dImpl>(c, norm));
}

// The branch pools: 3x3, stride 1, 'SAME'. torchvision's border averages count the zero
// padding (count_include_pad); TF-Slim's (`exclude_pad`) average only the pixels inside.
torch::Tensor avg_pool_3x3_same(const torch::Tensor& x, bool exclude_pad) {
  if (exclude_pad) return layers::avg_pool2d_tf_same(x, 3);
  return F::avg_pool2d(x, F::AvgPool2dFuncOptions(3).stride(1).padding(1).count_include_pad(true));
}

torch::Tensor max_pool_3x3_s2(const torch::Tensor& x) { return F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2)); }

// 35x35 grid: 1x1 | 1x1 -> 5x5 | 1x1 -> 3x3 -> 3x3 | avg-pool -> 1x1 (pool_features).
class InceptionAImpl : public torch::nn::Module {
 public:
  InceptionAImpl(int64_t in, int64_t pool_features, const Norm& m, const Depth& d)
      : branch1x1(basic(*this, "branch1x1", {in, d(64), 1}, m)),
        branch5x5_1(basic(*this, "branch5x5_1", {in, d(48), 1}, m)),
        branch5x5_2(basic(*this, "branch5x5_2", {d(48), d(64), 5, 2}, m)),
        branch3x3dbl_1(basic(*this, "branch3x3dbl_1", {in, d(64), 1}, m)),
        branch3x3dbl_2(basic(*this, "branch3x3dbl_2", {d(64), d(96), 3, 1}, m)),
        branch3x3dbl_3(basic(*this, "branch3x3dbl_3", {d(96), d(96), 3, 1}, m)),
        branch_pool(basic(*this, "branch_pool", {in, d(pool_features), 1}, m)) {}
  static int64_t out_channels(int64_t pool_features, const Depth& d) {
    return d(64) + d(64) + d(96) + d(pool_features);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::cat({branch1x1->forward(x), branch5x5_2->forward(branch5x5_1->forward(x)),
                       branch3x3dbl_3->forward(branch3x3dbl_2->forward(branch3x3dbl_1->forward(x))),
                       branch_pool->forward(avg_pool_3x3_same(x, exclude_pad))},
                      1);
  }

  std::shared_ptr<BasicConv2dImpl> branch1x1, branch5x5_1, branch5x5_2, branch3x3dbl_1, branch3x3dbl_2, branch3x3dbl_3,
      branch_pool;
  bool exclude_pad = false;
};

// 35x35 -> 17x17: 3x3/2 | 1x1 -> 3x3 -> 3x3/2 | max-pool/2.
class InceptionBImpl : public torch::nn::Module {
 public:
  InceptionBImpl(int64_t in, const Norm& m, const Depth& d)
      : branch3x3(basic(*this, "branch3x3", {in, d(384), 3, 0, 2}, m)),
        branch3x3dbl_1(basic(*this, "branch3x3dbl_1", {in, d(64), 1}, m)),
        branch3x3dbl_2(basic(*this, "branch3x3dbl_2", {d(64), d(96), 3, 1}, m)),
        branch3x3dbl_3(basic(*this, "branch3x3dbl_3", {d(96), d(96), 3, 0, 2}, m)) {}
  static int64_t out_channels(int64_t in, const Depth& d) { return d(384) + d(96) + in; }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::cat(
        {branch3x3->forward(x), branch3x3dbl_3->forward(branch3x3dbl_2->forward(branch3x3dbl_1->forward(x))),
         max_pool_3x3_s2(x)},
        1);
  }

  std::shared_ptr<BasicConv2dImpl> branch3x3, branch3x3dbl_1, branch3x3dbl_2, branch3x3dbl_3;
};

// 17x17 grid with factorised 7x7s (1x7 and 7x1) of width c7.
class InceptionCImpl : public torch::nn::Module {
 public:
  InceptionCImpl(int64_t in, int64_t c7, const Norm& m, const Depth& d)
      : branch1x1(basic(*this, "branch1x1", {in, d(192), 1}, m)),
        branch7x7_1(basic(*this, "branch7x7_1", {in, d(c7), 1}, m)),
        branch7x7_2(basic(*this, "branch7x7_2", {d(c7), d(c7), {1, 7}, {0, 3}}, m)),
        branch7x7_3(basic(*this, "branch7x7_3", {d(c7), d(192), {7, 1}, {3, 0}}, m)),
        branch7x7dbl_1(basic(*this, "branch7x7dbl_1", {in, d(c7), 1}, m)),
        branch7x7dbl_2(basic(*this, "branch7x7dbl_2", {d(c7), d(c7), {7, 1}, {3, 0}}, m)),
        branch7x7dbl_3(basic(*this, "branch7x7dbl_3", {d(c7), d(c7), {1, 7}, {0, 3}}, m)),
        branch7x7dbl_4(basic(*this, "branch7x7dbl_4", {d(c7), d(c7), {7, 1}, {3, 0}}, m)),
        branch7x7dbl_5(basic(*this, "branch7x7dbl_5", {d(c7), d(192), {1, 7}, {0, 3}}, m)),
        branch_pool(basic(*this, "branch_pool", {in, d(192), 1}, m)) {}
  static int64_t out_channels(const Depth& d) { return 4 * d(192); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto b7 = branch7x7_3->forward(branch7x7_2->forward(branch7x7_1->forward(x)));
    auto b7dbl = branch7x7dbl_1->forward(x);
    for (auto* c : {&branch7x7dbl_2, &branch7x7dbl_3, &branch7x7dbl_4, &branch7x7dbl_5}) b7dbl = (*c)->forward(b7dbl);
    return torch::cat({branch1x1->forward(x), b7, b7dbl, branch_pool->forward(avg_pool_3x3_same(x, exclude_pad))}, 1);
  }

  std::shared_ptr<BasicConv2dImpl> branch1x1, branch7x7_1, branch7x7_2, branch7x7_3, branch7x7dbl_1, branch7x7dbl_2,
      branch7x7dbl_3, branch7x7dbl_4, branch7x7dbl_5, branch_pool;
  bool exclude_pad = false;
};

// 17x17 -> 8x8: 1x1 -> 3x3/2 | 1x1 -> 1x7 -> 7x1 -> 3x3/2 | max-pool/2.
class InceptionDImpl : public torch::nn::Module {
 public:
  InceptionDImpl(int64_t in, const Norm& m, const Depth& d)
      : branch3x3_1(basic(*this, "branch3x3_1", {in, d(192), 1}, m)),
        branch3x3_2(basic(*this, "branch3x3_2", {d(192), d(320), 3, 0, 2}, m)),
        branch7x7x3_1(basic(*this, "branch7x7x3_1", {in, d(192), 1}, m)),
        branch7x7x3_2(basic(*this, "branch7x7x3_2", {d(192), d(192), {1, 7}, {0, 3}}, m)),
        branch7x7x3_3(basic(*this, "branch7x7x3_3", {d(192), d(192), {7, 1}, {3, 0}}, m)),
        branch7x7x3_4(basic(*this, "branch7x7x3_4", {d(192), d(192), 3, 0, 2}, m)) {}
  static int64_t out_channels(int64_t in, const Depth& d) { return d(320) + d(192) + in; }
  torch::Tensor forward(const torch::Tensor& x) {
    auto b7 = branch7x7x3_1->forward(x);
    for (auto* c : {&branch7x7x3_2, &branch7x7x3_3, &branch7x7x3_4}) b7 = (*c)->forward(b7);
    return torch::cat({branch3x3_2->forward(branch3x3_1->forward(x)), b7, max_pool_3x3_s2(x)}, 1);
  }

  std::shared_ptr<BasicConv2dImpl> branch3x3_1, branch3x3_2, branch7x7x3_1, branch7x7x3_2, branch7x7x3_3, branch7x7x3_4;
};

// 8x8 grid with the 3x3s split into parallel 1x3 and 3x1 (concatenated): 2048 channels out.
class InceptionEImpl : public torch::nn::Module {
 public:
  InceptionEImpl(int64_t in, const Norm& m, const Depth& d)
      : branch1x1(basic(*this, "branch1x1", {in, d(320), 1}, m)),
        branch3x3_1(basic(*this, "branch3x3_1", {in, d(384), 1}, m)),
        branch3x3_2a(basic(*this, "branch3x3_2a", {d(384), d(384), {1, 3}, {0, 1}}, m)),
        branch3x3_2b(basic(*this, "branch3x3_2b", {d(384), d(384), {3, 1}, {1, 0}}, m)),
        branch3x3dbl_1(basic(*this, "branch3x3dbl_1", {in, d(448), 1}, m)),
        branch3x3dbl_2(basic(*this, "branch3x3dbl_2", {d(448), d(384), 3, 1}, m)),
        branch3x3dbl_3a(basic(*this, "branch3x3dbl_3a", {d(384), d(384), {1, 3}, {0, 1}}, m)),
        branch3x3dbl_3b(basic(*this, "branch3x3dbl_3b", {d(384), d(384), {3, 1}, {1, 0}}, m)),
        branch_pool(basic(*this, "branch_pool", {in, d(192), 1}, m)) {}
  static int64_t out_channels(const Depth& d) { return d(320) + 4 * d(384) + d(192); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto b3 = branch3x3_1->forward(x);
    auto b3dbl = branch3x3dbl_2->forward(branch3x3dbl_1->forward(x));
    return torch::cat(
        {branch1x1->forward(x), branch3x3_2a->forward(b3), branch3x3_2b->forward(b3), branch3x3dbl_3a->forward(b3dbl),
         branch3x3dbl_3b->forward(b3dbl), branch_pool->forward(avg_pool_3x3_same(x, exclude_pad))},
        1);
  }

  std::shared_ptr<BasicConv2dImpl> branch1x1, branch3x3_1, branch3x3_2a, branch3x3_2b, branch3x3dbl_1, branch3x3dbl_2,
      branch3x3dbl_3a, branch3x3dbl_3b, branch_pool;
  bool exclude_pad = false;
};

// On Mixed_6e (768 x 17 x 17): avg-pool 5/3 -> 1x1 (128) -> 5x5 (768, valid) -> pool -> fc.
class InceptionAuxImpl : public torch::nn::Module {
 public:
  InceptionAuxImpl(int64_t in, int64_t num_classes, const Norm& m, const Depth& d)
      : conv0(basic(*this, "conv0", {in, d(128), 1}, m)),
        conv1(basic(*this, "conv1", {d(128), d(768), 5}, m)),
        fc(register_module("fc", torch::nn::Linear(d(768), num_classes))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    TORCH_CHECK(x.size(2) >= 17 && x.size(3) >= 17, "InceptionV3's auxiliary classifier needs a Mixed_6e map of ",
                "at least 17x17 (inputs of at least 299x299), got ", x.size(2), "x", x.size(3));
    auto y = F::avg_pool2d(x, F::AvgPool2dFuncOptions(5).stride(3));
    y = conv1->forward(conv0->forward(y));
    return fc->forward(torch::flatten(F::adaptive_avg_pool2d(y, F::AdaptiveAvgPool2dFuncOptions(1)), 1));
  }

  std::shared_ptr<BasicConv2dImpl> conv0, conv1;
  torch::nn::Linear fc;
};

}  // namespace inception

using namespace inception;

InceptionV3Impl::InceptionV3Impl(const InceptionV3Options& o) : options_(o) {
  TORCH_CHECK(o.num_classes >= 0, "InceptionV3 num_classes must be >= 0 (0: no fc), got ", o.num_classes);
  TORCH_CHECK(!o.aux_logits || o.num_classes >= 1, "InceptionV3 aux_logits needs num_classes >= 1");
  TORCH_CHECK(o.dropout >= 0 && o.dropout < 1, "InceptionV3 dropout must be in [0, 1), got ", o.dropout);
  TORCH_CHECK(o.depth_multiplier > 0 && o.depth_multiplier <= 1 && o.min_depth >= 1,
              "InceptionV3 depth_multiplier must be in (0, 1] and min_depth >= 1, got ", o.depth_multiplier, " and ",
              o.min_depth);
  const Norm m{o.batch_norm_momentum, o.bn_eps, o.relu6};
  const Depth d{o.depth_multiplier, o.min_depth};
  // Channels as torchvision's at multiplier 1: 192 -> 256 -> 288 -> 288 (Mixed_5*), 768
  // (Mixed_6*), 1280 (Mixed_7a), 2048 (Mixed_7b, 7c).
  Conv2d_1a_3x3 = basic(*this, "Conv2d_1a_3x3", {3, d(32), 3, 0, 2}, m);
  Conv2d_2a_3x3 = basic(*this, "Conv2d_2a_3x3", {d(32), d(32), 3}, m);
  Conv2d_2b_3x3 = basic(*this, "Conv2d_2b_3x3", {d(32), d(64), 3, 1}, m);
  Conv2d_3b_1x1 = basic(*this, "Conv2d_3b_1x1", {d(64), d(80), 1}, m);
  Conv2d_4a_3x3 = basic(*this, "Conv2d_4a_3x3", {d(80), d(192), 3}, m);
  const int64_t c5b = d(192), c5c = InceptionAImpl::out_channels(32, d), c5d = InceptionAImpl::out_channels(64, d);
  Mixed_5b = register_module("Mixed_5b", std::make_shared<InceptionAImpl>(c5b, 32, m, d));
  Mixed_5c = register_module("Mixed_5c", std::make_shared<InceptionAImpl>(c5c, 64, m, d));
  Mixed_5d = register_module("Mixed_5d", std::make_shared<InceptionAImpl>(c5d, 64, m, d));
  const int64_t c6a = InceptionAImpl::out_channels(64, d), c6 = InceptionBImpl::out_channels(c6a, d);
  Mixed_6a = register_module("Mixed_6a", std::make_shared<InceptionBImpl>(c6a, m, d));
  Mixed_6b = register_module("Mixed_6b", std::make_shared<InceptionCImpl>(c6, 128, m, d));
  const int64_t c6c = InceptionCImpl::out_channels(d);
  Mixed_6c = register_module("Mixed_6c", std::make_shared<InceptionCImpl>(c6c, 160, m, d));
  Mixed_6d = register_module("Mixed_6d", std::make_shared<InceptionCImpl>(c6c, 160, m, d));
  Mixed_6e = register_module("Mixed_6e", std::make_shared<InceptionCImpl>(c6c, 192, m, d));
  if (o.aux_logits)
    AuxLogits = register_module("AuxLogits", std::make_shared<InceptionAuxImpl>(c6c, o.num_classes, m, d));
  Mixed_7a = register_module("Mixed_7a", std::make_shared<InceptionDImpl>(c6c, m, d));
  Mixed_7b = register_module("Mixed_7b", std::make_shared<InceptionEImpl>(InceptionDImpl::out_channels(c6c, d), m, d));
  num_features_ = InceptionEImpl::out_channels(d);
  Mixed_7c = register_module("Mixed_7c", std::make_shared<InceptionEImpl>(num_features_, m, d));
  if (o.num_classes > 0) fc = register_module("fc", torch::nn::Linear(num_features_, o.num_classes));
  for (auto* block : {Mixed_5b.get(), Mixed_5c.get(), Mixed_5d.get()}) block->exclude_pad = o.tf_avg_pool;
  for (auto* block : {Mixed_6b.get(), Mixed_6c.get(), Mixed_6d.get(), Mixed_6e.get()})
    block->exclude_pad = o.tf_avg_pool;
  for (auto* block : {Mixed_7b.get(), Mixed_7c.get()}) block->exclude_pad = o.tf_avg_pool;

  // He (kaiming normal, fan_in, ReLU gain) for every convolution, not torchvision's
  // trunc_normal(std 0.1) (0.01 for AuxLogits.conv1). im2txt can run the encoder frozen in
  // inference mode; with batch-norm statistics never trained (mean 0, variance 1) each
  // BasicConv2d then scales its input's second moment by about 0.1^2 * fan_in / 2 (0.1 to 20
  // here), so torchvision's init makes the 2048 features of a random network explode (std ~5e6 at
  // 75x75, ~1e11 at 299x299), while He init keeps each layer's second moment and the features
  // O(0.1-1) (std ~0.06 at 75x75, where zero padding dominates the small maps, ~1 at 299): a frozen
  // random encoder still gives usable features (tests, smoke runs). Training from scratch: the
  // caption runs on the shapes set measured the same with either; torchvision's network at 75 px
  // learnt shape kinds only with its own init (docs/caption.md). Pretrained weights replace all this.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      if (o.torchvision_init)
        c->weight.normal_(0, 0.1);  // trunc_normal_(std=0.1, a=-2, b=2): the truncation never bites
      else torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanIn, torch::kReLU);
    } else if (auto* b = module->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
  // The classifiers keep torchvision's std; its truncation at +-2 (absolute, not sigmas) never
  // bites at these stds, so a plain normal is the same distribution.
  if (fc) {
    fc->weight.normal_(0, 0.1);
    fc->bias.zero_();
  }
  if (AuxLogits) {
    AuxLogits->fc->weight.normal_(0, 0.001);
    AuxLogits->fc->bias.zero_();
  }
}

torch::Tensor InceptionV3Impl::pooled(const torch::Tensor& input, torch::Tensor* aux) {
  TORCH_CHECK(input.dim() == 4 && input.size(1) == 3, "InceptionV3 expects [N, 3, H, W] input, got ", input.sizes());
  TORCH_CHECK(input.size(2) >= 75 && input.size(3) >= 75, "InceptionV3 needs inputs of at least 75x75, got ",
              input.size(2), "x", input.size(3));
  torch::Tensor x = input;
  if (options_.transform_input) {
    // torchvision's _transform_input: per channel x * (std / 0.5) + (mean - 0.5) / 0.5.
    const auto scale = torch::tensor({0.229 / 0.5, 0.224 / 0.5, 0.225 / 0.5}, x.options()).view({1, 3, 1, 1});
    const auto shift =
        torch::tensor({(0.485 - 0.5) / 0.5, (0.456 - 0.5) / 0.5, (0.406 - 0.5) / 0.5}, x.options()).view({1, 3, 1, 1});
    x = x * scale + shift;
  }
  x = Conv2d_2b_3x3->forward(Conv2d_2a_3x3->forward(Conv2d_1a_3x3->forward(x)));
  x = max_pool_3x3_s2(x);
  x = Conv2d_4a_3x3->forward(Conv2d_3b_1x1->forward(x));
  x = max_pool_3x3_s2(x);
  x = Mixed_5d->forward(Mixed_5c->forward(Mixed_5b->forward(x)));
  x = Mixed_6a->forward(x);
  x = Mixed_6e->forward(Mixed_6d->forward(Mixed_6c->forward(Mixed_6b->forward(x))));
  if (aux && AuxLogits && is_training()) *aux = AuxLogits->forward(x);
  x = Mixed_7c->forward(Mixed_7b->forward(Mixed_7a->forward(x)));
  return torch::flatten(F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)), 1);
}

torch::Tensor InceptionV3Impl::features(torch::Tensor x) { return pooled(x, nullptr); }

std::vector<torch::Tensor> InceptionV3Impl::mixed_5d_6e_7c(const torch::Tensor& input) {
  TORCH_CHECK(input.dim() == 4 && input.size(1) == 3, "InceptionV3 expects [N, 3, H, W] input, got ", input.sizes());
  TORCH_CHECK(input.size(2) >= 75 && input.size(3) >= 75, "InceptionV3 needs inputs of at least 75x75, got ",
              input.size(2), "x", input.size(3));
  auto x = max_pool_3x3_s2(Conv2d_2b_3x3->forward(Conv2d_2a_3x3->forward(Conv2d_1a_3x3->forward(input))));
  x = max_pool_3x3_s2(Conv2d_4a_3x3->forward(Conv2d_3b_1x1->forward(x)));
  auto m5 = Mixed_5d->forward(Mixed_5c->forward(Mixed_5b->forward(x)));
  auto m6 = Mixed_6e->forward(Mixed_6d->forward(Mixed_6c->forward(Mixed_6b->forward(Mixed_6a->forward(m5)))));
  auto m7 = Mixed_7c->forward(Mixed_7b->forward(Mixed_7a->forward(m6)));
  return {m5, m6, m7};
}

std::vector<int64_t> InceptionV3Impl::mixed_5d_6e_7c_channels() const {
  const Depth d{options_.depth_multiplier, options_.min_depth};
  return {InceptionAImpl::out_channels(64, d), InceptionCImpl::out_channels(d), num_features_};
}

int64_t InceptionV3Impl::mixed_5d_size(int64_t side) {
  const auto valid = [](int64_t x, int64_t k, int64_t s) { return (x - k) / s + 1; };
  side = valid(valid(valid(side, 3, 2), 3, 1), 3, 2);  // Conv2d_1a (s2), 2a, MaxPool_3a (s2); 2b 'SAME'
  return valid(valid(side, 3, 1), 3, 2);               // Conv2d_4a, MaxPool_5a (s2); 3b 1x1
}

InceptionV3Output InceptionV3Impl::forward_with_aux(const torch::Tensor& x) {
  InceptionV3Output out;
  auto h = F::dropout(pooled(x, &out.aux), F::DropoutFuncOptions().p(options_.dropout).training(is_training()));
  out.logits = fc ? fc->forward(h) : h;
  return out;
}

torch::Tensor InceptionV3Impl::forward(torch::Tensor x) {
  auto h = F::dropout(features(x), F::DropoutFuncOptions().p(options_.dropout).training(is_training()));
  return fc ? fc->forward(h) : h;
}

}  // namespace orchard::models
