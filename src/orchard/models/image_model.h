// What the image tasks (classify, multilabel) and export need of a backbone: logits, and the
// globally average-pooled features (the TF-Hub feature-vector output). The ResNets and
// Inception-v3 implement it; models::build_model (registry.h) makes one by name.
#pragma once

#include <torch/nn/module.h>

#include <memory>

namespace orchard::models {

class ImageModelImpl : public torch::nn::Module {
 public:
  // Logits [N, num_classes] of float [N, 3, H, W] images (channels_last memory format welcome).
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Globally average-pooled features [N, C] before any dropout or classifier.
  virtual torch::Tensor features(torch::Tensor x) = 0;
};
using ImageModel = std::shared_ptr<ImageModelImpl>;

}  // namespace orchard::models
