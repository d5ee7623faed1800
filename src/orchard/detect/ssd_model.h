// SSD with a MobileNet feature extractor: the TF Object Detection API's ssd_mobilenet_v2
// (SSDMobileNetV2FeatureExtractor, as in ssd_mobilenet_v2_coco.config) and ssd_mobilenet_v1
// (SSDMobileNetV1FeatureExtractor, ssd_mobilenet_v1_coco.config), each with
// multi_resolution_feature_maps and a ConvolutionalBoxPredictor.
//
// Feature maps (300x300 input, depth_multiplier 1), ssd_mobilenet_v2:
//   0  MobileNetV2 layer_15/expansion_output  [B,  576, 19, 19]  (backbone features[14].conv[0])
//   1  MobileNetV2 layer_19                   [B, 1280, 10, 10]  (backbone features[18])
// ssd_mobilenet_v1:
//   0  MobileNetV1 Conv2d_11_pointwise        [B,  512, 19, 19]  (backbone features[11])
//   1  MobileNetV1 Conv2d_13_pointwise        [B, 1024, 10, 10]  (backbone features[13])
// then both:
//   2..5  extra layers: 1x1 conv to depth/2, then 3x3 stride-2 conv ('SAME') to depth, each
//         conv + BN + ReLU6, depth 512, 256, 256, 128 -> [B, 512, 5, 5] ... [B, 128, 1, 1].
// Each feature map gets a box head and a class head: one kernel_size x kernel_size conv with
// bias ('SAME'), no BN and no activation; SSDLite's (convolutional_box_predictor.use_depthwise)
// are a kernel_size x kernel_size depthwise conv + BN + ReLU6, then a 1x1 conv with bias.
//
// Parameter (and buffer) names:
//   backbone.features.*        MobileNetV2 without its classifier, with torchvision's names: a
//                              torchvision state dict's or a classification checkpoint's
//                              features.* load under the prefix "backbone.". (ssd_mobilenet_v1:
//                              models::MobileNetV1's names.) Its stride-2
//                              convolutions are padded as TF's 'SAME' (the OD API's
//                              use_explicit_padding false), as the zoo's checkpoints expect.
//   TensorFlow names            tf_name(): the OD API's (FeatureExtractor/MobilenetV2/...,
//                              FeatureExtractor/MobilenetV1/..., BoxPredictor_N/...), for its
//                              checkpoints in and out.
//   extras.K.*                 the extra layer making feature map K + 2: extras.K.0.{0,1} the
//                              1x1 conv and its BN, extras.K.1.{0,1} the 3x3 stride-2 conv and
//                              its BN (use_depthwise: extras.K.1 depthwise 3x3 stride 2,
//                              extras.K.2 pointwise 1x1).
//   box_heads.N.{weight,bias}  the box prediction head of feature map N.
//   class_heads.N.{weight,bias} the class prediction head of feature map N.
//   box_depthwise.N.{0,1}.*, class_depthwise.N.{0,1}.*  SSDLite's depthwise conv and its BN
//                              before box_heads.N / class_heads.N (then 1x1).
//   fpn.*, bottom_up.<j>.{0,1}.* the FPN (SsdFpnOptions); predictor.* the weight-shared box
//                              predictor (detect/weight_shared_predictor.h) instead of the heads.
// "The box and class prediction heads" are exactly the parameters under box_heads.,
// class_heads., box_depthwise., class_depthwise. and predictor. (the weight-shared predictor with
// its towers: the OD API's BoxPredictor scope) (is_prediction_head_parameter):
// fine_tune_checkpoint_type "detection" restores everything else, the feature extractor.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <utility>
#include <vector>

#include "orchard/detect/fpn.h"
#include "orchard/detect/mnasfpn.h"
#include "orchard/detect/weight_shared_predictor.h"
#include "orchard/models/inception_v2.h"
#include "orchard/models/inception_v3.h"
#include "orchard/models/mobilenet_v1.h"
#include "orchard/models/mobilenet_v2.h"
#include "orchard/models/mobiledet.h"
#include "orchard/models/mobilenet_v3.h"

