#include "orchard/models/resnet.h"

#include <torch/nn/functional.h>
#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/tf_same.h"

namespace orchard::models {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

torch::nn::BatchNorm2d bn(int64_t c, const ResNetOptions& o) {
  return torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(c).momentum(o.bn_momentum).eps(o.bn_eps));
}

torch::Tensor norm(torch::nn::BatchNorm2dImpl& b, const torch::Tensor& x) { return layers::batch_norm(b, x); }

torch::Tensor shortcut(torch::nn::Sequential& down, const torch::Tensor& x) {
  return norm(*down[1]->as<torch::nn::BatchNorm2d>(), down[0]->as<torch::nn::Conv2d>()->forward(x));
}

// Two 3x3 convolutions (ResNet-18/34).
struct BasicBlockImpl : torch::nn::Module {
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride, torch::nn::Sequential down, const ResNetOptions& o)
      : conv1(register_module("conv1", conv(in, planes, 3, stride))),
        bn1(register_module("bn1", bn(planes, o))),
        conv2(register_module("conv2", conv(planes, planes, 3, 1))),
        bn2(register_module("bn2", bn(planes, o))) {
    if (down) downsample = register_module("downsample", down);
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample ? shortcut(downsample, x) : x;
    auto out = torch::relu(norm(*bn1, conv1(x)));
    out = norm(*bn2, conv2(out));
    return torch::relu(out + identity);
  }
  torch::nn::BatchNorm2d last_bn() { return bn2; }
  // Declaration order is registration order: torchvision's (conv1, bn1, conv2, bn2).
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

// 1x1 -> 3x3 (stride here: v1.5) -> 1x1 with 4x expansion (ResNet-50/101/152).
struct BottleneckImpl : torch::nn::Module {
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride, torch::nn::Sequential down, const ResNetOptions& o)
      : stride_(stride),
        tf_same_(o.layout == ResNetLayout::kKeras && stride > 1),
        conv1(register_module("conv1", conv(in, planes, 1, 1))),
        bn1(register_module("bn1", bn(planes, o))),
        conv2(register_module("conv2", conv(planes, planes, 3, stride))),
        bn2(register_module("bn2", bn(planes, o))),
        conv3(register_module("conv3", conv(planes, planes * kExpansion, 1, 1))),
        bn3(register_module("bn3", bn(planes * kExpansion, o))) {
    if (down) downsample = register_module("downsample", down);
  }
  torch::Tensor forward(torch::Tensor x) {
    // Without a projection, a strided block (TF-Slim's last unit) subsamples its input.
    torch::Tensor identity = downsample    ? shortcut(downsample, x)
                             : stride_ > 1 ? x.slice(2, 0, c10::nullopt, stride_).slice(3, 0, c10::nullopt, stride_)
                                           : x;
    auto out = torch::relu(norm(*bn1, conv1(x)));
    out = torch::relu(norm(*bn2, tf_same_ ? layers::conv2d_tf_same(*conv2, out) : conv2(out)));
    out = norm(*bn3, conv3(out));
    return torch::relu(out + identity);
  }
  // A strided TF-Slim unit computed at stride 1: its output before subsampling (x[::2, ::2] of
  // this is forward(x): the 3x3 conv pads 1 on each side either way).
  torch::Tensor forward_unstrided(const torch::Tensor& x) {
    // A projection shortcut (a stage of one unit) is a 1x1 conv: at stride 1 it subsamples too.
    const auto identity = downsample ? norm(*downsample[1]->as<torch::nn::BatchNorm2d>(),
                                            F::conv2d(x, downsample[0]->as<torch::nn::Conv2d>()->weight))
                                     : x;
    auto out = torch::relu(norm(*bn1, conv1(x)));
    out = F::conv2d(out, conv2->weight, F::Conv2dFuncOptions().padding(1));
    out = norm(*bn3, conv3(torch::relu(norm(*bn2, out))));
    return torch::relu(out + identity);
  }
  // The unit at stride 1 with its 3x3 convolution dilated by `rate` (TF-Slim's atrous units
  // past the output stride; rate 1 is forward_unstrided).
  torch::Tensor forward_atrous(const torch::Tensor& x, int64_t rate) {
    if (rate == 1) return forward_unstrided(x);
    const auto identity = downsample ? norm(*downsample[1]->as<torch::nn::BatchNorm2d>(),
                                            F::conv2d(x, downsample[0]->as<torch::nn::Conv2d>()->weight))
                                     : x;
    auto out = torch::relu(norm(*bn1, conv1(x)));
    out = F::conv2d(out, conv2->weight, F::Conv2dFuncOptions().padding(rate).dilation(rate));
    out = norm(*bn3, conv3(torch::relu(norm(*bn2, out))));
    return torch::relu(out + identity);
  }
  torch::nn::BatchNorm2d last_bn() { return bn3; }
  int64_t stride_;
  bool tf_same_;
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Conv2d conv3;
  torch::nn::BatchNorm2d bn3;
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

