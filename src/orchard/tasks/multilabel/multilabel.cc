#include "orchard/tasks/multilabel/multilabel.h"

#include <torch/torch.h>

#include <cmath>

#include "orchard/data/ml_images.h"
#include "orchard/tasks/image_model.h"

namespace orchard::tasks {
namespace {

constexpr const char* kPosCount = "multilabel_pos_count";
constexpr const char* kNegCount = "multilabel_neg_count";

}  // namespace

torch::Tensor ml_images_coefficients(const torch::Tensor& labels, const torch::Tensor& selected, double mask_thres,
                                     torch::Tensor& pos_count, torch::Tensor& neg_count) {
  torch::NoGradGuard no_grad;
  const auto pos_curr = labels.ge(mask_thres).sum(0).gt(0).to(torch::kFloat);  // [C]
  const auto neg_curr = 1 - pos_curr;
  const auto sel = selected.to(torch::kFloat);
  // pos_count += pos_curr, reset where no positive; neg_count += selected negative, reset by a positive.
  pos_count.copy_((pos_count + pos_curr) * pos_curr);
  neg_count.copy_((neg_count + neg_curr * sel) * neg_curr);
  auto pos_coef = -torch::log10((pos_count + 0.01) / 10);
  pos_coef = torch::where(pos_coef > 0.01, pos_coef, torch::full_like(pos_coef, 0.01)) * pos_curr;
  auto neg_coef = -torch::log10((neg_count + 8) / 10);
  neg_coef = torch::where(neg_coef > 0.01, neg_coef, torch::full_like(neg_coef, 0.001)) * neg_curr * sel;
  return pos_coef + neg_coef;
}

torch::Tensor weighted_sigmoid_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                             const torch::Tensor& coef, double pos_weight, double batch_scale) {
  const auto known = labels.eq(0).logical_or(labels.eq(1)).to(logits.dtype());
  const auto targets = labels * known;  // unknown labels (masked below) as 0 keep the loss finite
  // targets * -log(sigmoid(x)) * pos_weight + (1 - targets) * -log(1 - sigmoid(x))
  const auto ce = torch::binary_cross_entropy_with_logits(
      logits, targets, {}, torch::full({logits.size(1)}, pos_weight, logits.options()), at::Reduction::None);
  return ((ce * known).mean(0) * coef).sum() * batch_scale;
}

torch::Tensor average_precision_from_histograms(const torch::Tensor& pos_hist, const torch::Tensor& neg_hist) {
  // Walk the bins from the highest score down: precision after each bin, weighted by the
  // share of positives the bin adds to recall.
  const auto pos = pos_hist.to(torch::kDouble).flip({1});
  const auto neg = neg_hist.to(torch::kDouble).flip({1});
  const auto tp = pos.cumsum(1), fp = neg.cumsum(1);
  const auto precision = tp / (tp + fp).clamp_min(1);
  const auto total = pos.sum(1);
  auto ap = (pos * precision).sum(1) / total;
  return torch::where(total > 0, ap, torch::full_like(ap, std::nan("")));
}

MultiLabelTask::MultiLabelTask(const MultiLabelConfig& config)
    : config_(config), model_(build_image_model(config.model, config.channels_last)) {
  const int64_t c = config_.model.num_classes;
  pos_count_ = model_->register_buffer(kPosCount, torch::zeros({c}));
  neg_count_ = model_->register_buffer(kNegCount, torch::zeros({c}));
}

bool MultiLabelTask::is_task_state(const std::string& variable) {
  return variable == kPosCount || variable == kNegCount;
}

std::unique_ptr<Outputs> MultiLabelTask::forward(const data::Batch& batch, Pass) {
  auto outputs = std::make_unique<ImageModelOutputs>();
  outputs->logits = forward(batch.images);
  return outputs;
}

torch::Tensor MultiLabelTask::forward(const torch::Tensor& images) {
  return forward_image_model(model_, images, config_.channels_last);
}

data::SampleSpec MultiLabelTask::sample_spec() const {
  return data::ml_images_spec(config_.image_size, config_.channels_last, config_.model.num_classes);
}

data::PreprocessOptions MultiLabelTask::preprocess_options() const {
  data::PreprocessOptions o;
  o.image_size = config_.image_size;
  o.channels_last = config_.channels_last;
  o.crop = config_.crop;
  set_input_scaling(config_.model, &o);
  o.max_image_pixels = config_.max_image_pixels;
  return o;
}

std::vector<std::vector<ClassScore>> MultiLabelTask::predict(const torch::Tensor& logits, double threshold) const {
  return ranked_class_scores(torch::sigmoid(logits.to(torch::kCPU, torch::kFloat)), logits.size(1), threshold);
}

data::ParseFn MultiLabelTask::parser(bool training) const {
  data::MlImagesParseOptions o;
  o.preprocess = preprocess_options();
  o.training = training;
  o.class_num = config_.model.num_classes;
  return data::make_ml_images_parser(o);
}

torch::Tensor MultiLabelTask::l2_loss() const {
  std::vector<torch::Tensor> squares;
  for (const auto& p : model_->parameters())
    if (p.requires_grad()) squares.push_back(p.pow(2).sum());
  return config_.weight_decay * torch::stack(squares).sum() / 2;
}

