// What a task supplies to the shared trainer: the model, its input parsing, the loss (named
// terms) and metrics. The trainer, checkpoints, schedules, summaries and evaluation loop
// know nothing task-specific.
#pragma once

#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orchard/data/pipeline.h"
#include "orchard/engine/outputs.h"

namespace orchard::tasks {

// Metric state as running sums of float64 tensors (no host sync per step): scalars or
// fixed-shape tensors such as per-class histograms. Merging across workers is an
// element-wise sum, so distributed reduction is one all-reduce.
class MetricSums {
 public:
  void add(const std::string& name, const at::Tensor& value);  // element-wise; shapes must agree
  void add(const std::string& name, double value);
  void merge(const MetricSums& other);
  void reset() {
    sums_.clear();
    rows_.clear();
  }
  bool empty() const { return sums_.empty() && rows_.empty(); }
  double get(const std::string& name) const;         // the sum of all elements; 0 if absent
  at::Tensor tensor(const std::string& name) const;  // undefined if absent
  const std::map<std::string, at::Tensor>& sums() const { return sums_; }
  std::map<std::string, at::Tensor>& mutable_sums() { return sums_; }

  // Per-example records that do not sum (e.g. detections for COCO metrics): float64 rows
  // [n, k] concatenated by merge and, in distributed evaluation, across workers (in rank order).
  void append_rows(const std::string& name, const at::Tensor& rows);
  at::Tensor rows(const std::string& name) const;  // undefined if absent
  std::map<std::string, at::Tensor>& mutable_rows() { return rows_; }

 private:
  std::map<std::string, at::Tensor> sums_;
  std::map<std::string, at::Tensor> rows_;
};

// A batch's loss as a task computes it. The trainer back-propagates total(); with several
// replicas it sums the data shares and counts the regulariser once.
struct Loss {
  // This replica's share of the global batch's data loss: over the replicas the shares sum to
  // the global value (a replica's mean times its batch / the global batch).
  torch::Tensor data;
  // The whole model's regularisation (e.g. L2 on the weights), the same on every replica;
  // undefined where the task has none.
  torch::Tensor regularizer;
  // Named values the task's metrics read (e.g. each detection loss, caption weight sums).
  std::map<std::string, torch::Tensor> terms;
  torch::Tensor total() const { return regularizer.defined() ? data + regularizer : data; }
};

// A predicted class of one image (classification, multi-label tagging); detection predicts
// detect::Detections and captioning caption::GeneratedCaption.
struct ClassScore {
  int64_t class_id = 0;
  double probability = 0;
};

// Each row of `probabilities` [B, C] as its classes by probability, most probable first: at
// most `k`, and only those at or above `min_probability`.
std::vector<std::vector<ClassScore>> ranked_class_scores(const torch::Tensor& probabilities, int64_t k,
                                                         double min_probability);

// An image for TensorBoard (e.g. predictions beside the ground truth).
struct SummaryImage {
  std::string tag;
  int height = 0, width = 0;
  std::string png;
};

// The training loss over a host loop, right for any number of replicas: sums "data_loss" (the
// shares) and "regularization_loss" (each replica's whole term); the trainer adds "replicas" =
// 1 per replica before summing over them.
void add_training_loss(const Loss& loss, MetricSums* sums);
double training_loss(const MetricSums& sums);                 // mean per step of the data loss + the regulariser
double training_data_loss(const MetricSums& sums);            // mean per step of the global data loss
double training_regularization_loss(const MetricSums& sums);  // mean per step

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<torch::nn::Module> module() = 0;
  // The whole network on a prepared batch (prepare_batch), inside the trainer's or evaluator's
  // autocast scope: the batch's images and whatever other fields the task's network reads
  // (captioning's LSTM reads the captions).
  virtual std::unique_ptr<Outputs> forward(const data::Batch& batch, Pass pass) = 0;
  // Inference on images alone, for `predict`: the task's one prediction tensor (classification's
  // and multi-label's logits [B, C], captioning's image embeddings [B, E]). Detection, whose
  // predictions are more than one tensor, throws here: DetectionTask::forward and postprocess.
  virtual torch::Tensor inference(const torch::Tensor& images);
  virtual data::SampleSpec sample_spec() const = 0;
  virtual data::ParseFn parser(bool training) const = 0;
  // What the task does to a batch before the model sees it, in training and evaluation (detection:
  // images of different sizes in max-size buffers are cut to the batch's largest). Default none.
  virtual void prepare_batch(data::Batch* /*batch*/) const {}
  // Loss for one replica's batch, normalised by the global batch size.
  virtual Loss loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) = 0;
  // What the progress line calls the data loss (the seeds' "cross_entropy").
  virtual std::string data_loss_name() const { return "data_loss"; }
  // A training step's metric state. `outputs` as forward returned them (still in the autograd
  // graph, in the autocast dtype): what the metrics read they detach and read in float32.
  virtual void train_metrics(const Outputs& outputs, const data::Batch& batch, const Loss& loss,
                             MetricSums* sums) const = 0;
  // An evaluation step: metric state, and whatever the task produces from its predictions
  // (captions to score, images for TensorBoard); `outputs` as forward returned them (read them in
  // float32). begin_evaluation starts a pass.
  virtual void begin_evaluation() {}
  virtual void eval_step(const Outputs& outputs, const data::Batch& batch, const Loss& loss, MetricSums* sums) = 0;
  // Final metric values from the sums (names as they appear in summaries and stats).
  virtual std::map<std::string, double> compute_metrics(const MetricSums& sums, bool training) const = 0;
  // What a checkpoint must match to be restored (e.g. arch, num_classes).
  virtual std::map<std::string, std::string> signature() const = 0;
  // Images collected during the last evaluation (the trainer writes them on the chief), then
  // forgotten. Most tasks have none.
  virtual std::vector<SummaryImage> take_summary_images() { return {}; }
};

}  // namespace orchard::tasks
