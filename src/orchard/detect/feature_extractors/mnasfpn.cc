#include "orchard/detect/feature_extractors/mnasfpn.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <cstdio>
#include <stdexcept>

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/init.h"
#include "orchard/layers/tf_same.h"

namespace orchard::detect {
namespace {

namespace F = torch::nn::functional;

// One block of MNASFPN_DEF's cell: the two input nodes, its level, kernel and expansion size.
struct BlockDef {
  int input[2];
  int level;
  int64_t kernel, expansion;
};
constexpr BlockDef kCell[] = {
    {{1, 2}, 4, 3, 256}, {{0, 4}, 3, 3, 128}, {{5, 4}, 4, 3, 128}, {{4, 3}, 5, 5, 128}, {{4, 3}, 6, 3, 96}};
constexpr int kNumLevels = 4;  // 3, 4, 5, 6

torch::nn::BatchNorm2d batch_norm_of(int64_t channels, const MnasFpnOptions& o) {
  return torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(channels).momentum(o.bn_momentum).eps(o.bn_eps));
}

// 1x1 convolution (no bias) + batch norm, no activation: children "conv", "bn".
class Conv1x1Impl : public torch::nn::Module {
 public:
  Conv1x1Impl(int64_t in, int64_t out, const MnasFpnOptions& o) {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).bias(false)));
    bn = register_module("bn", batch_norm_of(out, o));
  }
  torch::Tensor forward(const torch::Tensor& x) { return layers::batch_norm(*bn, conv->forward(x)); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(Conv1x1);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const BlockDef& d, const std::vector<int64_t>& node_channels, const std::vector<int>& node_levels,
            int64_t expansion, int64_t depth, const MnasFpnOptions& o)
      : def_(d) {
    inputs_ = register_module("inputs", torch::nn::ModuleList());
    for (int i : d.input) {
      inputs_->push_back(Conv1x1(node_channels[static_cast<size_t>(i)], expansion, o));
      levels_.push_back(node_levels[static_cast<size_t>(i)]);
    }
    depthwise = register_module(
        "depthwise",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(expansion, expansion, d.kernel).groups(expansion).bias(false)));
    pointwise =
        register_module("pointwise", torch::nn::Conv2d(torch::nn::Conv2dOptions(expansion, depth, 1).bias(false)));
    bn = register_module("bn", batch_norm_of(depth, o));
  }
  torch::Tensor forward(const std::vector<torch::Tensor>& nodes) {
    torch::Tensor sum;
    for (size_t i = 0; i < 2; ++i) {
      auto x = nodes[static_cast<size_t>(def_.input[i])];
      const int from = levels_[i];
      auto* project = inputs_[i]->as<Conv1x1Impl>();
      if (from < def_.level) {  // finer: pool down first
        x = project->forward(layers::max_pool2d_tf_same(x, 3, int64_t{1} << (def_.level - from)));
      } else {
        x = project->forward(x);
        if (from > def_.level) {  // coarser: nearest upsampling, out[y, x] = in[y / s, x / s]
          const int64_t s = int64_t{1} << (from - def_.level);
          x = x.repeat_interleave(s, 2).repeat_interleave(s, 3);
        }
      }
      if (!sum.defined()) {
        sum = x;
      } else {
        TORCH_CHECK(sum.sizes() == x.sizes(), "MnasFPN: inputs of level ", from, " and ", levels_[0],
                    " do not meet at level ", def_.level, " (", sum.sizes(), " vs ", x.sizes(),
                    "): the image sides must be multiples of 64");
        sum = sum + x;
      }
    }
    const auto h = layers::conv2d_tf_same(*depthwise, torch::clamp(sum, 0.0, 6.0));
    return layers::batch_norm(*bn, pointwise->forward(h));
  }
  torch::nn::Conv2d depthwise{nullptr}, pointwise{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};

 private:
  BlockDef def_;
  std::vector<int> levels_;
  torch::nn::ModuleList inputs_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

