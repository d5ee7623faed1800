#include "orchard/tasks/classify/classification.h"

#include <torch/torch.h>

#include "orchard/tasks/image_model.h"

namespace orchard::tasks {

ClassificationTask::ClassificationTask(const ClassificationConfig& config)
    : config_(config), model_(build_image_model(config.model, config.channels_last)) {
  // BN parameters carry no L2 (the seed filters variables whose name contains "bn"); the
  // downsample BN is "downsample.1" in torchvision naming.
  for (const auto& item : model_->named_modules()) {
    if (item.value()->as<torch::nn::BatchNorm2d>()) continue;
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false))
      if (p.value().requires_grad()) l2_params_.push_back(p.value());
  }
}

std::unique_ptr<Outputs> ClassificationTask::forward(const data::Batch& batch, Pass) {
  auto outputs = std::make_unique<ImageModelOutputs>();
  outputs->logits = forward(batch.images);
  return outputs;
}

torch::Tensor ClassificationTask::forward(const torch::Tensor& images) {
  return forward_image_model(model_, images, config_.channels_last);
}

data::SampleSpec ClassificationTask::sample_spec() const {
  return data::imagenet_spec(config_.image_size, config_.channels_last);
}

data::PreprocessOptions ClassificationTask::preprocess_options() const {
  data::PreprocessOptions o;
  o.image_size = config_.image_size;
  o.channels_last = config_.channels_last;
  o.augmentation = config_.augmentation;
  o.crop = config_.crop;
  set_input_scaling(config_.model, &o);
  o.pad = config_.pad;
  o.random_erasing = config_.random_erasing;
  o.max_image_pixels = config_.max_image_pixels;
  return o;
}

std::vector<std::vector<ClassScore>> ClassificationTask::predict(const torch::Tensor& logits, int64_t k) const {
  return ranked_class_scores(torch::softmax(logits.to(torch::kCPU, torch::kFloat), 1), k, 0.0);
}

data::ParseFn ClassificationTask::parser(bool training) const {
  data::ImageNetParseOptions o;
  o.preprocess = preprocess_options();
  o.training = training;
  o.num_classes = config_.model.num_classes;
  return data::make_imagenet_parser(o);
}

torch::Tensor ClassificationTask::l2_loss(bool single_op) const {
  if (l2_params_.empty()) return torch::zeros({});
  if (single_op) {
    std::vector<torch::Tensor> flat;
    flat.reserve(l2_params_.size());
    for (const auto& p : l2_params_) flat.push_back(p.reshape({-1}));
    return config_.weight_decay * torch::cat(flat).pow(2).sum();
  }
  torch::Tensor total = torch::zeros({}, l2_params_[0].options());
  for (const auto& p : l2_params_) total = total + config_.weight_decay * p.pow(2).sum();
  return total;
}

Loss ClassificationTask::loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) {
  auto logits =
      outputs_as<ImageModelOutputs>(outputs).logits.to(torch::kFloat);  // softmax in float32 even under autocast
  auto ce = torch::nn::functional::cross_entropy(
      logits, batch.field("label"),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).label_smoothing(config_.label_smoothing));
  Loss loss;
  loss.data = ce / static_cast<double>(global_batch_size);
  if (config_.weight_decay > 0) loss.regularizer = l2_loss(config_.single_l2_loss_op);
  return loss;
}

namespace {

// Top-1 and count; the top-k hits [B, k] for evaluation.
torch::Tensor add_accuracy(const torch::Tensor& logits, const torch::Tensor& labels, MetricSums* sums) {
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  auto hits = std::get<1>(logits.topk(k, 1)).eq(labels.unsqueeze(1));
  sums->add("top_1_correct", hits.select(1, 0).sum());
  sums->add("count", static_cast<double>(labels.size(0)));
  return hits;
}

}  // namespace

void ClassificationTask::train_metrics(const Outputs& outputs, const data::Batch& batch, const Loss& loss,
                                       MetricSums* sums) const {
  torch::NoGradGuard no_grad;
  add_accuracy(outputs_as<ImageModelOutputs>(outputs).logits.detach().to(torch::kFloat), batch.field("label"), sums);
  add_training_loss(loss, sums);
}

void ClassificationTask::eval_step(const Outputs& outputs, const data::Batch& batch, const Loss&, MetricSums* sums) {
  torch::NoGradGuard no_grad;
  const auto logits = outputs_as<ImageModelOutputs>(outputs).logits.to(torch::kFloat);
  const auto& labels = batch.field("label");
  sums->add("top_5_correct", add_accuracy(logits, labels, sums).any(1).sum());
  sums->add("cross_entropy_sum",
            torch::nn::functional::cross_entropy(
                logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
}

std::map<std::string, double> ClassificationTask::compute_metrics(const MetricSums& s, bool training) const {
  const double count = std::max(1.0, s.get("count"));
  if (training) return {{"loss", training_loss(s)}, {"accuracy", s.get("top_1_correct") / count}};
  return {{"loss", s.get("cross_entropy_sum") / count},
          {"accuracy", s.get("top_1_correct") / count},
          {"top_5_accuracy", s.get("top_5_correct") / count}};
}

std::map<std::string, std::string> ClassificationTask::signature() const {
  return {{"task", "classify"},
          {"model", config_.model.arch},
          {"num_classes", std::to_string(config_.model.num_classes)},
          {"width", std::to_string(config_.model.width)}};
}

}  // namespace orchard::tasks
