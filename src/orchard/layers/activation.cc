#include "orchard/layers/activation.h"

#include <torch/types.h>

namespace orchard::layers {

at::Tensor activate(Activation a, const at::Tensor& x) {
  switch (a) {
    case Activation::kRelu: return torch::relu(x);
    case Activation::kRelu6: return torch::clamp(x, 0.0, 6.0);
    case Activation::kHardSwish: return torch::hardswish(x);
    case Activation::kSigmoid: return torch::sigmoid(x);
    case Activation::kHardSigmoid: return torch::clamp(x + 3.0, 0.0, 6.0) * 0.16667;
    case Activation::kNone: break;
  }
  return x;
}

}  // namespace orchard::layers
