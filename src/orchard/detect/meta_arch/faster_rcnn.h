// The OD API's `faster_rcnn` meta-architecture (FasterRCNNMetaArch, model.faster_rcnn) with the
// feature extractors registered in detect/feature_extractors/ (TF-Slim's ResNet-v1 50/101/152,
// Inception-v2, Inception-ResNet-v2) in faster_rcnn_model.h's networks: grid anchors, the RPN's
// targets, loss and proposals (heads/rpn.h), the second stage on the proposals' crops (the
// MaskRCNNBoxPredictor, or R-FCN's rfcn_box_predictor on position-sensitive crops) with its
// minibatch, optional hard example miner, loss and detections (heads/box_classifier.h), and Mask R-CNN's mask head and
// third stage (predict_instance_masks). docs/od_api_two_stage.md has the OD API's facts.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "orchard/detect/heads/box_classifier.h"
#include "orchard/detect/heads/rpn.h"
#include "orchard/detect/meta_arch/faster_rcnn_model.h"
#include "orchard/detect/meta_arch/meta_architecture.h"
#include "orchard/detect/ops/anchors.h"
#include "orchard/detect/ops/box_ops.h"

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

// Faster R-CNN's (R-FCN's, Mask R-CNN's) forward outputs, float32: B images, A anchors of the
// input, P proposal slots per image (in training second_stage_batch_size sampled ones, or with a
// hard_example_miner all first_stage_max_proposals; at inference first_stage_max_proposals), K
// classes, D = max_total_detections, masks mh x mw. Unused slots are zero, with valid 0.
struct FasterRcnnOutputs : Outputs {
  bool training = false;  // the proposals are training's sampled minibatch (the RPN loss prunes anchors so too)
  // The RPN, for every anchor of the input.
  at::Tensor rpn_box_encodings;  // [B, A, 4]
  at::Tensor rpn_objectness;     // [B, A, 2] logits (background, object)
  // The second stage, per proposal slot.
  at::Tensor proposal_boxes;         // [B, P, 4] input pixels (ymin, xmin, ymax, xmax)
  at::Tensor proposal_valid;         // [B, P] 1 where the slot holds a proposal
  at::Tensor refined_box_encodings;  // [B, P, K, 4]
  at::Tensor class_logits;           // [B, P, K + 1], column 0 the background (R-FCN: of position-sensitive crops)
  // Mask R-CNN (predict_instance_masks) at inference and in evaluation: the third stage's final
  // detections (the box classifier's NMS, then masks from crops at the detected boxes; run
  // whenever predict_instance_masks, number_of_stages 2 or 3 alike). Undefined otherwise.
  at::Tensor detection_boxes;    // [B, D, 4] normalised to the input
  at::Tensor detection_scores;   // [B, D]
  at::Tensor detection_classes;  // [B, D] int64, 1-based
  at::Tensor detection_valid;    // [B, D] 1 where the slot holds a detection
  at::Tensor detection_masks;    // [B, D, mh, mw] probabilities
  // Mask R-CNN's mask loss, per slot S: in training of the sampled proposals (S = P; the logits of
  // each one's target class, its mask target, weight 1 for a positive); in evaluation with the
  // batch's masks (forward_eval) of the detections (S = D; the logits of the matched ground-truth
  // class, the matched mask cropped at the detection, weight 1 where matched at IoU 0.5).
  // Undefined otherwise.
  at::Tensor mask_logits;   // [B, S, mh * mw]
  at::Tensor mask_targets;  // [B, S, mh * mw]
  at::Tensor mask_weights;  // [B, S]
};

class FasterRcnnMetaArchitecture : public MetaArchitecture {
 public:
  FasterRcnnMetaArchitecture(const FasterRcnnConfig& config, int64_t num_classes,
                             const data::DetectionInputOptions& input);
  std::string name() const override;  // the feature extractor: faster_rcnn_resnet50, ...
  std::shared_ptr<torch::nn::Module> module() override;
  // -> FasterRcnnOutputs.
  std::unique_ptr<Outputs> forward(const at::Tensor& images, const InputShape& input,
                                   const data::Batch* targets) override;
  // With the batch's masks (Mask R-CNN), the outputs carry the detections' mask losses.
  std::unique_ptr<Outputs> forward_eval(const at::Tensor& images, const InputShape& input,
                                        const data::Batch& batch) override;
  std::map<std::string, at::Tensor> loss(const Outputs& outputs, const InputShape& input,
                                         const std::vector<at::Tensor>& gt_boxes,
                                         const std::vector<at::Tensor>& gt_classes) override;
  bool predicts_masks() const override { return config_.model.predict_instance_masks; }
  std::vector<detect::Detections> postprocess(const Outputs& outputs, const InputShape& input) const override;
  bool is_prediction_head_parameter(const std::string& name) const override;
  bool restored_by_classification(const std::string& name) const override;
  models::TfNameMap tf_name_map(const std::string& checkpoint_type) const override;
  std::map<std::string, std::string> signature() const override;
  std::string describe() const override;
  void export_graph(const std::string& format, const std::string& path, const GraphExportOptions& options) override;

  detect::FasterRcnnModel& model() { return model_; }
  // The grid anchors [A, 4] (input pixels) of a height x width input, generated once per size.
  at::Tensor anchors(int64_t height, int64_t width) const;

 private:
  struct ImageTruth;
  static ImageTruth image_truth(const data::Batch& batch, int64_t i, int64_t height, int64_t width, bool masks);
  // forward: `targets` in training; `eval_truth` in evaluation with the batch's masks.
  std::unique_ptr<FasterRcnnOutputs> run(const at::Tensor& images, const InputShape& input, const data::Batch* targets,
                                         const data::Batch* eval_truth);
  // The detection_* fields of `out` (and with `truth` its mask_* fields). image_sizes: each
  // image's inside the height x width input.
  void third_stage(const at::Tensor& features, const std::vector<detect::Proposals>& proposals,
                   const at::Tensor& refined, const at::Tensor& logits, int64_t height, int64_t width,
                   const std::vector<std::pair<int64_t, int64_t>>& image_sizes, const std::vector<ImageTruth>* truth,
                   FasterRcnnOutputs* out);
  // Second-stage boxes (proposal slots) per image in the outputs: training's sampled minibatch, or every
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
