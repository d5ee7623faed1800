// Object detection (the TF Object Detection API's SSD meta-architecture with a MobileNetV2
// feature extractor): model, anchors, target assignment and losses with hard example mining,
// post-processing, and COCO metrics. Configured from a pipeline.config (detection_config).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orchard/data/detection.h"
#include "orchard/detect/anchors.h"
#include "orchard/detect/box_ops.h"
#include "orchard/detect/ssd_loss.h"
#include "orchard/detect/ssd_model.h"
#include "orchard/tasks/task.h"

namespace object_detection::protos {
class TrainEvalPipelineConfig;
}

namespace orchard::tasks {

struct DetectionConfig {
  int64_t num_classes = 90;  // without the background
  detect::SsdModelOptions model;
  detect::SsdAnchorOptions anchors;
  detect::SsdLossOptions loss;
  detect::BatchNmsOptions nms;
  std::string score_converter = "SIGMOID";  // IDENTITY_WITH_LOGITS | SIGMOID | SOFTMAX
  data::DetectionInputOptions input;        // training augmentation included
  double l2_weight = 4e-5;                  // conv_hyperparams l2_regularizer weight
  std::vector<std::string> class_names;     // index = label-map id - 1
  bool per_category_metrics = false;        // eval_config.include_metrics_per_category
  int num_visualizations = 10;              // eval_config: eval images drawn into TensorBoard
  float visualization_min_score = 0.5f;     // eval_config.min_score_threshold
};

// The typed configuration of a pipeline.config (already validated by
// detect::validate_pipeline_config).
DetectionConfig detection_config(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                                 bool channels_last);

// Detections of one image: boxes [K, 4] normalised (ymin, xmin, ymax, xmax), scores [K],
// classes [K] int64 label-map ids (1-based), by descending score.
using ImageDetections = detect::Detections;

class DetectionTask : public Task {
 public:
  explicit DetectionTask(const DetectionConfig& config);
  std::string name() const override { return "detect"; }
  std::shared_ptr<torch::nn::Module> module() override { return model_.ptr(); }
  // images [B, 3, H, W] in [-1, 1] -> [B, A, 4 + num_classes + 1]: box codes, then class
  // logits (column 0 = background).
  torch::Tensor forward(const torch::Tensor& images) override;
  data::SampleSpec sample_spec() const override;
  data::ParseFn parser(bool training) const override;
  // localization_loss + classification_loss (normalised by the matches, weighted), as this
  // replica's share of the global batch, plus the L2 regularization.
  LossTerms loss(const torch::Tensor& outputs, const data::Batch& batch, int64_t global_batch_size) override;
  void update_metrics(const torch::Tensor& outputs, const data::Batch& batch, const LossTerms& loss, bool training,
                      MetricSums* sums) const override;
  // Training: the OD API's Loss/* scalars. Eval: the 12 COCO numbers (DetectionBoxes_*),
  // per-category AP when configured, and the eval losses.
  std::map<std::string, double> compute_metrics(const MetricSums& sums, bool training) const override;
  std::map<std::string, std::string> signature() const override;
  // "Detections_Left_Groundtruth_Right/<i>": the first num_visualizations eval images with the
  // detections (left) beside the ground truth (right), as the OD API draws them.
  std::vector<SummaryImage> take_summary_images() override;

  // Score conversion + box decoding + batch non-max suppression, on the CPU.
  std::vector<ImageDetections> postprocess(const torch::Tensor& outputs) const;
  const DetectionConfig& config() const { return config_; }
  detect::SsdMobileNetV2& model() { return model_; }
  const at::Tensor& anchors() const { return anchors_; }

 private:
  DetectionConfig config_;
  detect::SsdMobileNetV2 model_{nullptr};
  at::Tensor anchors_;  // [A, 4] for the configured input size
  std::vector<at::Tensor> l2_params_;
  mutable std::vector<SummaryImage> visualizations_;  // filled by update_metrics in eval
};

}  // namespace orchard::tasks
