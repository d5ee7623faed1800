// Tencent ML-Images' ResNet (tencent-ml-images models/resnet.py, the network of its published
// ResNet-101 checkpoints): a pre-activation ResNet ("v2": batch norm and ReLU before each
// convolution, nothing after the residual sum) with ML-Images' three changes: no max-pool after
// the 7x7/2 stem (whose output is not normalised) but stride 2 in the first block of all four
// stages, the stride on the 3x3 convolution, and the projection shortcut with a batch norm and
// ReLU of its own. A final batch norm and ReLU come before the global average pool. Inputs are
// RGB scaled to [-1, 1].
//
// Orchard names (TensorFlow's, tf_name): conv1 (init/init_conv/conv2d), layerL.B.{bn1, conv1,
// bn2, conv2, bn3, conv3} (stages_{L-1}_block_B/{conv1_b2_bn, conv1_b2, conv2_b2_bn, conv2_b2,
// conv3_b2_bn, conv3_b2}), layerL.0.{shortcut_bn, shortcut_conv} (conv1_b1_bn, conv1_b1),
// bn_final (global_pool/bn), fc (logits/dense).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>
#include <vector>

#include "orchard/models/image_model.h"
#include "orchard/models/tf_names.h"

namespace orchard::models {

struct MlImagesResNetOptions {
  std::vector<int64_t> layers = {3, 4, 23, 3};  // 50: {3, 4, 6, 3}; 152: {3, 8, 36, 3}
  int64_t num_classes = 1000;                   // ML-Images' checkpoints: 11166, or 1000 (ImageNet)
  double bn_momentum = 0.003;                   // batch_norm_decay 0.997
  double bn_eps = 1e-5;
  bool initialize = true;  // variance_scaling (He) convolutions, BN 1/0, fc Glorot; false: left to a restore
};

class MlImagesResNetImpl : public ImageModelImpl {
 public:
  explicit MlImagesResNetImpl(const MlImagesResNetOptions& options);
  torch::Tensor forward(torch::Tensor x) override;
  torch::Tensor features(torch::Tensor x) override;  // after the final BN-ReLU, averaged: [N, 2048]
  const MlImagesResNetOptions& options() const { return options_; }

 private:
  MlImagesResNetOptions options_;
  torch::nn::Conv2d conv1{nullptr};
  std::vector<torch::nn::ModuleList> layers_;
  torch::nn::BatchNorm2d bn_final{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(MlImagesResNet);

// ML-Images' TensorFlow name of a variable (above); throws std::invalid_argument for others.
std::optional<TfName> resnet_ml_images_tf_name(const std::string& orchard_name);

}  // namespace orchard::models
