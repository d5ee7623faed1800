// The networks of the OD API's Faster R-CNN, R-FCN and Mask R-CNN. The feature extractor is the one
// registered under feature_extractor.type in detect/feature_extractors/ (one file per family):
// TF-Slim's ResNet-v1 (faster_rcnn_resnet50 / 101 / 152: the first stage to block3 at
// first_stage_features_stride 16 or 8, block4 on the crops), Inception-v2 (faster_rcnn_inception_v2:
// to Mixed_4e at stride 16, Mixed_5a..5c on the crops) and Inception-ResNet-v2
// (faster_rcnn_inception_resnet_v2: to PreAuxLogits at stride 16 or 8, Mixed_7a..Conv2d_7b_1x1 on
// the crops), its two stages registered as first_stage_extractor.* and second_stage_extractor.*.
// Then the RPN (a 3x3 ReLU6 convolution 'Conv' and the
// 1x1 FirstStageBoxPredictor), and the second stage on the proposals' crops (crop_and_resize to
// initial_crop_size, max pool, the extractor's second part, the MaskRCNNBoxPredictor's average
// pool and one fully connected layer per output; R-FCN instead: the second part on the whole
// feature map, then position-sensitive score maps cropped per proposal), and Mask R-CNN's mask
// head. The targets, losses and post-processing are detect/rpn.h and detect/box_classifier.h; the
// meta-architecture is meta_arch/faster_rcnn.h (docs/od_api_two_stage.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <optional>
#include <string>

#include "orchard/detect/feature_extractors/faster_rcnn_feature_extractor.h"
#include "orchard/models/inception_resnet_v2.h"  // the extractors' modules, for callers that inspect them
#include "orchard/models/inception_v2.h"
#include "orchard/models/resnet.h"
#include "orchard/models/tf_names.h"

namespace orchard::detect {

struct FasterRcnnModelOptions {
  // A name in detect/feature_extractors' registry: faster_rcnn_resnet50 / 101 / 152,
  // faster_rcnn_inception_v2 or faster_rcnn_inception_resnet_v2.
  std::string feature_extractor = "faster_rcnn_resnet50";
  int64_t num_classes = 90;           // without the background
  int64_t features_stride = 16;       // first_stage_features_stride: 16 or 8
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
  // R-FCN (rfcn_box_predictor): the second stage runs block4 on the whole feature map, then
  // 1x1 convolutions to position-sensitive score maps cropped per proposal.
  bool rfcn = false;
  int64_t rfcn_depth = 1024;  // rfcn_box_predictor.depth (reduce_depth)
  int64_t rfcn_crop_height = 12, rfcn_crop_width = 12;
  int64_t rfcn_bins_height = 3, rfcn_bins_width = 3;
  double rfcn_init_stddev = 0.01;  // conv_hyperparams' truncated normal
  // Mask R-CNN: mask_rcnn_box_predictor's mask head (MaskRCNNMaskHead).
  bool predict_instance_masks = false;
  int64_t mask_height = 15;
  int64_t mask_width = 15;
  int64_t mask_conv_depth = 256;     // mask_prediction_conv_depth; 0: from the features and classes
  int64_t mask_num_conv_layers = 2;  // mask_prediction_num_conv_layers, the predicting one included
  bool masks_are_class_agnostic = false;
  bool convolve_then_upsample = false;  // convolve_then_upsample_masks
  double mask_init_stddev = 0.01;       // conv_hyperparams' truncated normal
  bool initialize = true;
};

// MaskRCNNMaskHead's automatic depth (mask_prediction_conv_depth 0): 2^round((2 log2 C + 3 log2 K) / 5)
// for C feature channels and K classes.
int64_t mask_conv_depth(int64_t feature_channels, int64_t num_classes);

class FasterRcnnModelImpl : public torch::nn::Module {
 public:
  explicit FasterRcnnModelImpl(const FasterRcnnModelOptions& options);