namespace orchard::detect {

// The backbone and its building blocks (orchard/models/mobilenet_v2.h). Every batch norm of
// MobileNetV2 and the SSD layers runs through models::batch_norm, so
// models::set_batch_norm_override (synchronized batch norm) covers them too.
using models::batch_norm;
using models::conv2d_tf_same;
using models::ConvNormActivation;
using models::ConvNormActivationImpl;
using models::ConvNormActivationOptions;
using models::make_divisible;
using models::MobileNetV2;
using models::MobileNetV2Endpoint;
using models::MobileNetV2Impl;
using models::MobileNetV2Options;
using models::parse_mobilenet_v2_endpoint;

// The feature extractors (feature_extractor.type) this model builds.
bool is_ssd_mobilenet_feature_extractor(const std::string& type);

// The FPN feature extractors (ssd_mobilenet_v1_fpn, ssd_mobilenet_v2_fpn): feature maps at
// levels min_level..max_level (stride 2^level), the base network's maps of levels up to 5 through
// the top-down pathway (detect/fpn.h), the levels above by 3x3 stride-2 conv + BN + ReLU6 layers
// on the coarsest (TF fpn/bottom_up_Conv2d_<14|20 + j>), every map depth(additional_layer_depth)
// channels.
struct SsdFpnOptions {
  bool enabled = false;
  int min_level = 3, max_level = 7;
  int64_t additional_layer_depth = 256;
};

struct SsdModelOptions {
  // The base network: "ssd_mobilenet_v2", "ssd_mobilenet_v1", "ssd_mobilenet_v3_large",
  // "ssd_mobilenet_v3_small", or with fpn "ssd_resnet50_v1" /
  // "ssd_resnet101_v1" (TF-Slim's resnet_v1, RetinaNet).
  std::string feature_extractor = "ssd_mobilenet_v2";
  SsdFpnOptions fpn;
  // ssd_mobilenet_v1_ppn (pooling_pyramid_feature_maps, base_feature_map_depth 0): the first
  // feature map is Conv2d_11_pointwise, each next one a 2x2 stride-2 'SAME' max pool of it.
  bool ppn = false;
  // ssd_mobilenet_v2_mnasfpn: MobileNetV2 to layer_18, MnasFPN (mnasfpn.h) over layer_7,
  // layer_14, layer_18 at fpn levels 3..6 with fpn.additional_layer_depth channels.
  bool mnasfpn = false;
  // weight_shared_convolutional_box_predictor; unset: convolutional_box_predictor. Its
  // in_channels, num_levels, anchors_per_location, num_class_slots and box_code_size are the
  // model's.
  std::optional<WeightSharedPredictorOptions> weight_shared;
  int64_t num_classes = 90;  // without background; class outputs have num_classes + 1 columns (0 = background)
  double depth_multiplier = 1.0;
  int64_t min_depth = 16;
  // Anchors per cell of each feature map, from the anchor generator; its length (1..6) is
  // the number of feature maps, as TF's num_layers.
  std::vector<int64_t> anchors_per_location{3, 6, 6, 6, 6, 6};
  int64_t box_code_size = 4;  // convolutional_box_predictor
  int64_t kernel_size = 1;
  bool use_dropout = false;  // before the class heads only, as TF's ConvolutionalBoxPredictor
  double dropout_keep_probability = 0.8;
  double class_prediction_bias_init = 0.0;
  double bn_momentum = 0.0003, bn_eps = 0.001;  // TF batch_norm decay 0.9997, epsilon 0.001
  double init_stddev = 0.03;                    // truncated_normal_initializer (extras and heads)
  bool use_depthwise = false;                   // the feature extractor's: separable 3x3 convs in the extra layers
  // feature_extractor.use_explicit_padding: every strided convolution padded (k - 1) / 2 on each
  // side (ops.fixed_padding, then 'VALID') instead of TF's 'SAME'.
  bool use_explicit_padding = false;
  // freeze_batchnorm: every batch norm runs as in inference while training (the moving
  // statistics normalise and are not updated; gamma and beta still train), as the OD API's
  // is_training=False batch norms.
  bool freeze_batchnorm = false;
  // feature_extractor.pad_to_multiple: the input padded with zeros at the bottom/right to a
  // multiple of this before the base network (ops.pad_to_multiple).
  int64_t pad_to_multiple = 1;
  // convolutional_box_predictor.use_depthwise (SSDLite): each head a depthwise
  // kernel_size x kernel_size conv + BN + ReLU6, then a 1x1 conv.
  bool depthwise_heads = false;
  double head_bn_momentum = 0.0003, head_bn_eps = 0.001;  // the box predictor's conv_hyperparams
};

// True for the parameters of the box predictor ("box_heads.*", "class_heads.*", SSDLite's
// "box_depthwise.*", "class_depthwise.*", the weight-shared "predictor.*"), the ones a
// "detection" fine-tune checkpoint does not restore.
bool is_prediction_head_parameter(const std::string& name);

class SsdModelImpl : public torch::nn::Module {
 public:
  explicit SsdModelImpl(const SsdModelOptions& options);
  // images [B, 3, H, W] float32 (channels_last welcome), already scaled to [-1, 1] as TF's
  // MobileNet preprocessing does (2/255 * x - 1). Returns [B, A, box_code_size + num_classes + 1]
  // float32: per anchor the box encodings (ty, tx, th, tw) then the class logits (column
  // box_code_size is background). Anchors are ordered feature map by feature map, then cell
  // (row-major: y, then x), then the anchors of the cell: the anchor generator's order.
  torch::Tensor forward(const torch::Tensor& images);
  // As Module::train, leaving the batch norms in inference mode under freeze_batchnorm.
  void train(bool on = true) override;
  // The feature maps the heads see, [B, C_i, H_i, W_i].
  std::vector<torch::Tensor> feature_maps(const torch::Tensor& images);
  // Feature map sizes (height, width) for an input size, e.g. 300x300 -> {19,19}, {10,10},
  // {5,5}, {3,3}, {2,2}, {1,1}.
  std::vector<std::pair<int64_t, int64_t>> feature_map_sizes(int64_t height, int64_t width) const;
  // Channels of each feature map (576, 1280, 512, 256, 256, 128 at depth_multiplier 1).
  const std::vector<int64_t>& feature_map_channels() const { return channels_; }
  const SsdModelOptions& options() const { return options_; }
  // ssd_mobilenet_v2: the backbone endpoints taken as the first feature maps
  // (layer_15/expansion_output, layer_19); empty for ssd_mobilenet_v1.
  const std::vector<MobileNetV2Endpoint>& base_endpoints() const { return base_endpoints_; }
  // ssd_mobilenet_v1: the backbone layers taken as the first feature maps (11, 13).
  const std::vector<int64_t>& base_layers() const { return base_layers_; }
  // TF-Slim's scope of the backbone: "MobilenetV2" or "MobilenetV1".
  std::string backbone_scope() const;

