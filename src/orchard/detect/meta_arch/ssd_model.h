// The SSD network of the TF Object Detection API's `ssd` meta-architecture: a base network, the
// feature maps built on it, and the box predictor. The base network is the feature extractor
// registered under feature_extractor.type (with the parser's _fpn / _ppn / _mnasfpn / _keras
// suffixes already split off: SsdModelOptions) in detect/feature_extractors/ (one file per base
// network family: MobileNetV1, V2, V3/EdgeTPU, the MobileDets, Inception-v2, -v3, ResNet-v1 FPN);
// its SsdLayout (TF's feature_map_layout, the FPN blocks, the PPN and MnasFPN maps) drives the
// feature map generator here, which is the same for every base network.
//
// Feature maps, one of four kinds:
//   multi_resolution_feature_maps (the default): the layout's base maps, then extra layers, each
//     a 1x1 conv to depth/2 and a k x k (3 unless the layout says) stride-2 conv to depth, conv +
//     BN + ReLU6; with use_depthwise the strided conv is depthwise, then a 1x1 conv. E.g. at 300x300,
//     depth_multiplier 1:
//       ssd_mobilenet_v2  0 layer_15/expansion_output [B, 576, 19, 19], 1 layer_19 [B, 1280, 10, 10]
//       ssd_mobilenet_v1  0 Conv2d_11_pointwise [B, 512, 19, 19], 1 Conv2d_13_pointwise [B, 1024, 10, 10]
//       then 2..5 extra layers of depth 512, 256, 256, 128 -> [B, 512, 5, 5] ... [B, 128, 1, 1].
//     ssd_inception_v3 has three base maps (Mixed_5d, Mixed_6e, Mixed_7c); embedded_ssd_mobilenet_v1
//     five maps, the last extra layer's strided conv 2x2.
//   FPN (SsdFpnOptions, the *_fpn types, where the layout has fpn_blocks): the top-down pathway
//     (detect/fpn.h) over the base maps of levels min_level..5, bottom-up stride-2 layers above
//     level 5.
//   PPN (ssd_mobilenet_v1_ppn, where the layout has a ppn_map): Conv2d_11_pointwise, each next map
//     a 2x2 stride-2 max pool of the one before.
//   MnasFPN (ssd_mobilenet_v2_mnasfpn, where the layout has mnasfpn_maps): detect/mnasfpn.h over
//     MobileNetV2's layer_7, 14, 18.
// Box predictor: convolutional_box_predictor, a box head and a class head per feature map (one
// kernel_size x kernel_size conv with bias, 'SAME', no BN and no activation; SSDLite's
// (convolutional_box_predictor.use_depthwise) a kernel_size x kernel_size depthwise conv + BN +
// ReLU6, then a 1x1 conv with bias); or weight_shared_convolutional_box_predictor
// (detect/weight_shared_predictor.h), one set of towers and heads for every map.
// Strided convolutions are padded as TF's 'SAME', or with use_explicit_padding as the OD API's
// fixed_padding then 'VALID': MobileNetV1/V2/V3/EdgeTPU's and the extra and FPN bottom-up layers'
// (the Inception and ResNet bases keep their own padding; the MobileDets and MnasFPN refuse it).
//
// Parameter (and buffer) names:
//   backbone.*                 the feature extractor's module() with the base network's own module
//                              names: for MobileNetV2 torchvision's features.* without the
//                              classifier, so a torchvision state dict's or a classification
//                              checkpoint's features.* load under the prefix "backbone."; the other
//                              bases models::MobileNetV1's, MobileNetV3's, MobileDet's,
//                              InceptionV2's, InceptionV3's, ResNet's.
//   TensorFlow names           tf_name(): the OD API's (FeatureExtractor/<backbone_scope()>/...,
//                              BoxPredictor_N/..., WeightSharedConvolutionalBoxPredictor/...), for
//                              its checkpoints in and out.
//   extras.K.*                 the extra layer making feature map K + (number of base maps):
//                              extras.K.0.{0,1} the 1x1 conv and its BN, extras.K.1.{0,1} the
//                              strided conv and its BN (use_depthwise: extras.K.1 depthwise
//                              stride 2, extras.K.2 pointwise 1x1).
//   box_heads.N.{weight,bias}  the box prediction head of feature map N.
//   class_heads.N.{weight,bias} the class prediction head of feature map N.
//   box_depthwise.N.{0,1}.*, class_depthwise.N.{0,1}.*  SSDLite's depthwise conv and its BN
//                              before box_heads.N / class_heads.N (then 1x1).
//   fpn.*, bottom_up.<j>.*     the FPN (SsdFpnOptions); mnasfpn.* MnasFPN; predictor.* the
//                              weight-shared box predictor (detect/weight_shared_predictor.h)
//                              instead of the heads.
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

