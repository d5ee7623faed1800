// Image classification (the ResNet CTL seed): softmax cross entropy summed over the replica
// batch and divided by the global batch, plus L2 on every trainable non-BN variable.
#pragma once

#include "orchard/data/imagenet.h"
#include "orchard/engine/task.h"
#include "orchard/models/registry.h"
#include "orchard/tasks/image_model.h"

namespace orchard::tasks {

struct ClassificationConfig {
  models::ModelConfig model;
  int image_size = 224;
  bool channels_last = false;
  double weight_decay = 1e-4;
  bool single_l2_loss_op = false;
  double label_smoothing = 0.0;
  data::Augmentation augmentation = data::Augmentation::kResNet;
  data::DistortedBoxOptions crop;  // resnet augmentation
  int pad = 4;                     // pad_crop augmentation
  float random_erasing = 0;        // probability, training only
  int64_t max_image_pixels = data::kDefaultMaxImagePixels;
};

class ClassificationTask : public Task {
 public:
  explicit ClassificationTask(const ClassificationConfig& config);
  std::string name() const override { return "classify"; }
  std::shared_ptr<torch::nn::Module> module() override { return model_; }
  // -> ImageModelOutputs: the logits of the batch's images.
  std::unique_ptr<Outputs> forward(const data::Batch& batch, Pass pass) override;
  torch::Tensor forward(const torch::Tensor& images);  // the logits [B, C]
  torch::Tensor inference(const torch::Tensor& images) override { return forward(images); }
  data::SampleSpec sample_spec() const override;
  data::ParseFn parser(bool training) const override;
  // How images are prepared for this model (train and eval/predict share it).
  data::PreprocessOptions preprocess_options() const;
  // Each image's k most probable classes (softmax of the logits [B, C]), most probable first.
  std::vector<std::vector<ClassScore>> predict(const torch::Tensor& logits, int64_t k) const;
  Loss loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) override;
  std::string data_loss_name() const override { return "cross_entropy"; }
  void train_metrics(const Outputs& outputs, const data::Batch& batch, const Loss& loss,
                     MetricSums* sums) const override;
  void eval_step(const Outputs& outputs, const data::Batch& batch, const Loss& loss, MetricSums* sums) override;
  std::map<std::string, double> compute_metrics(const MetricSums& sums, bool training) const override;
  std::map<std::string, std::string> signature() const override;

  // 1e-4 * sum ||w||^2 over trainable non-BN parameters: per layer, or as one op over the
  // concatenation (--single_l2_loss_op). Both give the same number.
  torch::Tensor l2_loss(bool single_op) const;
  models::ImageModel& model() { return model_; }
  const ClassificationConfig& config() const { return config_; }

 private:
  ClassificationConfig config_;
  models::ImageModel model_;
  std::vector<torch::Tensor> l2_params_;
};

}  // namespace orchard::tasks
