#include "orchard/layers/conv_norm_activation.h"

#include "orchard/layers/batch_norm.h"
#include "orchard/layers/tf_same.h"

namespace orchard::layers {

ConvNormActivationImpl::ConvNormActivationImpl(const ConvNormActivationOptions& o) : options(o) {
  const int64_t padding = o.tf_same_padding() ? 0 : (o.kernel_size() - 1) / 2;
  conv = register_module("0",
                         torch::nn::Conv2d(torch::nn::Conv2dOptions(o.in_channels(), o.out_channels(), o.kernel_size())
                                               .stride(o.stride())
                                               .padding(padding)
                                               .groups(o.groups())
                                               .bias(false)));
  bn = register_module("1",
                       torch::nn::BatchNorm2d(
                           torch::nn::BatchNorm2dOptions(o.out_channels()).momentum(o.bn_momentum()).eps(o.bn_eps())));
}

torch::Tensor ConvNormActivationImpl::forward(const torch::Tensor& x) {
  if (weights_quant)
    return act_quant->forward(
        activate(options.activation(), quantized_conv_bn(*conv, *bn, *weights_quant, x, options.tf_same_padding())));
  auto y = options.tf_same_padding() ? conv2d_tf_same(*conv, x) : conv->forward(x);
  return activate(options.activation(), batch_norm(*bn, y));
}

void ConvNormActivationImpl::enable_quantization(const std::shared_ptr<QuantizationControl>& control) {
  weights_quant = register_module("weights_quant", FakeQuant(control, /*weights=*/true));
  act_quant = register_module("act_quant", FakeQuant(control, /*weights=*/false));
}

}  // namespace orchard::layers
