// Inception-ResNet-v2 (Szegedy et al. 2016, "Inception-v4, Inception-ResNet and the Impact of
// Residual Connections on Learning") as TF-Slim's nets/inception_resnet_v2.py builds it, in the
// two parts the TF Object Detection API's FasterRCNNInceptionResnetV2FeatureExtractor runs:
//
//   kFirstStage   inception_resnet_v2_base(final_endpoint='PreAuxLogits'), the RPN's features:
//                 Conv2d_1a_3x3 (32, stride 2), Conv2d_2a_3x3 (32), Conv2d_2b_3x3 (64),
//                 MaxPool_3a_3x3 (stride 2), Conv2d_3b_1x1 (80), Conv2d_4a_3x3 (192),
//                 MaxPool_5a_3x3 (stride 2), Mixed_5b (320), Repeat/block35_1..10 (scale 0.17),
//                 Mixed_6a (1088; stride 2, or 1 at output_stride 8),
//                 Repeat_1/block17_1..20 (scale 0.10; rate-2 convolutions at output_stride 8).
//                 [N, 3, H, W] -> [N, 1088, H/16, W/16] (or /8), sizes rounded up when aligned.
//   kSecondStage  the extractor's own copy of the rest, run on the cropped proposals:
//                 Mixed_7a (2080; its stride-2 convolutions and max pool always 'VALID'),
//                 Repeat/block8_1..9 (scale 0.20), Block8 (scale 1, no activation),
//                 Conv2d_7b_1x1 (1536). [N, 1088, 17, 17] -> [N, 1536, 8, 8].
//
// Every convolution but the residual blocks' 'up' projection is conv (no bias) -> batch norm
// (inception_resnet_v2_arg_scope: decay 0.9997, epsilon 0.001, scale=False, i.e. beta but no
// gamma) -> ReLU. The 'up' projection (each block's Conv2d_1x1 beside its branches) has a bias
// and neither batch norm nor activation; a block returns act(x + scale * up(concat(branches))).
// The batch norms are torch::nn::BatchNorm2d whose `weight` is a constant buffer of ones, not a
// parameter: parameters() holds only the convolution kernels, the up biases and the betas, the
// TF checkpoint's trainable variables (batch_norm() and its synchronized override still work).
//
// Module names are TF's scopes with '/' as '.': Repeat.block35_3.Branch_1.Conv2d_0b_3x3.conv.weight,
// ....bn.bias / .bn.running_mean, Repeat_1.block17_20.Conv2d_1x1.weight / .bias (the up
// projection), Block8.Branch_1.Conv2d_0c_3x1.conv.weight, Conv2d_7b_1x1.bn.running_var.
//
// Input: float [N, 3, H, W] scaled to [-1, 1] (the extractor's preprocess 2/255 * x - 1, i.e.
// Orchard's image range as it is) for the first stage; [N, 1088, h, w] for the second.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "orchard/models/tf_names.h"

namespace orchard::models {

enum class InceptionResnetV2Part { kFirstStage, kSecondStage };

struct InceptionResnetV2Options {
  InceptionResnetV2Part part = InceptionResnetV2Part::kFirstStage;
  // First stage only: 16, or 8 (Mixed_6a at stride 1 and the block17 convolutions at rate 2).
  int64_t output_stride = 16;
  // First stage only: slim's align_feature_maps, true in the OD API: the stem's and Mixed_6a's
  // 'VALID' convolutions and pools become 'SAME' (output size ceil(in / stride)). The second
  // stage's Mixed_7a is 'VALID' either way, as the extractor writes it.
  bool align_feature_maps = true;
  double bn_momentum = 0.0003, bn_eps = 0.001;  // TF decay 0.9997 == torch momentum 0.0003
};

class InceptionResnetV2Impl : public torch::nn::Module {
 public:
  explicit InceptionResnetV2Impl(const InceptionResnetV2Options& options);
  // The built part: [N, 3, H, W] -> [N, 1088, h, w], or [N, 1088, h, w] -> [N, 1536, h', w'].
  torch::Tensor forward(const torch::Tensor& x);
  int64_t output_channels() const { return output_channels_; }  // 1088 or 1536
  const InceptionResnetV2Options& options() const { return options_; }
  // TF's name of a parameter or buffer under `scope` ("InceptionResnetV2"; Faster R-CNN's caller
  // prefixes FirstStageFeatureExtractor/ or SecondStageFeatureExtractor/), e.g.
  // "InceptionResnetV2/Repeat_1/block17_20/Conv2d_1x1/biases". nullopt for the variables
  // TensorFlow does not have: the batch norms' constant gamma and num_batches_tracked.
  // `classification`: the names in slim's ImageNet checkpoint instead, where the second stage's
  // block8 repeat is Repeat_2 (the OD API's restore_from_classification_checkpoint_fn).
  // Throws std::invalid_argument for a name this part does not have.
  std::optional<TfName> tf_name(const std::string& name, const std::string& scope, bool classification = false) const;

 private:
  InceptionResnetV2Options options_;
  int64_t output_channels_ = 0;
  std::vector<std::function<torch::Tensor(const torch::Tensor&)>> layers_;  // in order
};
TORCH_MODULE(InceptionResnetV2);

}  // namespace orchard::models
