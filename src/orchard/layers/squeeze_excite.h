// Squeeze-and-excitation (Hu et al. 2018): x * gate(fc2(inner(fc1(mean over H, W of x)))),
// fc1 and fc2 1x1 convolutions with bias. MobileNetV3's (TF-Slim conv_blocks.squeeze_excite:
// inner ReLU, hard-sigmoid gate) and MobileDet's (inner = the block's activation, sigmoid gate).
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "orchard/layers/activation.h"

namespace orchard::layers {

struct SqueezeExciteOptions {
  SqueezeExciteOptions(int64_t channels, int64_t squeeze_channels)
      : channels_(channels), squeeze_channels_(squeeze_channels) {}
  TORCH_ARG(int64_t, channels);
  TORCH_ARG(int64_t, squeeze_channels);  // fc1's outputs
  TORCH_ARG(Activation, inner) = Activation::kRelu;
  TORCH_ARG(Activation, gate) = Activation::kSigmoid;
};

// Input and output [N, channels, H, W]. Children "fc1" and "fc2", torch's default
// initialisation (the models re-initialise them).
class SqueezeExciteImpl : public torch::nn::Module {
 public:
  explicit SqueezeExciteImpl(const SqueezeExciteOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  SqueezeExciteOptions options;
  torch::nn::Conv2d fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(SqueezeExcite);

}  // namespace orchard::layers
