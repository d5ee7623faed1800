// Initialisers TensorFlow's networks use that libtorch lacks.
#pragma once

#include <ATen/core/Tensor.h>

namespace orchard::layers {

// TF's truncated_normal_initializer in place: N(0, stddev) with values beyond 2 stddev redrawn
// (so the result's stddev is about 0.88 stddev). Draws from the default generator: one
// uniform_ over w, so the random stream advances exactly as it always has.
void truncated_normal_(at::Tensor& w, double stddev);

}  // namespace orchard::layers