  // The TF OD API's name of a variable (ssd_mobilenet_v2_coco's model.ckpt): backbone.* under
  // `backbone_scope` ("FeatureExtractor/MobilenetV2"; "MobilenetV2" for a TF-Slim
  // classification checkpoint), extras.<j> "layer_19_1_Conv2d_<j+2>_1x1_<depth/2>" and
  // "layer_19_2_Conv2d_<j+2>_3x3_s2_<depth>" (+ "_depthwise"), box_heads.<i> / class_heads.<i>
  // "BoxPredictor_<i>/BoxEncodingPredictor" / "ClassPredictor", box_depthwise.<i> /
  // class_depthwise.<i> the same + "_depthwise" (depthwise_weights, BatchNorm).
  // `backbone_scope` empty: "FeatureExtractor/" + backbone_scope().
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& backbone_scope = "") const;

 private:
  void init_extra_layers_(double stddev);

  SsdModelOptions options_;
  std::vector<MobileNetV2Endpoint> base_endpoints_;
  std::vector<int64_t> base_layers_;
  std::vector<int64_t> channels_;
  MobileNetV2 backbone_{nullptr};
  models::MobileNetV1 backbone_v1_{nullptr};
  models::MobileNetV3 backbone_v3_{nullptr};
  models::InceptionV3 backbone_inception_{nullptr};
  models::MobileDet backbone_mobiledet_{nullptr};
  models::InceptionV2 backbone_inception_v2_{nullptr};
  MnasFpn mnasfpn_{nullptr};
  std::vector<models::MobileNetV3Endpoint> base_endpoints_v3_;
  models::ResNet backbone_resnet_{nullptr};
  std::vector<int> resnet_stages_;  // the stages (1..4) taken as the FPN's base maps
  torch::nn::ModuleList extras_{nullptr};
  torch::nn::ModuleList box_heads_{nullptr};
  torch::nn::ModuleList class_heads_{nullptr};
  torch::nn::ModuleList box_depthwise_{nullptr}, class_depthwise_{nullptr};  // SSDLite
  FpnTopDown fpn_{nullptr};
  torch::nn::ModuleList bottom_up_{nullptr};  // FPN levels above 5
  WeightSharedPredictor predictor_{nullptr};
};
TORCH_MODULE(SsdModel);

}  // namespace orchard::detect