#include "orchard/detect/feature_extractors/fpn.h"
#include "orchard/detect/feature_extractors/mnasfpn.h"
#include "orchard/detect/feature_extractors/ssd_feature_extractor.h"
#include "orchard/detect/heads/weight_shared_predictor.h"
#include "orchard/layers/batch_norm.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/tf_same.h"
#include "orchard/models/mobilenet_v2.h"

namespace orchard::detect {

// Building blocks from orchard/layers (the library the models and detectors share;
// one definition each). Every batch norm of the base networks and the SSD layers runs through
// layers::batch_norm, so layers::set_batch_norm_override (synchronized batch norm) covers them too.
using layers::batch_norm;
using layers::conv2d_tf_same;
using layers::ConvNormActivation;
using layers::ConvNormActivationImpl;
using layers::ConvNormActivationOptions;
using layers::make_divisible;
using models::MobileNetV2;
using models::MobileNetV2Endpoint;
using models::MobileNetV2Impl;
using models::MobileNetV2Options;
using models::parse_mobilenet_v2_endpoint;

// The FPN feature extractors (ssd_mobilenet_v1_fpn, ssd_mobilenet_v2_fpn, ssd_resnet50_v1_fpn,
// ssd_resnet101_v1_fpn): feature maps at levels min_level..max_level (stride 2^level), the base
// network's maps of levels up to 5 through the top-down pathway (detect/fpn.h), the levels above
// by 3x3 stride-2 conv + BN + ReLU6 layers on the coarsest (use_depthwise: separable; TF
// fpn/bottom_up_Conv2d_<14|20 + j> for the MobileNets, fpn/bottom_up_block<5 + j> for the
// ResNets), every map depth(additional_layer_depth) channels. MnasFPN uses min_level, max_level
// and additional_layer_depth too.
struct SsdFpnOptions {
  bool enabled = false;
  int min_level = 3, max_level = 7;
  int64_t additional_layer_depth = 256;
};

struct SsdModelOptions {
  // The feature extractor, a name in detect/feature_extractors' registry: "ssd_mobilenet_v2",
  // "ssd_mobilenet_v1", "embedded_ssd_mobilenet_v1", "ssd_mobilenet_v3_large",
  // "ssd_mobilenet_v3_small", "ssd_mobilenet_edgetpu", "ssd_mobiledet_cpu|dsp|edgetpu|gpu",
  // "ssd_inception_v2", "ssd_inception_v3", or with fpn only "ssd_resnet50_v1" /
  // "ssd_resnet101_v1" (TF-Slim's resnet_v1, RetinaNet). pipeline.config's _fpn, _ppn and _mnasfpn
  // are `fpn`, `ppn` and `mnasfpn` below.
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
  // Anchors per cell of each feature map, from the anchor generator; its length is the number
  // of feature maps, as TF's num_layers (1..6; with fpn max_level - min_level + 1; MnasFPN 4).
  std::vector<int64_t> anchors_per_location{3, 6, 6, 6, 6, 6};
  int64_t box_code_size = 4;  // convolutional_box_predictor
  int64_t kernel_size = 1;
  bool use_dropout = false;  // before the class heads only, as TF's ConvolutionalBoxPredictor
  double dropout_keep_probability = 0.8;
  double class_prediction_bias_init = 0.0;
  double bn_momentum = 0.0003, bn_eps = 0.001;  // TF batch_norm decay 0.9997, epsilon 0.001
  double init_stddev = 0.03;                    // truncated_normal_initializer (extras and heads)
  bool use_depthwise = false;                   // the feature extractor's: separable convs in the extra and FPN layers
  // feature_extractor.use_explicit_padding: the strided convolutions of the MobileNet bases and of
  // the extra and FPN bottom-up layers padded (k - 1) / 2 on each side (ops.fixed_padding, then
  // 'VALID') instead of TF's 'SAME' (see the top of this file for the other bases).
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
  // MobileNet preprocessing does (2/255 * x - 1; the ResNet bases turn it back into RGB minus the
  // ImageNet means themselves). Returns [B, A, box_code_size + num_classes + 1]
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
  // Channels of each feature map (ssd_mobilenet_v2 at depth_multiplier 1: 576, 1280, 512, 256, 256,
  // 128).
  const std::vector<int64_t>& feature_map_channels() const { return channels_; }
  const SsdModelOptions& options() const { return options_; }
  // The base network (registered as "backbone") and its layout.
  feature_extractors::SsdFeatureExtractor& feature_extractor() const { return *extractor_; }
  const feature_extractors::SsdLayout& layout() const { return layout_; }
  // The base maps as MobileNetV2 endpoints (ssd_mobilenet_v2 and its FPN and MnasFPN:
  // layer_15/expansion_output, layer_19 without FPN) or MobileNetV1 layers (ssd_mobilenet_v1, its
  // FPN and PPN, embedded_ssd_mobilenet_v1: 11, 13 without FPN); empty for every other base.
  std::vector<MobileNetV2Endpoint> base_endpoints() const;
  std::vector<int64_t> base_layers() const;
  // TF-Slim's scope of the base network (its layout's): "MobilenetV2", "MobilenetV1",
  // "MobilenetV3", "MobilenetEdgeTPU", "MobileDetCPU" ..., "InceptionV2", "InceptionV3",
  // "resnet_v1_50" or "resnet_v1_101".
  const std::string& backbone_scope() const { return layout_.scope; }

