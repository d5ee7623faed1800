// The OD API's `faster_rcnn` meta-architecture (FasterRCNNMetaArch, model.faster_rcnn) with the
// feature extractors registered in detect/feature_extractors/ (TF-Slim's ResNet-v1 50/101/152,
// Inception-v2, Inception-ResNet-v2) in detect/faster_rcnn_model.h's networks: grid anchors, the RPN's targets, loss and proposals (detect/rpn.h), the
// second stage on the proposals' crops (the MaskRCNNBoxPredictor, or R-FCN's rfcn_box_predictor on
// position-sensitive crops) with its minibatch, optional hard example miner, loss and detections
// (detect/box_classifier.h), and Mask R-CNN's mask head and third stage (predict_instance_masks).
// docs/od_api_two_stage.md has the OD API's facts.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "orchard/detect/anchors.h"
#include "orchard/detect/box_classifier.h"
#include "orchard/detect/box_ops.h"
#include "orchard/detect/faster_rcnn_model.h"
#include "orchard/detect/rpn.h"
#include "orchard/tasks/detect/meta_architecture.h"

namespace orchard::tasks {

struct FasterRcnnConfig : MetaArchitectureConfig {
  detect::FasterRcnnModelOptions model;
  detect::GridAnchorOptions anchors;
  detect::RpnOptions rpn;
  detect::BoxClassifierOptions second_stage;
  detect::BatchNmsOptions nms;  // second_stage_post_processing
  std::string score_converter = "SOFTMAX";
  float mask_loss_weight = 1.0f;  // second_stage_mask_prediction_loss_weight (model.predict_instance_masks)
  // train_config.merge_multiple_label_boxes: training's box classifier loss sees boxes of the same
  // coordinates as one with all their labels (k-hot targets; AVA's multi-label actions).
  bool merge_multiple_label_boxes = false;

  std::unique_ptr<MetaArchitecture> build(int64_t num_classes, const data::DetectionInputOptions& input) const override;
};

class FasterRcnnMetaArchitecture : public MetaArchitecture {
 public:
  FasterRcnnMetaArchitecture(const FasterRcnnConfig& config, int64_t num_classes,
                             const data::DetectionInputOptions& input);
  std::string name() const override;  // the feature extractor: faster_rcnn_resnet50, ...
  std::shared_ptr<torch::nn::Module> module() override;
  // -> [B, F], per image: a layout flag (0: inference, 1: training's proposals, 2: see below),
  // the RPN's box encodings [A, 4] and objectness logits [A, 2] for all A anchors of the input,
  // then P proposal slots (in training second_stage_batch_size sampled ones, or with a
  // hard_example_miner all first_stage_max_proposals; at inference first_stage_max_proposals;
  // unused slots zero): their boxes [P, 4] in input pixels, a validity flag [P], refined box
  // encodings [P, K, 4] and class logits [P, K + 1] (R-FCN's from its position-sensitive crops).
  // Mask R-CNN (predict_instance_masks) adds, in training, per proposal the mask logits of its
  // target class [mh * mw], the mask target [mh * mw] and a weight (1: positive); at inference
  // the third stage's final detections (the box classifier's NMS, then masks from crops at the
  // detected boxes; run whenever predict_instance_masks, number_of_stages 2 or 3 alike),
  // D = max_total_detections slots of [box (4, normalised to the input), score, class, valid,
  // mask probabilities (mh * mw)]. The flag is 2 for evaluation's outputs with the batch's masks
  // (forward_eval), whose detections then carry, for the mask loss, the logits of their matched
  // ground-truth class [mh * mw], the matched mask cropped at them [mh * mw] and a weight (1:
  // matched at IoU 0.5).
  at::Tensor forward(const at::Tensor& images, const InputShape& input, const data::Batch* targets) override;
  at::Tensor forward_eval(const at::Tensor& images, const InputShape& input, const data::Batch& batch) override;
  std::map<std::string, at::Tensor> loss(const at::Tensor& outputs, const InputShape& input,
                                         const std::vector<at::Tensor>& gt_boxes,
                                         const std::vector<at::Tensor>& gt_classes) override;
  bool predicts_masks() const override { return config_.model.predict_instance_masks; }
  std::vector<detect::Detections> postprocess(const at::Tensor& outputs, const InputShape& input) const override;
  bool is_prediction_head_parameter(const std::string& name) const override;
  models::TfNameMap tf_name_map(const std::string& checkpoint_type) const override;
  std::map<std::string, std::string> signature() const override;
  std::string describe() const override;
  void export_onnx(const std::string& path, bool include_preprocessing) override;

  detect::FasterRcnnModel& model() { return model_; }
  // The grid anchors [A, 4] (input pixels) of a height x width input, generated once per size.
  at::Tensor anchors(int64_t height, int64_t width) const;

 private:
  struct Unpacked;
  struct ImageTruth;
  static ImageTruth image_truth(const data::Batch& batch, int64_t i, int64_t height, int64_t width, bool masks);
  // forward: `targets` in training; `eval_truth` in evaluation with the batch's masks.
  at::Tensor run(const at::Tensor& images, const InputShape& input, const data::Batch* targets,
                 const data::Batch* eval_truth);
  // image_sizes: each image's inside the height x width input.
  at::Tensor third_stage(const at::Tensor& features, const std::vector<detect::Proposals>& proposals,
                         const at::Tensor& refined, const at::Tensor& logits, int64_t height, int64_t width,
                         const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                         const std::vector<ImageTruth>* truth);
  Unpacked unpack(const at::Tensor& outputs, int64_t height, int64_t width) const;
  // Second-stage boxes per image in the outputs: training's sampled minibatch, or every
  // proposal (inference, and training with a hard example miner).
  int64_t proposal_slots(bool training) const {
    return training && !config_.second_stage.miner.enabled ? config_.second_stage.batch_size
                                                           : config_.rpn.max_proposals;
  }

  FasterRcnnConfig config_;
  data::DetectionInputOptions input_;
  detect::FasterRcnnModel model_{nullptr};
  mutable std::mutex anchors_mutex_;
  mutable std::map<std::pair<int64_t, int64_t>, at::Tensor> anchors_by_size_;
};

// The registry entry: pipeline.config's model.faster_rcnn.
MetaArchitectureEntry faster_rcnn_meta_architecture();

}  // namespace orchard::tasks