Loss MultiLabelTask::loss(const Outputs& outputs, const data::Batch& batch, int64_t global_batch_size) {
  const auto logits = outputs_as<ImageModelOutputs>(outputs).logits.to(torch::kFloat);
  const auto& labels = batch.field("labels");
  const bool training = model_->is_training();
  // Training: this replica's share of the global batch; evaluation: the batch mean.
  const double batch_scale = training ? static_cast<double>(batch.size) / static_cast<double>(global_batch_size) : 1;
  Loss loss;
  if (training && config_.balance) {
    // neg_select draws from the global generator, so it is part of the checkpointed RNG state.
    const auto selected = torch::rand({logits.size(1)}).le(config_.neg_select).to(logits.device());
    const auto coef = ml_images_coefficients(labels, selected, config_.mask_thres, pos_count_, neg_count_);
    loss.data = weighted_sigmoid_cross_entropy(logits, labels, coef, config_.pos_weight, batch_scale);
  } else {
    // Evaluation (and --balance off): every known label weighs the same; the mean per label.
    const auto ones = torch::ones({logits.size(1)}, logits.options());
    loss.data = weighted_sigmoid_cross_entropy(logits, labels, ones, config_.pos_weight, batch_scale) / logits.size(1);
  }
  if (config_.weight_decay > 0) loss.regularizer = l2_loss();
  return loss;
}

namespace {

// The seed's accuracy: argmax of the scores against argmax of the label vector.
void add_accuracy(const torch::Tensor& logits, const torch::Tensor& labels, MetricSums* sums) {
  sums->add("correct", logits.argmax(1).eq(labels.argmax(1)).sum());
  sums->add("count", static_cast<double>(labels.size(0)));
}

}  // namespace

void MultiLabelTask::train_metrics(const Outputs& outputs, const data::Batch& batch, const Loss& loss,
                                   MetricSums* sums) const {
  torch::NoGradGuard no_grad;
  add_accuracy(outputs_as<ImageModelOutputs>(outputs).logits.detach().to(torch::kFloat), batch.field("labels"), sums);
  add_training_loss(loss, sums);
}

void MultiLabelTask::eval_step(const Outputs& task_outputs, const data::Batch& batch, const Loss& loss,
                               MetricSums* sums) {
  torch::NoGradGuard no_grad;
  const auto outputs = outputs_as<ImageModelOutputs>(task_outputs).logits.to(torch::kFloat);  // the logits
  const auto& labels = batch.field("labels");
  add_accuracy(outputs, labels, sums);
  const auto pos = labels.eq(1), neg = labels.eq(0);
  const auto predicted = torch::sigmoid(outputs).ge(config_.threshold);
  sums->add("cross_entropy_sum", loss.data * batch.size);
  sums->add("true_positives", predicted.logical_and(pos).sum());
  sums->add("false_positives", predicted.logical_and(neg).sum());
  sums->add("false_negatives", predicted.logical_not().logical_and(pos).sum());
  // Per-class logit histograms for average precision (mergeable across batches and workers).
  const int64_t classes = outputs.size(1);
  const auto bins = ((outputs.clamp(-kApLogitRange, kApLogitRange) + kApLogitRange) / (2 * kApLogitRange) * kApBins)
                        .floor()
                        .clamp(0, kApBins - 1)
                        .to(torch::kLong);
  const auto index = torch::arange(classes, bins.options()).unsqueeze(0) * kApBins + bins;
  auto histogram = [&](const torch::Tensor& mask) {
    return torch::bincount(index.masked_select(mask), {}, classes * kApBins).view({classes, kApBins});
  };
  sums->add("ap_positives", histogram(pos));
  sums->add("ap_negatives", histogram(neg));
}

std::map<std::string, double> MultiLabelTask::compute_metrics(const MetricSums& s, bool training) const {
  const double count = std::max(1.0, s.get("count"));
  if (training)
    return {
        {"loss", training_loss(s)}, {"cross_entropy", training_data_loss(s)}, {"accuracy", s.get("correct") / count}};
  const double tp = s.get("true_positives"), fp = s.get("false_positives"), fn = s.get("false_negatives");
  const double precision = tp + fp > 0 ? tp / (tp + fp) : 0, recall = tp + fn > 0 ? tp / (tp + fn) : 0;
  std::map<std::string, double> m = {
      {"loss", s.get("cross_entropy_sum") / count},
      {"accuracy", s.get("correct") / count},
      {"precision", precision},
      {"recall", recall},
      {"f1", precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0}};
  if (s.tensor("ap_positives").defined()) {
    const auto ap = average_precision_from_histograms(s.tensor("ap_positives"), s.tensor("ap_negatives"));
    const auto valid = ap.isnan().logical_not();
    m["mAP"] = valid.any().item<bool>() ? ap.masked_select(valid).mean().item<double>() : 0.0;
    m["classes_with_positives"] = valid.sum().item<double>();
  }
  return m;
}

std::map<std::string, std::string> MultiLabelTask::signature() const {
  return {{"task", "multilabel"},
          {"model", config_.model.arch},
          {"num_classes", std::to_string(config_.model.num_classes)},
          {"width", std::to_string(config_.model.width)}};
}

}  // namespace orchard::tasks
