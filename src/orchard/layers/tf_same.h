// TensorFlow's 'SAME' padding for convolutions and pools: output size ceil(in / stride), the
// total padding max((out - 1) * stride + k - in, 0) split with the odd pixel (if any) at the
// bottom/right, unlike torch's symmetric padding.
//
// Tensors are [N, C, H, W].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>

namespace torch::nn {
class Conv2dImpl;
}

namespace orchard::layers {

// `conv` on x padded as TF's 'SAME' (its stride and dilation honoured). `conv` must have been
// built with padding 0; its bias, if any, is added. `weight`, where defined, replaces conv's
// (quantization-aware training's folded, fake-quantized weights).
at::Tensor conv2d_tf_same(torch::nn::Conv2dImpl& conv, const at::Tensor& x, const at::Tensor& weight = {});

// A kernel x kernel max pool with TF's 'SAME' padding. The padding holds `pad_value`: -inf
// (the default) never wins; 0 does the same on inputs known to be >= 0 (after a ReLU), as the
// TF ResNets' stem does, and is then always applied, even when there is none.
at::Tensor max_pool2d_tf_same(const at::Tensor& x, int64_t kernel, int64_t stride,
                              double pad_value = -std::numeric_limits<double>::infinity());

// A kernel x kernel stride-1 average pool with TF's 'SAME' padding, kernel odd (so the padding
// is (kernel - 1) / 2 on every side): the padding is left out of the border averages, as TF
// does (torch's count_include_pad would count it).
at::Tensor avg_pool2d_tf_same(const at::Tensor& x, int64_t kernel);

}  // namespace orchard::layers
