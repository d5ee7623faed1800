// The activations Orchard's networks use, by name, so a layer can take one as an option.
#pragma once

#include <ATen/core/Tensor.h>

namespace orchard::layers {

enum class Activation {
  kNone,
  kRelu,
  // min(max(x, 0), 6), as a clamp: libtorch 1.13 has no bf16 hardtanh backward on the CPU
  // (--dtype bf16), and the two differ only in the gradient at exactly 0 and 6.
  kRelu6,
  kHardSwish,  // x * relu6(x + 3) / 6 (TF-Slim's hard_swish, the OD API's _swish6)
  kSigmoid,
  // relu6(x + 3) * 0.16667: TF-Slim's MobileNetV3 squeeze-excite gate, with its rounded 1/6.
  kHardSigmoid,
};

// `a` applied to x (x itself for kNone).
at::Tensor activate(Activation a, const at::Tensor& x);

}  // namespace orchard::layers
