// The OD API's `ssd` meta-architecture (model.ssd) over detect::SsdModel, with any of its feature
// extractors (ssd_model.h: the MobileNets, MobileDets, Inception-v2/v3 and the ResNet FPNs;
// the _fpn, _ppn, _mnasfpn and _keras variants): anchors from ssd_anchor_generator or
// multiscale_anchor_generator, the convolutional or weight-shared box predictor, argmax matching,
// the SSD loss (weighted smooth L1; sigmoid, softmax or sigmoid focal classification; optional
// hard example mining), and batch non-max suppression after the score converter (orchard/detect).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "orchard/detect/losses/ssd_loss.h"
#include "orchard/detect/meta_arch/meta_architecture.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/detect/ops/anchors.h"
#include "orchard/detect/ops/box_ops.h"

namespace orchard::tasks {

struct SsdConfig : MetaArchitectureConfig {
  detect::SsdModelOptions model;
  detect::SsdAnchorOptions anchors;
  // multiscale_anchor_generator (the FPN configs); unset: ssd_anchor_generator (`anchors`).
  std::optional<detect::MultiscaleAnchorOptions> multiscale_anchors;
  detect::SsdLossOptions loss;
  detect::BatchNmsOptions nms;
  std::string score_converter = "SIGMOID";  // IDENTITY_WITH_LOGITS | SIGMOID | SOFTMAX
  // graph_rewriter { quantization { ... } }: quantization-aware training.
  std::optional<layers::QuantizationOptions> quantization;

  std::unique_ptr<MetaArchitecture> build(int64_t num_classes, const data::DetectionInputOptions& input) const override;
};

// SSD's forward outputs, per anchor A of the input (SsdMetaArchitecture::anchors), in the autocast
// dtype.
struct SsdOutputs : Outputs {
  at::Tensor box_encodings;  // [B, A, box_code_size], the box coder's encoding against the anchor
  at::Tensor class_logits;   // [B, A, num_classes + 1], column 0 the background
};

class SsdMetaArchitecture : public MetaArchitecture {
 public:
  SsdMetaArchitecture(const SsdConfig& config, int64_t num_classes, const data::DetectionInputOptions& input);
  std::string name() const override;  // the feature extractor: ssd_mobilenet_v2, ssd_mobilenet_v1_fpn, ...
  std::shared_ptr<torch::nn::Module> module() override;
  // -> SsdOutputs.
  std::unique_ptr<Outputs> forward(const at::Tensor& images, const InputShape& input,
                                   const data::Batch* targets) override;
  std::map<std::string, at::Tensor> loss(const Outputs& outputs, const InputShape& input,
                                         const std::vector<at::Tensor>& gt_boxes,
                                         const std::vector<at::Tensor>& gt_classes) override;
  std::vector<detect::Detections> postprocess(const Outputs& outputs, const InputShape& input) const override;
  bool is_prediction_head_parameter(const std::string& name) const override;
  bool restored_by_classification(const std::string& name) const override;
  std::string classification_source_name(const std::string& name) const override;
  models::TfNameMap tf_name_map(const std::string& checkpoint_type) const override;
  std::map<std::string, std::string> signature() const override;
  std::string describe() const override;
  void export_graph(const std::string& format, const std::string& path, const GraphExportOptions& options) override;

  const SsdConfig& config() const { return config_; }
  detect::SsdModel& model() { return model_; }
  const at::Tensor& anchors() const { return anchors_; }  // [A, 4] for the configured input size
  // [A, 4] for a height x width input (generated once per size, as the OD API generates them from
  // the feature maps of each input: normalised, base size from min(height, width)).
  at::Tensor anchors(int64_t height, int64_t width) const;

 private:
  at::Tensor generate_anchors(int64_t height, int64_t width) const;
  SsdConfig config_;
  data::DetectionInputOptions input_;
  detect::SsdModel model_{nullptr};
  at::Tensor anchors_;
  mutable std::mutex anchors_mutex_;
  mutable std::map<std::pair<int64_t, int64_t>, at::Tensor> anchors_by_size_;
};

// The registry entry: pipeline.config's model.ssd.
MetaArchitectureEntry ssd_meta_architecture();

}  // namespace orchard::tasks