MnasFpnImpl::MnasFpnImpl(const MnasFpnOptions& o) : options_(o) {
  TORCH_CHECK(o.in_channels.size() == 3, "MnasFPN takes levels 3, 4, 5; got ", o.in_channels.size(), " maps");
  const auto multiplied = [&](int64_t d) {
    return layers::make_divisible(static_cast<double>(d) * o.depth_multiplier, 8, o.min_depth);
  };
  c6_ = register_module("c6", Conv1x1(o.in_channels[2], o.depth, o));
  cells_ = register_module("cells", torch::nn::ModuleList());
  std::vector<int64_t> channels{o.in_channels[0], o.in_channels[1], o.in_channels[2], o.depth};
  for (int64_t c = 0; c < o.num_cells; ++c) {
    std::vector<int64_t> node_channels = channels;
    std::vector<int> node_levels{3, 4, 5, 6};
    auto cell = torch::nn::ModuleList();
    for (const BlockDef& d : kCell) {
      cell->push_back(Block(d, node_channels, node_levels, multiplied(d.expansion), o.depth, o));
      node_channels.push_back(o.depth);
      node_levels.push_back(d.level);
    }
    cells_->push_back(cell);
    channels.assign(kNumLevels, o.depth);
  }
  // Initialised as the SSD's other extra layers: truncated normal convolutions, gamma 1, beta 0.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2d>()) {
      layers::truncated_normal_(conv->weight, 0.03);
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
}

std::vector<torch::Tensor> MnasFpnImpl::forward(const std::vector<torch::Tensor>& levels) {
  TORCH_CHECK(levels.size() == 3, "MnasFPN takes levels 3, 4, 5");
  std::vector<torch::Tensor> inputs = levels;
  inputs.push_back(c6_->as<Conv1x1Impl>()->forward(layers::max_pool2d_tf_same(levels[2], 3, 2)));
  for (const auto& cell : *cells_) {
    std::vector<torch::Tensor> nodes = inputs;
    for (const auto& block : *cell->as<torch::nn::ModuleList>())
      nodes.push_back(block->as<BlockImpl>()->forward(nodes));
    std::vector<torch::Tensor> outputs(nodes.end() - kNumLevels, nodes.end());
    for (int i = 0; i < kNumLevels; ++i)  // the cell's residuals, where the shapes agree
      if (outputs[static_cast<size_t>(i)].sizes() == inputs[static_cast<size_t>(i)].sizes())
        outputs[static_cast<size_t>(i)] = outputs[static_cast<size_t>(i)] + inputs[static_cast<size_t>(i)];
    inputs = outputs;
  }
  return inputs;
}

std::optional<models::TfName> MnasFpnImpl::tf_name(const std::string& name, const std::string& scope) const {
  const auto bad = [&] { return std::invalid_argument("not a MnasFPN variable: '" + name + "'"); };
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) throw bad();
  const std::string module = name.substr(0, dot), field = name.substr(dot + 1);
  std::string layer;  // the TF scope of the convolution / batch norm
  std::string part;   // conv, bn, depthwise, pointwise
  int c = -1, b = -1, i = -1, used = 0;
  char kind[16] = {0};
  if (module == "c6.conv" || module == "c6.bn") {
    layer = scope + "/C6_Conv1x1";
    part = module.substr(3);
  } else if (std::sscanf(module.c_str(), "cells.%d.%d.inputs.%d.%15[a-z]%n", &c, &b, &i, kind, &used) == 4 &&
             used == static_cast<int>(module.size())) {
    layer = scope + "/cell_" + std::to_string(c) + "/block_" + std::to_string(b) + "/input_" + std::to_string(i) +
            "/Conv1x1";
    part = kind;
  } else if (std::sscanf(module.c_str(), "cells.%d.%d.%15[a-z]%n", &c, &b, kind, &used) == 3 &&
             used == static_cast<int>(module.size())) {
    layer = scope + "/cell_" + std::to_string(c) + "/block_" + std::to_string(b) + "/SepConv";
    part = kind;
  } else {
    throw bad();
  }
  if (part == "bn") return models::tf_batch_norm_name(layer, field);
  if (field != "weight") throw bad();
  if (part == "conv") return models::TfName{layer + "/weights", models::TfLayout::kConv};
  if (part == "depthwise") return models::TfName{layer + "/depthwise_weights", models::TfLayout::kDepthwise};
  if (part == "pointwise") return models::TfName{layer + "/pointwise_weights", models::TfLayout::kConv};
  throw bad();
}

}  // namespace orchard::detect
