// Multi-label image tagging (the Tencent ML-Images seed, train.py): sigmoid outputs over
// class_num classes, the ML-Images class-balanced weighted sigmoid cross entropy, L2 on
// every trainable variable; metrics: the seed's argmax accuracy, mean average precision
// over classes and micro precision / recall / F1 at a threshold.
#pragma once

#include "orchard/data/pipeline.h"
#include "orchard/data/preprocess.h"
#include "orchard/engine/task.h"
#include "orchard/models/registry.h"
#include "orchard/tasks/image_model.h"

namespace orchard::tasks {

struct MultiLabelConfig {
  models::ModelConfig model;  // num_classes is class_num
  int image_size = 224;
  bool channels_last = false;
  double weight_decay = 1e-4;  // x sum of tf.nn.l2_loss (sum(v^2) / 2) over all trainable variables
  double pos_weight = 1;       // tf.nn.weighted_cross_entropy_with_logits pos_weight (train.py: 12)
  double mask_thres = 0.7;     // a label >= this makes its class positive in the batch
  double neg_select = 0.3;     // probability that a negative-only class is learned in a batch
  bool balance = true;         // false: every known label weighs 1 (plain masked sigmoid CE)
  double threshold = 0.5;      // probability threshold for precision / recall / F1 and predict
  data::DistortedBoxOptions crop = [] {
    data::DistortedBoxOptions c;  // train.py: object_cover 0.7, area_cover 0.7
    c.min_object_covered = 0.7f;
    c.min_area = 0.7f;
    return c;
  }();
  int64_t max_image_pixels = data::kDefaultMaxImagePixels;
};

// The per-class loss coefficients of ML-Images' train.py. The counters are per class and
// persist across batches: pos_count counts the consecutive batches in which the class had a
// positive label (reset by a batch without one), neg_count the consecutive batches in which
// it was a selected negative-only class (reset by a positive). After updating them:
//   pos_coef = max(-log10((0.01 + pos_count) / 10), 0.01) for classes positive in the batch
//   neg_coef = -log10((8 + neg_count) / 10), or 0.001 when that is <= 0.01, for selected
//              negative-only classes
// and 0 for unselected negative-only classes. Updates the counters in place; returns [C].
torch::Tensor ml_images_coefficients(const torch::Tensor& labels, const torch::Tensor& selected, double mask_thres,
                                     torch::Tensor& pos_count, torch::Tensor& neg_count);

// sum_c(mean_b(weighted_ce * mask)[c] * coef[c]) with mask = (label is 0 or 1) and
// weighted_ce = tf.nn.weighted_cross_entropy_with_logits(labels, logits, pos_weight).
// `batch_scale` turns the replica mean into a share of the global batch (local / global).
torch::Tensor weighted_sigmoid_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                             const torch::Tensor& coef, double pos_weight, double batch_scale = 1.0);

// Average precision of each class from score histograms (pos_hist, neg_hist: [C, bins], bin
// b holding the labels whose score fell in it; higher bins score higher), with ties inside a
// bin grouped as average_precision_score groups equal scores. Classes without positives give
// NaN.
torch::Tensor average_precision_from_histograms(const torch::Tensor& pos_hist, const torch::Tensor& neg_hist);

class MultiLabelTask : public Task {
 public:
  static constexpr int kApBins = 400;  // logit histogram bins over [-10, 10] for mAP
  static constexpr double kApLogitRange = 10.0;

  explicit MultiLabelTask(const MultiLabelConfig& config);
  std::string name() const override { return "multilabel"; }
  std::shared_ptr<torch::nn::Module> module() override { return model_; }
  // -> ImageModelOutputs: the logits of the batch's images.
  std::unique_ptr<Outputs> forward(const data::Batch& batch, Pass pass) override;
  torch::Tensor forward(const torch::Tensor& images);  // the logits [B, C]
  torch::Tensor inference(const torch::Tensor& images) override { return forward(images); }
  data::SampleSpec sample_spec() const override;
  data::ParseFn parser(bool training) const override;
  Loss loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) override;
  std::string data_loss_name() const override { return "cross_entropy"; }
  void train_metrics(const Outputs& outputs, const data::Batch& batch, const Loss& loss,
                     MetricSums* sums) const override;
  void eval_step(const Outputs& outputs, const data::Batch& batch, const Loss& loss, MetricSums* sums) override;
  std::map<std::string, double> compute_metrics(const MetricSums& sums, bool training) const override;
  std::map<std::string, std::string> signature() const override;

  data::PreprocessOptions preprocess_options() const;
  // Each image's labels with probability (sigmoid of the logits [B, C]) at least `threshold`,
  // most probable first.
  std::vector<std::vector<ClassScore>> predict(const torch::Tensor& logits, double threshold) const;
  torch::Tensor l2_loss() const;
  const MultiLabelConfig& config() const { return config_; }
  // Names of the loss state kept with the model (saved in checkpoints, not a backbone part).
  static bool is_task_state(const std::string& variable);

 private:
  MultiLabelConfig config_;
  models::ImageModel model_;
  torch::Tensor pos_count_, neg_count_;  // registered buffers on the model
};

}  // namespace orchard::tasks
