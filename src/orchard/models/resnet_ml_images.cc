#include "orchard/models/resnet_ml_images.h"

#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "orchard/layers/batch_norm.h"

namespace orchard::models {

using layers::batch_norm;

namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  // Stride 1: TF 'SAME' (symmetric for odd kernels); stride 2: ML-Images pre-pads (k-1)/2 on
  // both sides: torch's symmetric k/2 either way.
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

// BN-ReLU-conv x3 on the main branch; block 0 of a stage: BN-ReLU-1x1/2 conv on the shortcut.
class PreActBottleneckImpl : public torch::nn::Module {
 public:
  PreActBottleneckImpl(int64_t in, int64_t out, int64_t stride, bool projection, const MlImagesResNetOptions& o) {
    const auto bn = [&](int64_t c) {
      return torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(c).momentum(o.bn_momentum).eps(o.bn_eps));
    };
    bn1 = register_module("bn1", bn(in));
    conv1 = register_module("conv1", conv(in, out / 4, 1, 1));
    bn2 = register_module("bn2", bn(out / 4));
    conv2 = register_module("conv2", conv(out / 4, out / 4, 3, stride));
    bn3 = register_module("bn3", bn(out / 4));
    conv3 = register_module("conv3", conv(out / 4, out, 1, 1));
    if (projection) {
      shortcut_bn = register_module("shortcut_bn", bn(in));
      shortcut_conv = register_module("shortcut_conv", conv(in, out, 1, stride));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto shortcut = shortcut_conv ? shortcut_conv(torch::relu(batch_norm(*shortcut_bn, x))) : x;
    auto y = conv1(torch::relu(batch_norm(*bn1, x)));
    y = conv2(torch::relu(batch_norm(*bn2, y)));
    y = conv3(torch::relu(batch_norm(*bn3, y)));
    return y + shortcut;  // no ReLU after the sum
  }
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr}, shortcut_bn{nullptr};
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, shortcut_conv{nullptr};
};
TORCH_MODULE(PreActBottleneck);

constexpr int64_t kFilters[] = {256, 512, 1024, 2048};

}  // namespace

MlImagesResNetImpl::MlImagesResNetImpl(const MlImagesResNetOptions& o) : options_(o) {
  TORCH_CHECK(o.layers.size() == 4, "ML-Images' ResNet has 4 stages");
  conv1 = register_module("conv1", conv(3, 64, 7, 2));
  int64_t in = 64;
  for (size_t s = 0; s < 4; ++s) {
    torch::nn::ModuleList layer;
    for (int64_t b = 0; b < o.layers[s]; ++b) {
      layer->push_back(PreActBottleneck(in, kFilters[s], b == 0 ? 2 : 1, b == 0, o));
      in = kFilters[s];
    }
    layers_.push_back(register_module("layer" + std::to_string(s + 1), layer));
  }
  bn_final = register_module(
      "bn_final", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(in).momentum(o.bn_momentum).eps(o.bn_eps)));
  fc = register_module("fc", torch::nn::Linear(in, o.num_classes));
  if (!o.initialize) return;
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanIn, torch::kReLU);  // variance_scaling(2.0)
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
  torch::nn::init::xavier_uniform_(fc->weight);  // tf.layers.dense's glorot_uniform
  fc->bias.zero_();
}

torch::Tensor MlImagesResNetImpl::features(torch::Tensor x) {
  x = conv1(x);  // no BN, no ReLU, no max-pool: the first block's pre-activation follows
  for (auto& layer : layers_)
    for (auto& block : *layer) x = block->as<PreActBottleneckImpl>()->forward(x);
  return torch::relu(batch_norm(*bn_final, x)).mean({2, 3});
}

torch::Tensor MlImagesResNetImpl::forward(torch::Tensor x) { return fc(features(std::move(x))); }

std::optional<TfName> resnet_ml_images_tf_name(const std::string& name) {
  const auto bad = [&] { return std::invalid_argument("not an ML-Images ResNet variable: '" + name + "'"); };
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) throw bad();
  const std::string module = name.substr(0, dot), field = name.substr(dot + 1);
  const auto bn = [&](const std::string& scope) -> std::optional<TfName> {
    const std::string p = scope + "/batch_normalization/";
    if (field == "weight") return TfName{p + "gamma"};
    if (field == "bias") return TfName{p + "beta"};
    if (field == "running_mean") return TfName{p + "moving_mean"};
    if (field == "running_var") return TfName{p + "moving_variance"};
    if (field == "num_batches_tracked") return std::nullopt;
    throw bad();
  };
  const auto kernel = [&](const std::string& scope) -> std::optional<TfName> {
    if (field != "weight") throw bad();
    return TfName{scope + "/conv2d/kernel", TfLayout::kConv};
  };
  if (module == "conv1") return kernel("init/init_conv");
  if (module == "bn_final") return bn("global_pool/bn");
  if (module == "fc") {
    if (field == "weight") return TfName{"logits/dense/kernel", TfLayout::kDense};
    if (field == "bias") return TfName{"logits/dense/bias"};
    throw bad();
  }
  int layer = 0, block = 0, consumed = 0;
  if (std::sscanf(module.c_str(), "layer%d.%d.%n", &layer, &block, &consumed) != 2 || consumed == 0 || layer < 1 ||
      layer > 4 || block < 0)
    throw bad();
  const std::string part = module.substr(static_cast<size_t>(consumed));
  const std::string scope = "stages_" + std::to_string(layer - 1) + "_block_" + std::to_string(block) + "/";
  static const char* const kParts[][2] = {
      {"bn1", "conv1_b2_bn"}, {"conv1", "conv1_b2"}, {"bn2", "conv2_b2_bn"},         {"conv2", "conv2_b2"},
      {"bn3", "conv3_b2_bn"}, {"conv3", "conv3_b2"}, {"shortcut_bn", "conv1_b1_bn"}, {"shortcut_conv", "conv1_b1"}};
  for (const auto& [ours, theirs] : kParts)
    if (part == ours) return part.find("bn") != std::string::npos ? bn(scope + theirs) : kernel(scope + theirs);
  throw bad();
}

}  // namespace orchard::models