  struct FirstStage {
    torch::Tensor features;       // [B, C, Hf, Wf]: rpn_features_to_crop (ResNet 1024, Inception-v2 576,
                                  // Inception-ResNet-v2 1088)
    torch::Tensor box_encodings;  // [B, Hf * Wf * A, 4]
    torch::Tensor objectness;     // [B, Hf * Wf * A, 2] (background, object)
  };
  // images [B, 3, H, W] in [-1, 1] (Orchard's input; ResNet-v1 sees RGB 0..255 minus the ImageNet
  // means, Inception-v2 the input as it is).
  FirstStage first_stage(const torch::Tensor& images);
  // The box classifier on the crops of `features` at `boxes` [M, 4] (normalised to the padded
  // input) of images `box_indices` [M] -> refined box encodings [M, K, 4] and class logits
  // [M, K + 1] (background first).
  std::pair<torch::Tensor, torch::Tensor> second_stage(const torch::Tensor& features, const torch::Tensor& boxes,
                                                       const torch::Tensor& box_indices);
  // second_stage in two parts: the box classifier features of the crops (crop_and_resize, max
  // pool, block4 [M, 2048, h, w], Mixed_5a..5c [M, 1024, h, w] or Mixed_7a..Conv2d_7b_1x1
  // [M, 1536, h, w]), and the box predictor on them.
  torch::Tensor box_classifier_features(const torch::Tensor& features, const torch::Tensor& boxes,
                                        const torch::Tensor& box_indices);
  std::pair<torch::Tensor, torch::Tensor> box_predictor(const torch::Tensor& box_features);
  // Mask R-CNN's mask logits [M, K (1 if class agnostic), mask_height, mask_width] from the box
  // classifier features: bilinear resize (align_corners) to the mask size, ReLU 3x3
  // convolutions, a final linear 3x3 convolution (convolve_then_upsample: convolutions first,
  // nearest-neighbour upsampling, one more convolution).
  torch::Tensor mask_predictor(const torch::Tensor& box_features);
  // The first stage's feature map size for a height x width input.
  std::pair<int64_t, int64_t> feature_map_size(int64_t height, int64_t width) const;

  // Batch norms stay in inference mode unless batch_norm_trainable (slim's is_training = false).
  void train(bool on = true) override;
  const FasterRcnnModelOptions& options() const { return options_; }
  feature_extractors::FasterRcnnFeatureExtractor& feature_extractor() const { return *extractor_; }
  // The class-specific outputs (re-initialised for a new num_classes).
  bool is_prediction_head_parameter(const std::string& name) const;
  // TF1 names of the OD API's Faster R-CNN (FirstStageFeatureExtractor/<scope>/..., Conv,
  // FirstStageBoxPredictor, SecondStageFeatureExtractor/<scope>/..., SecondStageBoxPredictor; scope
  // resnet_v1_50/101/152, InceptionV2 or InceptionResnetV2); `classification`: the TF-Slim
  // ImageNet checkpoint's (<scope>/..., the second stage's layers from the classifier's, e.g.
  // resnet_v1_50/block4; the RPN and box predictor have none).
  std::optional<models::TfName> tf_name(const std::string& name, bool classification) const;

 private:
  FasterRcnnModelOptions options_;
  std::shared_ptr<feature_extractors::FasterRcnnFeatureExtractor> extractor_;
  std::shared_ptr<torch::nn::Module> first_stage_extractor_, second_stage_extractor_;  // extractor_'s stages
  torch::nn::Conv2d rpn_conv_{nullptr}, rpn_box_{nullptr}, rpn_class_{nullptr};
  torch::nn::Linear box_encoding_{nullptr}, class_logits_{nullptr};
  torch::nn::Conv2d reduce_depth_{nullptr}, refined_locations_{nullptr}, class_predictions_{nullptr};  // R-FCN
  torch::nn::ModuleList mask_convs_{nullptr};  // SecondStageBoxPredictor/Conv, Conv_1, ...; the last predicts
};
TORCH_MODULE(FasterRcnnModel);

}  // namespace orchard::detect
