// Convolution (no bias) -> batch norm -> activation, torchvision's Conv2dNormActivation and
// TF-Slim's slim.conv2d under a batch-norm arg scope: the MobileNets', MobileDets', the SSD
// extra layers' and the FPN's building block.
#pragma once

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "orchard/layers/activation.h"
#include "orchard/layers/fake_quant.h"

namespace orchard::layers {

struct ConvNormActivationOptions {
  ConvNormActivationOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(int64_t, kernel_size);
  TORCH_ARG(int64_t, stride) = 1;
  TORCH_ARG(int64_t, groups) = 1;  // in_channels: depthwise
  // false: symmetric padding (kernel_size - 1) / 2 (torchvision); true: TF 'SAME'.
  TORCH_ARG(bool, tf_same_padding) = false;
  TORCH_ARG(double, bn_momentum) = 0.1;  // torch convention: 1 - TF decay
  TORCH_ARG(double, bn_eps) = 1e-5;
  TORCH_ARG(Activation, activation) = Activation::kRelu6;
};

// Input and output [N, C, H, W]. Children "0" (the convolution) and "1" (the batch norm), so
// torchvision's state-dict names import; the batch norm runs through layers::batch_norm.
class ConvNormActivationImpl : public torch::nn::Module, public Quantizable {
 public:
  explicit ConvNormActivationImpl(const ConvNormActivationOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  // Quantization-aware training (layers/fake_quant.h): the batch norm folded into quantized
  // weights ("weights_quant"), the output quantized ("act_quant").
  void enable_quantization(const std::shared_ptr<QuantizationControl>& control) override;

  ConvNormActivationOptions options;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  FakeQuant weights_quant{nullptr}, act_quant{nullptr};
};
TORCH_MODULE(ConvNormActivation);

}  // namespace orchard::layers
