// The networks of the OD API's Faster R-CNN with a TF-Slim ResNet-v1 feature extractor
// (faster_rcnn_resnet50 / 101 / 152, models/faster_rcnn_resnet_v1_feature_extractor.py): the
// first stage (resnet_v1 to block3 at first_stage_features_stride 16 or 8), the RPN (a 3x3
// ReLU6 convolution 'Conv' and the 1x1 FirstStageBoxPredictor), and the second stage on the
// proposals' crops (crop_and_resize to initial_crop_size, max pool, block4, the
// MaskRCNNBoxPredictor's average pool and one fully connected layer per output). The targets,
// losses and post-processing are detect/rpn.h and detect/box_classifier.h; the meta-architecture
// is tasks/detect/faster_rcnn/ (docs/od_api_two_stage.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <optional>
#include <string>

#include "orchard/models/resnet.h"
#include "orchard/models/tf_names.h"

namespace orchard::detect {

struct FasterRcnnModelOptions {
  std::string feature_extractor = "faster_rcnn_resnet50";  // or faster_rcnn_resnet101 / 152
  int64_t num_classes = 90;                                // without the background
  int64_t features_stride = 16;                            // first_stage_features_stride: 16 or 8
  bool batch_norm_trainable = false;  // false (the samples): batch norms use their moving statistics
  int64_t anchors_per_location = 12;  // scales x aspect ratios of the grid anchor generator
  int64_t rpn_depth = 512;            // first_stage_box_predictor_depth
  int64_t rpn_kernel_size = 3;        // first_stage_box_predictor_kernel_size
  int64_t rpn_atrous_rate = 1;        // first_stage_atrous_rate
  double rpn_init_stddev = 0.01;      // first_stage_box_predictor_conv_hyperparams' truncated normal
  int64_t initial_crop_size = 14;
  int64_t maxpool_kernel_size = 2;
  int64_t maxpool_stride = 2;
  bool use_dropout = false;  // mask_rcnn_box_predictor
  double dropout_keep_probability = 1.0;
  bool initialize = true;
};

// The ResNet depth of a faster_rcnn_resnet* type (50, 101 or 152); nullopt for other types.
std::optional<int64_t> faster_rcnn_resnet_depth(const std::string& feature_extractor);

class FasterRcnnModelImpl : public torch::nn::Module {
 public:
  explicit FasterRcnnModelImpl(const FasterRcnnModelOptions& options);

  struct FirstStage {
    torch::Tensor features;        // [B, 1024, Hf, Wf]: rpn_features_to_crop
    torch::Tensor box_encodings;   // [B, Hf * Wf * A, 4]
    torch::Tensor objectness;      // [B, Hf * Wf * A, 2] (background, object)
  };
  // images [B, 3, H, W] in [-1, 1] (Orchard's input), as RGB 0..255 minus the ImageNet means.
  FirstStage first_stage(const torch::Tensor& images);
  // The box classifier on the crops of `features` at `boxes` [M, 4] (normalised to the padded
  // input) of images `box_indices` [M] -> refined box encodings [M, K, 4] and class logits
  // [M, K + 1] (background first).
  std::pair<torch::Tensor, torch::Tensor> second_stage(const torch::Tensor& features, const torch::Tensor& boxes,
                                                       const torch::Tensor& box_indices);
  // The first stage's feature map size for a height x width input.
  std::pair<int64_t, int64_t> feature_map_size(int64_t height, int64_t width) const;

  // Batch norms stay in inference mode unless batch_norm_trainable (slim's is_training = false).
  void train(bool on = true) override;
  const FasterRcnnModelOptions& options() const { return options_; }
  // The class-specific outputs (re-initialised for a new num_classes).
  static bool is_prediction_head_parameter(const std::string& name);
  // TF1 names of the OD API's Faster R-CNN (FirstStageFeatureExtractor/resnet_v1_50/..., Conv,
  // FirstStageBoxPredictor, SecondStageFeatureExtractor/resnet_v1_50/block4, SecondStageBoxPredictor);
  // `classification`: the TF-Slim ImageNet checkpoint's (resnet_v1_50/..., block4 of the
  // second stage from the classifier's block4; the RPN and box predictor have none).
  std::optional<models::TfName> tf_name(const std::string& name, bool classification) const;

 private:
  FasterRcnnModelOptions options_;
  std::string scope_;  // resnet_v1_50 ...
  models::ResNet first_stage_extractor_{nullptr};
  torch::nn::Conv2d rpn_conv_{nullptr}, rpn_box_{nullptr}, rpn_class_{nullptr};
  torch::nn::Sequential second_stage_extractor_{nullptr};
  torch::nn::Linear box_encoding_{nullptr}, class_logits_{nullptr};
};
TORCH_MODULE(FasterRcnnModel);

}  // namespace orchard::detect
