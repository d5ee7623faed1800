// A registered model as the image tasks use it: with channels_last, 4-d weights are kept
// NHWC and NHWC input batches are viewed as NCHW tensors in the channels_last memory
// format, so oneDNN/cuDNN run the channels_last kernels end to end.
#pragma once

#include "orchard/data/preprocess.h"
#include "orchard/engine/task.h"
#include "orchard/models/registry.h"

namespace orchard::tasks {

models::ImageModel build_image_model(const models::ModelConfig& config, bool channels_last);
// The input scaling the architecture expects: RGB minus the ImageNet means for the ResNets
// (TF Models' ResNet preprocessing); [-1, 1] for inception_v3 (TF-Slim's inception
// preprocessing, what its ImageNet weights and `orchard caption` expect).
void set_input_scaling(const models::ModelConfig& config, data::PreprocessOptions* options);

torch::Tensor forward_image_model(models::ImageModel& model, const torch::Tensor& images, bool channels_last);

// What classification's and multi-label tagging's forward pass returns.
struct ImageModelOutputs : Outputs {
  torch::Tensor logits;  // [B, C], in the autocast dtype
};

}  // namespace orchard::tasks
