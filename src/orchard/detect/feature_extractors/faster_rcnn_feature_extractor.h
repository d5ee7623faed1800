// The feature extractor of Faster R-CNN, R-FCN and Mask R-CNN (the OD API's
// FasterRCNNFeatureExtractor): a first stage on the image (rpn_features_to_crop, the RPN's input)
// and a second stage on the proposals' crops (the box classifier features; R-FCN: on the whole
// first-stage map). One implementation per base network family, one file each, looked up by
// feature_extractor.type in the registry (registry.h); FasterRcnnModel (detect/faster_rcnn_model.h)
// registers the two stages as first_stage_extractor.* and second_stage_extractor.*.
//
// Adding one: a file here with a class implementing FasterRcnnFeatureExtractor and a
// `register_<family>(FeatureExtractorRegistry&)` function, plus its declaration and call in
// builtin.cc.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "orchard/detect/feature_extractors/ssd_feature_extractor.h"  // FeatureMap
#include "orchard/models/tf_names.h"

namespace orchard::detect::feature_extractors {

struct FasterRcnnFeatureExtractorOptions {
  std::string type;              // the registered name, e.g. "faster_rcnn_resnet101"
  int64_t features_stride = 16;  // first_stage_features_stride: 16 or 8 (where the base implements it)
  bool initialize = true;        // false: skip initialisations a restored checkpoint overwrites
};

class FasterRcnnFeatureExtractor {
 public:
  virtual ~FasterRcnnFeatureExtractor() = default;

  // TF-Slim's scope of the base network: "resnet_v1_101", "InceptionV2", "InceptionResnetV2".
  virtual std::string scope() const = 0;
  // The two stages' modules with the base network's own names. The model builds and registers
  // the first stage, then the second, before the RPN's layers or, where
  // second_stage_after_rpn() (the ResNets' block4, as Orchard always built it), after them: the
  // order decides the random draws and the checkpoint's variable order.
  virtual std::shared_ptr<torch::nn::Module> build_first_stage() = 0;
  virtual std::shared_ptr<torch::nn::Module> build_second_stage() = 0;
  virtual bool second_stage_after_rpn() const { return false; }
  // Channels of the first-stage map (ResNet 1024, Inception-v2 576, Inception-ResNet-v2 1088)
  // and of the box classifier features (2048, 1024, 1536); known before building.
  virtual int64_t first_stage_channels() const = 0;
  virtual int64_t second_stage_channels() const = 0;
  // images [B, 3, H, W] in [-1, 1] -> the first-stage map (its stride: the features stride).
  virtual FeatureMap first_stage_features(const torch::Tensor& images) = 0;
  // [M, C, h, w] crops (or R-FCN's whole map) -> the box classifier features [M, C', h', w'].
  virtual torch::Tensor second_stage_features(const torch::Tensor& crops) = 0;
  // The first-stage map's stride and (height, width) for an input size: ceil(side / stride).
  virtual int64_t features_stride() const = 0;
  std::pair<int64_t, int64_t> feature_map_size(int64_t height, int64_t width) const {
    const int64_t s = features_stride();
    return {(height + s - 1) / s, (width + s - 1) / s};
  }
  // R-FCN (rfcn_box_predictor) runs the second stage on the whole map: the ResNets only.
  virtual bool implements_rfcn() const { return false; }
  // The TF name under scope() of a parameter or buffer of the first or second stage (`name`
  // without the stage's prefix): the detection checkpoint's (the model prefixes
  // FirstStageFeatureExtractor/ or SecondStageFeatureExtractor/), or with `classification` TF-Slim's
  // ImageNet checkpoint's. nullopt for variables TensorFlow does not have.
  virtual std::optional<models::TfName> tf_name(const std::string& name, bool first_stage,
                                                bool classification) const = 0;
  // Whether a fine_tune_checkpoint_type "classification" restores this parameter: the ones with a
  // classification name.
  bool restored_by_classification(const std::string& name, bool first_stage) const {
    return tf_name(name, first_stage, /*classification=*/true).has_value();
  }
};

}  // namespace orchard::detect::feature_extractors
