// A registered ResNet as the image tasks use it: with channels_last, 4-d weights are kept
// NHWC and NHWC input batches are viewed as NCHW tensors in the channels_last memory
// format, so oneDNN/cuDNN run the channels_last kernels end to end.
#pragma once

#include "orchard/models/registry.h"

namespace orchard::tasks {

models::ResNet build_image_model(const models::ModelConfig& config, bool channels_last);
torch::Tensor forward_image_model(models::ResNet& model, const torch::Tensor& images, bool channels_last);

}  // namespace orchard::tasks
