#include "orchard/layers/tf_same.h"

#include <torch/nn/functional/conv.h>
#include <torch/nn/functional/padding.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>

namespace orchard::layers {

namespace F = torch::nn::functional;

torch::Tensor conv2d_tf_same(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, const torch::Tensor& weight) {
  const auto& o = conv.options;
  const auto& w = weight.defined() ? weight : conv.weight;
  int64_t begin[2], end[2];
  bool stride_past_input = false;
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x.size(2 + d), s = (*o.stride())[d];
    stride_past_input = stride_past_input || s > in;
    const int64_t k = ((*o.kernel_size())[d] - 1) * (*o.dilation())[d] + 1;
    const int64_t out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>((out - 1) * s + k - in, 0);
    begin[d] = total / 2;
    end[d] = total - begin[d];
  }
  auto options = F::Conv2dFuncOptions().bias(conv.bias).stride(o.stride()).dilation(o.dilation()).groups(o.groups());
  // Symmetric padding goes to the convolution itself, except where the stride exceeds the
  // input (an SSD extra layer at 1x1): there libtorch 1.13's CPU bf16 convolution (oneDNN)
  // returns a weight gradient that varies from call to call and is sometimes NaN. Padding
  // the input first gives the same result and a correct gradient.
  if (begin[0] == end[0] && begin[1] == end[1] && !stride_past_input)
    return F::conv2d(x, w, options.padding(torch::ExpandingArray<2>({begin[0], begin[1]})));
  return F::conv2d(F::pad(x, F::PadFuncOptions({begin[1], end[1], begin[0], end[0]})), w, options);
}

torch::Tensor max_pool2d_tf_same(const torch::Tensor& x, int64_t kernel, int64_t stride, double pad_value) {
  int64_t pad[4];  // F::pad's order: left, right, top, bottom
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x.size(2 + d), out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((out - 1) * stride + kernel - in, 0);
    pad[2 * (1 - d)] = total / 2;
    pad[2 * (1 - d) + 1] = total - total / 2;
  }
  // Zero padding is applied even when empty: the TF ResNets' stem always padded, and a pad of
  // nothing costs a copy, not a different result.
  const bool skip = pad_value != 0.0 && pad[0] + pad[1] + pad[2] + pad[3] == 0;
  const auto padded = skip ? x : F::pad(x, F::PadFuncOptions({pad[0], pad[1], pad[2], pad[3]}).value(pad_value));
  return F::max_pool2d(padded, F::MaxPool2dFuncOptions(kernel).stride(stride));
}

torch::Tensor avg_pool2d_tf_same(const torch::Tensor& x, int64_t kernel) {
  TORCH_CHECK(kernel % 2 == 1, "avg_pool2d_tf_same needs an odd kernel, got ", kernel);
  return F::avg_pool2d(x, F::AvgPool2dFuncOptions(kernel).stride(1).padding((kernel - 1) / 2).count_include_pad(false));
}

}  // namespace orchard::layers
