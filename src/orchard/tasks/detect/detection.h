// Object detection as the TF Object Detection API trains it, over a registered
// meta-architecture (meta_architecture.h; SSD in ssd/, Faster R-CNN / R-FCN / Mask R-CNN in
// faster_rcnn/): input parsing and augmentation, each replica's share of the loss, L2
// regularisation, the eval_config.metrics_set metrics (COCO boxes and masks, PASCAL VOC, Open
// Images) and the evaluation images.
// Configured from a pipeline.config (detection_config).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orchard/data/detection.h"
#include "orchard/detect/builders/detection_config.h"
#include "orchard/detect/meta_arch/meta_architecture.h"
#include "orchard/detect/ops/box_ops.h"
#include "orchard/engine/task.h"

namespace orchard::tasks {

// Detections of one image: boxes [K, 4] normalised (ymin, xmin, ymax, xmax), scores [K],
// classes [K] int64 label-map ids (1-based), by descending score.
using ImageDetections = detect::Detections;

class DetectionTask : public Task {
 public:
  explicit DetectionTask(const DetectionConfig& config);
  std::string name() const override { return "detect"; }
  std::shared_ptr<torch::nn::Module> module() override { return meta_->module(); }
  // The meta-architecture's outputs (MetaArchitecture::forward): in training it sees the batch's
  // targets, in evaluation too (MetaArchitecture::forward_eval).
  std::unique_ptr<Outputs> forward(const data::Batch& batch, Pass pass) override;
  // Inference: images [B, 3, H, W] in [-1, 1] -> the meta-architecture's outputs, each image
  // filling the input ({}); or each `input.image_sizes` top-left in it (keep_aspect_ratio_resizer's
  // padding). postprocess turns them into detections.
  std::unique_ptr<Outputs> forward(const torch::Tensor& images, const InputShape& input = {});
  data::SampleSpec sample_spec() const override;
  data::ParseFn parser(bool training) const override;
  // keep_aspect_ratio_resizer without pad_to_max_dimension: the images cut from their buffers to
  // their size, which all must share (an error otherwise, as in the OD API).
  void prepare_batch(data::Batch* batch) const override;
  // The batch's network input: the images' size and each image's ("image_size").
  InputShape input_shape(const data::Batch& batch) const;
  // The input shape of images `image_sizes` (resized sizes), batched as prepare_batch batches them.
  InputShape input_shape(const std::vector<std::pair<int64_t, int64_t>>& image_sizes) const;
  // The meta-architecture's weighted losses (SSD: localization_loss + classification_loss), as
  // this replica's share of the global batch, plus the L2 regularization.
  Loss loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) override;
  void train_metrics(const Outputs& outputs, const data::Batch& batch, const Loss& loss,
                     MetricSums* sums) const override;
  void begin_evaluation() override { visualizations_.clear(); }
  // Detections (postprocess) and the ground truth as rows (boxes, with masks when
  // coco_mask_metrics, and the verified image labels), the eval losses, and the first
  // num_visualizations images drawn for TensorBoard.
  void eval_step(const Outputs& outputs, const data::Batch& batch, const Loss& loss, MetricSums* sums) override;
  // Training: the OD API's Loss/* scalars. Eval: per eval_config.metrics_set the OD API's
  // numbers (coco_detection_metrics: the 12 DetectionBoxes_*; coco_mask_metrics: DetectionMasks_*;
  // the PASCAL VOC and Open Images sets: their mAP and per-class AP), per-category COCO AP when
  // configured, and the eval losses.
  std::map<std::string, double> compute_metrics(const MetricSums& sums, bool training) const override;
  std::map<std::string, std::string> signature() const override;
  // "Detections_Left_Groundtruth_Right/<i>": the first num_visualizations eval images with the
  // detections (left) beside the ground truth (right), as the OD API draws them.
  std::vector<SummaryImage> take_summary_images() override;

  // Score conversion + box decoding + batch non-max suppression, on the CPU; boxes normalised to
  // each image (`input`: see InputShape; {} the configured size).
  std::vector<ImageDetections> postprocess(const Outputs& outputs, const InputShape& input = {}) const;
  // keep_aspect_ratio_resizer without pad_to_max_dimension: the input size follows the images;
  // evaluation and predict run one image at a time, each at its own size, as the OD API does.
  bool variable_input_size() const;
  const DetectionConfig& config() const { return config_; }
  MetaArchitecture& meta_architecture() { return *meta_; }
  const MetaArchitecture& meta_architecture() const { return *meta_; }

 private:
  DetectionConfig config_;
  std::unique_ptr<MetaArchitecture> meta_;
  std::vector<at::Tensor> l2_params_;
  std::vector<SummaryImage> visualizations_;  // filled by eval_step
};

}  // namespace orchard::tasks
