#include "orchard/layers/squeeze_excite.h"

namespace orchard::layers {

SqueezeExciteImpl::SqueezeExciteImpl(const SqueezeExciteOptions& o) : options(o) {
  fc1 = register_module("fc1", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.channels(), o.squeeze_channels(), 1)));
  fc2 = register_module("fc2", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.squeeze_channels(), o.channels(), 1)));
}

torch::Tensor SqueezeExciteImpl::forward(const torch::Tensor& x) {
  const auto s = activate(options.inner(), fc1->forward(x.mean({2, 3}, /*keepdim=*/true)));
  return x * activate(options.gate(), fc2->forward(s));
}

}  // namespace orchard::layers
