// Every batch norm of every Orchard model (the image models, the SSD and Faster R-CNN layers)
// runs through batch_norm(), so one override, e.g. a batch norm synchronized across
// data-parallel replicas (train/distributed.cc), covers them all.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace torch::nn {
class BatchNorm2dImpl;
}

namespace orchard::layers {

// Replaces every batch norm's training-mode forward; an empty function restores the modules'
// own. Process-wide: set it before training starts, not while a forward runs.
using BatchNormOverride = std::function<at::Tensor(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x)>;
void set_batch_norm_override(BatchNormOverride f);

// bn.forward(x), or the override in training mode.
at::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x);

}  // namespace orchard::layers