  // The TF OD API's name of a variable (as in the zoo's model.ckpt): backbone.* under
  // `backbone_scope` ("FeatureExtractor/MobilenetV2"; "MobilenetV2" for a TF-Slim
  // classification checkpoint), extras.<j> "<last base layer>_1_Conv2d_<m>_1x1_<depth/2>" and
  // "<last base layer>_2_Conv2d_<m>_<k>x<k>_s2_<depth>" (+ "_depthwise"; m = j + the number of
  // base maps: ssd_mobilenet_v2's layer_19_1_Conv2d_2_1x1_256), box_heads.<i> / class_heads.<i>
  // "BoxPredictor_<i>/BoxEncodingPredictor" / "ClassPredictor", box_depthwise.<i> /
  // class_depthwise.<i> the same + "_depthwise" (depthwise_weights, BatchNorm), fpn.* and
  // bottom_up.<j> under "FeatureExtractor/<scope>/fpn", mnasfpn.* under "FeatureExtractor/MnasFPN",
  // predictor.* "WeightSharedConvolutionalBoxPredictor/...".
  // `backbone_scope` empty: "FeatureExtractor/" + backbone_scope().
  std::optional<models::TfName> tf_name(const std::string& name, const std::string& backbone_scope = "") const;

  // Quantization-aware training (graph_rewriter.quantization; layers/fake_quant.h): every
  // convolution's weights and output and every residual sum quantized, the heads' too
  // ("box_heads_quant.<i>", "class_heads_quant.<i>"). std::invalid_argument for the models
  // quantization_unsupported names.
  void enable_quantization(const layers::QuantizationOptions& options);
  // What of this model quantization-aware training is not written for yet (MnasFPN, bases other
  // than MobileNet V1 / V2 / EdgeTPU); empty where it is. The FPN (fpn.h) and the weight-shared
  // predictor (weight_shared_predictor.h) place their own quantizers.
  std::string quantization_unsupported() const;
  // The quantizers' state: null without quantization. The task sets `active` each step.
  const std::shared_ptr<layers::QuantizationControl>& quantization() const { return quantization_; }

 private:
  void init_extra_layers_(double stddev);

  SsdModelOptions options_;
  feature_extractors::SsdLayout layout_;
  std::shared_ptr<feature_extractors::SsdFeatureExtractor> extractor_;
  std::vector<int64_t> channels_;
  std::shared_ptr<torch::nn::Module> backbone_;  // extractor_->module()
  MnasFpn mnasfpn_{nullptr};
  torch::nn::ModuleList extras_{nullptr};
  torch::nn::ModuleList box_heads_{nullptr};
  torch::nn::ModuleList class_heads_{nullptr};
  torch::nn::ModuleList box_depthwise_{nullptr}, class_depthwise_{nullptr};  // SSDLite
  FpnTopDown fpn_{nullptr};
  torch::nn::ModuleList bottom_up_{nullptr};  // FPN levels above 5
  WeightSharedPredictor predictor_{nullptr};
  std::shared_ptr<layers::QuantizationControl> quantization_;
  torch::nn::ModuleList box_heads_quant_{nullptr}, class_heads_quant_{nullptr};
  torch::Tensor quantization_step_;  // training forward passes since quantization was enabled
};
TORCH_MODULE(SsdModel);

}  // namespace orchard::detect