// he_normal convolutions (Keras: truncated normal, stddev sqrt(2 / fan_in); torchvision uses
// kaiming_normal fan_out: TF's choice is the one the seed specifies), batch norms 1 and 0.
void init_weights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      const auto& w = c->weight;
      const double fan_in = static_cast<double>(w.size(1) * w.size(2) * w.size(3));
      const double std = std::sqrt(2.0 / fan_in) / 0.87962566103423978;  // stddev of the untruncated normal
      w.normal_(0, std);
      for (int round = 0; round < 20; ++round) {  // redraw the values beyond 2 sigma (only those)
        const auto bad = w.abs() > 2 * std;
        const int64_t n = bad.sum().item<int64_t>();
        if (n == 0) break;
        w.masked_scatter_(bad, torch::empty({n}, w.options()).normal_(0, std));
      }
    } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    }
  }
}

}  // namespace

ResNetImpl::ResNetImpl(const ResNetOptions& o) : options_(o), inplanes_(o.base_width) {
  TORCH_CHECK(o.block == "basic" || o.block == "bottleneck", "unknown ResNet block '", o.block, "'");
  TORCH_CHECK(o.layers.size() == 4, "ResNet needs 4 stages");
  TORCH_CHECK(o.layout == ResNetLayout::kTorchvision || (o.block == "bottleneck" && !o.small_input),
              "TensorFlow ResNet layouts have bottleneck blocks and the ImageNet stem");
  // TF-Slim's resnet_v1 strides the last unit of stages 1-3; the others the first of 2-4.
  const bool slim = o.layout == ResNetLayout::kSlim;
  conv1 = register_module(
      "conv1", o.small_input
                   ? conv(3, o.base_width, 3, 1)
                   : torch::nn::Conv2d(torch::nn::Conv2dOptions(3, o.base_width, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", bn(o.base_width, o));
  layer1 = register_module("layer1", make_layer(o.base_width, o.layers[0], slim ? 2 : 1));
  layer2 = register_module("layer2", make_layer(o.base_width * 2, o.layers[1], 2));
  layer3 = register_module("layer3", make_layer(o.base_width * 4, o.layers[2], 2));
  TORCH_CHECK(o.num_stages == 3 || o.num_stages == 4, "a ResNet has 3 or 4 stages, not ", o.num_stages);
  TORCH_CHECK(o.num_stages == 4 || !o.include_top, "a ResNet without layer4 has no classifier");
  if (o.num_stages == 4) layer4 = register_module("layer4", make_layer(o.base_width * 8, o.layers[3], slim ? 1 : 2));
  if (o.include_top) fc = register_module("fc", torch::nn::Linear(inplanes_, o.num_classes));

  if (!o.initialize) return;
  torch::NoGradGuard no_grad;
  init_weights(*this);
  if (fc) {
    fc->weight.normal_(0, 0.01);
    fc->bias.zero_();
  }
  if (o.zero_init_residual) {
    for (auto& m : modules(false)) {
      if (auto* blk = m->as<BasicBlockImpl>()) blk->last_bn()->weight.zero_();
      if (auto* blk = m->as<BottleneckImpl>()) blk->last_bn()->weight.zero_();
    }
  }
}

torch::nn::Sequential resnet_stage(int64_t in_channels, int64_t planes, int64_t units, int64_t stride,
                                   const ResNetOptions& o) {
  const bool bottleneck = o.block == "bottleneck";
  const int64_t expansion = bottleneck ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
  torch::nn::Sequential layer;
  const int64_t strided = o.layout == ResNetLayout::kSlim ? units - 1 : 0;
  int64_t in = in_channels;
  for (int64_t i = 0; i < units; ++i) {
    const int64_t s = i == strided ? stride : 1;
    torch::nn::Sequential down{nullptr};
    // A projection where the channels change (and, in v1.5, where the first block strides);
    // TF-Slim's strided last unit subsamples instead.
    if (i == 0 && (in != planes * expansion || (s != 1 && o.layout != ResNetLayout::kSlim)))
      down = torch::nn::Sequential(conv(in, planes * expansion, 1, s), bn(planes * expansion, o));
    if (bottleneck) layer->push_back(Bottleneck(in, planes, s, down, o));
    else layer->push_back(BasicBlock(in, planes, s, down, o));
    in = planes * expansion;
  }
  if (o.initialize) {
    init_weights(*layer);
    torch::NoGradGuard no_grad;
    if (o.zero_init_residual)
      for (auto& m : layer->modules(false)) {
        if (auto* blk = m->as<BasicBlockImpl>()) blk->last_bn()->weight.zero_();
        if (auto* blk = m->as<BottleneckImpl>()) blk->last_bn()->weight.zero_();
      }
  }
  return layer;
}

torch::nn::Sequential ResNetImpl::make_layer(int64_t planes, int64_t blocks, int64_t stride) {
  ResNetOptions o = options_;
  o.initialize = false;  // the constructor initialises the whole network (one draw order)
  auto layer = resnet_stage(inplanes_, planes, blocks, stride, o);
  inplanes_ = planes * (options_.block == "bottleneck" ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion);
  return layer;
}

torch::Tensor ResNetImpl::features(torch::Tensor x) {
  x = stem(std::move(x));
  TORCH_CHECK(layer4, "features(): this ResNet has no layer4 (num_stages 3)");
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  return x.mean({2, 3});
}

std::vector<torch::Tensor> ResNetImpl::slim_stage_outputs(torch::Tensor x, int stages) {
  TORCH_CHECK(options_.layout == ResNetLayout::kSlim && options_.block == "bottleneck",
              "stage outputs before subsampling: TF-Slim bottleneck ResNets only");
  TORCH_CHECK(stages >= 1 && stages <= 4, "ResNet stages are 1..4, not ", stages);
  x = stem(std::move(x));
  std::vector<torch::Tensor> out;
  for (auto* layer : {&layer1, &layer2, &layer3, &layer4}) {
    if (static_cast<int>(out.size()) == stages) break;
    const size_t n = (*layer)->size();
    for (size_t i = 0; i + 1 < n; ++i) x = (*layer)[i]->as<BottleneckImpl>()->forward(x);
    auto* last = (*layer)[n - 1]->as<BottleneckImpl>();
    if (last->stride_ > 1) {
      out.push_back(last->forward_unstrided(x));
      x = out.back().slice(2, 0, c10::nullopt, last->stride_).slice(3, 0, c10::nullopt, last->stride_);
    } else {
      x = last->forward(x);
      out.push_back(x);
    }
  }
  return out;
}

torch::Tensor ResNetImpl::slim_block3(torch::Tensor x, int64_t output_stride) {
  TORCH_CHECK(options_.layout == ResNetLayout::kSlim && options_.block == "bottleneck",
              "block3 at an output stride: TF-Slim bottleneck ResNets only");
  TORCH_CHECK(output_stride == 8 || output_stride == 16, "output_stride must be 8 or 16, not ", output_stride);
  // stack_blocks_dense: once the stride reaches output_stride, units run at stride 1 and the
  // rate grows by the stride each would have had instead.
  x = layer1->forward(stem(std::move(x)));  // stride 8
  int64_t rate = 1;
  for (auto* layer : {&layer2, &layer3}) {
    const size_t n = (*layer)->size();
    for (size_t i = 0; i < n; ++i) {
      auto* unit = (*layer)[i]->as<BottleneckImpl>();
      if (output_stride == 8 || layer == &layer3) {
        x = unit->forward_atrous(x, rate);
        rate *= unit->stride_;
      } else {
        x = unit->forward(x);
      }
    }
  }
  return x;
}

torch::Tensor ResNetImpl::stem(torch::Tensor x) {
  x = torch::relu(norm(*bn1, conv1(x)));
  if (options_.layout != ResNetLayout::kTorchvision) {
    // TF's 'SAME' max-pool. After the ReLU every value is >= 0, so zero padding is the -inf
    // padding of a max-pool.
    x = layers::max_pool2d_tf_same(x, 3, 2, /*pad_value=*/0.0);
  } else if (!options_.small_input) {
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
  }
  return x;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  TORCH_CHECK(fc, "ResNet without its classifier (include_top false): use features()");
  return fc(features(std::move(x)));
}

}  // namespace orchard::models
