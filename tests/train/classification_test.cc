// tasks/classification: the seed's loss (cross entropy / global batch + 1e-4 * L2 on non-BN
// variables) and metrics, against hand computations.
#include "orchard/tasks/classify/classification.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace orchard::tasks {
namespace {

ClassificationConfig tiny_config(double weight_decay = 1e-4, double label_smoothing = 0) {
  ClassificationConfig c;
  c.model.arch = "resnet_tiny";
  c.model.num_classes = 10;
  c.image_size = 28;
  c.weight_decay = weight_decay;
  c.label_smoothing = label_smoothing;
  return c;
}

// 1e-4 * sum of p^2 over parameters whose name does not mark a batch norm (the seed: 'bn'
// not in the variable name; torchvision names the downsample BN "downsample.1").
double hand_l2(ClassificationTask& task, double weight_decay) {
  double sum = 0;
  int used = 0;
  for (const auto& p : task.model()->named_parameters()) {
    const std::string& n = p.key();
    if (n.find("bn") != std::string::npos || n.find("downsample.1.") != std::string::npos) continue;
    sum += p.value().to(torch::kDouble).pow(2).sum().item<double>();
    ++used;
  }
  EXPECT_EQ(used, 1 + 4 * 2 + 3 + 2);  // stem conv, 8 block convs, 3 downsample convs, fc weight + bias
  return weight_decay * sum;
}

double rel_diff(double a, double b) { return std::abs(a - b) / std::max(std::abs(a), std::abs(b)); }

TEST(ClassificationL2, SingleOpEqualsPerLayerEqualsHand) {
  torch::manual_seed(3);
  ClassificationTask task(tiny_config());
  const double single = task.l2_loss(true).item<double>();
  const double per_layer = task.l2_loss(false).item<double>();
  const double hand = hand_l2(task, 1e-4);
  EXPECT_GT(hand, 0);
  EXPECT_LT(rel_diff(single, per_layer), 1e-5) << single << " vs " << per_layer;
  EXPECT_LT(rel_diff(single, hand), 1e-5) << single << " vs " << hand;
  EXPECT_LT(rel_diff(per_layer, hand), 1e-5) << per_layer << " vs " << hand;
}

TEST(ClassificationL2, BatchNormExcludedOthersIncluded) {
  torch::manual_seed(4);
  ClassificationTask task(tiny_config());
  auto params = task.model()->named_parameters();
  const double before = task.l2_loss(false).item<double>();
  {
    torch::NoGradGuard no_grad;
    for (const char* bn : {"bn1.weight", "bn1.bias", "layer2.0.bn2.weight", "layer3.0.downsample.1.weight",
                           "layer4.0.downsample.1.bias"})
      params[bn].add_(3.0);
  }
  EXPECT_EQ(task.l2_loss(false).item<double>(), before);
  EXPECT_LT(rel_diff(task.l2_loss(true).item<double>(), before), 1e-5);

  // A conv weight, a downsample conv and the fc bias count: adding 1 to one element of a
  // tensor changes sum(p^2) by 2p + 1.
  for (const char* name : {"layer1.0.conv1.weight", "layer2.0.downsample.0.weight", "fc.bias"}) {
    const double l2 = task.l2_loss(false).item<double>();
    auto flat = params[name].view({-1});
    const double p0 = flat[0].item<double>();
    {
      torch::NoGradGuard no_grad;
      flat[0].add_(1.0);
    }
    EXPECT_NEAR(task.l2_loss(false).item<double>() - l2, 1e-4 * (2 * p0 + 1), 1e-8) << name;
    EXPECT_NEAR(task.l2_loss(true).item<double>() - l2, 1e-4 * (2 * p0 + 1), 1e-8) << name;
  }
}

TEST(ClassificationL2, GradientFlowsThroughBothPaths) {
  torch::manual_seed(5);
  ClassificationTask task(tiny_config());
  auto w = task.model()->named_parameters()["layer1.0.conv1.weight"];
  for (bool single : {false, true}) {
    if (w.grad().defined()) w.mutable_grad().zero_();
    task.l2_loss(single).backward();
    EXPECT_TRUE(torch::allclose(w.grad(), 2e-4 * w, 1e-5, 1e-9)) << "single=" << single;
  }
}

// Softmax cross entropy of one row, by hand.
double hand_ce(const std::vector<double>& logits, int label, double smoothing = 0) {
  double m = logits[0];
  for (double v : logits) m = std::max(m, v);
  double z = 0;
  for (double v : logits) z += std::exp(v - m);
  const double lse = m + std::log(z);
  double smooth = 0;  // mean over classes of -log p_k
  for (double v : logits) smooth += (lse - v) / static_cast<double>(logits.size());
  return (1 - smoothing) * (lse - logits[static_cast<size_t>(label)]) + smoothing * smooth;
}

const std::vector<std::vector<double>> kLogits = {{2.0, -1.0, 0.5, 0.0, 1.0, 0.0, 0.0, 0.3, -2.0, 0.1},
                                                  {-0.5, 0.25, 3.0, 0.0, 0.0, 1.5, -1.0, 0.0, 0.0, 0.7},
                                                  {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}};
const std::vector<int64_t> kLabels = {0, 5, 9};

data::Batch make_batch() {
  data::Batch b;
  b.fields["label"] = torch::tensor(kLabels, torch::kLong);
  b.size = 3;
  return b;
}

torch::Tensor logits_tensor() {
  std::vector<float> flat;
  for (const auto& row : kLogits)
    for (double v : row) flat.push_back(static_cast<float>(v));
  return torch::tensor(flat).view({3, 10});
}

// Logits as the task's forward pass returns them.
ImageModelOutputs outputs_of(const torch::Tensor& logits) {
  ImageModelOutputs outputs;
  outputs.logits = logits;
  return outputs;
}

TEST(ClassificationLoss, SumOverBatchDividedByGlobalBatch) {
  ClassificationTask task(tiny_config(/*weight_decay=*/0));
  double sum = 0;
  for (size_t i = 0; i < kLogits.size(); ++i) sum += hand_ce(kLogits[i], static_cast<int>(kLabels[i]));
  auto batch = make_batch();
  auto local = task.loss(outputs_of(logits_tensor()), batch, 3);
  EXPECT_NEAR(local.data.item<double>(), sum / 3, 1e-6);
  EXPECT_NEAR(local.total().item<double>(), sum / 3, 1e-6);
  EXPECT_FALSE(local.regularizer.defined());
  // Two replicas of 3: the replica's sum over a global batch of 6, i.e. half.
  auto global = task.loss(outputs_of(logits_tensor()), batch, 6);
  EXPECT_NEAR(global.data.item<double>(), sum / 6, 1e-6);
  EXPECT_NEAR(global.data.item<double>() * 2, local.data.item<double>(), 1e-6);
}

TEST(ClassificationLoss, TotalAddsL2) {
  torch::manual_seed(6);
  for (bool single : {false, true}) {
    auto cfg = tiny_config(1e-4);
    cfg.single_l2_loss_op = single;
    ClassificationTask task(cfg);
    auto batch = make_batch();
    auto terms = task.loss(outputs_of(logits_tensor()), batch, 3);
    const double l2 = hand_l2(task, 1e-4);
    EXPECT_LT(rel_diff(terms.regularizer.item<double>(), l2), 1e-5);
    EXPECT_NEAR(terms.total().item<double>(), terms.data.item<double>() + terms.regularizer.item<double>(), 1e-6);
  }
}

TEST(ClassificationLoss, LabelSmoothing) {
  ClassificationTask task(tiny_config(0, 0.1));
  double sum = 0, plain = 0;
  for (size_t i = 0; i < kLogits.size(); ++i) {
    sum += hand_ce(kLogits[i], static_cast<int>(kLabels[i]), 0.1);
    plain += hand_ce(kLogits[i], static_cast<int>(kLabels[i]));
  }
  auto batch = make_batch();
  const double got = task.loss(outputs_of(logits_tensor()), batch, 4).total().item<double>();
  EXPECT_NEAR(got, sum / 4, 1e-6);
  EXPECT_GT(std::abs(got - plain / 4), 1e-3);  // smoothing made a difference
}

TEST(ClassificationMetrics, TopOneTopFiveAndEvalLoss) {
  ClassificationTask task(tiny_config(0));
  auto batch = make_batch();
  auto logits = logits_tensor();
  // Row 0: label 0 is the top logit (top-1 hit). Row 1: label 5 is second (top-5 hit).
  // Row 2: all equal: the tie-break decides; make it a clear miss instead.
  logits[2][9] = -5.0;
  auto terms = task.loss(outputs_of(logits), batch, 3);
  MetricSums eval_sums, train_sums;
  task.eval_step(outputs_of(logits), batch, terms, &eval_sums);
  auto eval = task.compute_metrics(eval_sums, false);
  EXPECT_NEAR(eval.at("accuracy"), 1.0 / 3, 1e-12);
  EXPECT_NEAR(eval.at("top_5_accuracy"), 2.0 / 3, 1e-12);
  auto rows = kLogits;
  rows[2][9] = -5.0;
  double ce = 0;
  for (size_t i = 0; i < rows.size(); ++i) ce += hand_ce(rows[i], static_cast<int>(kLabels[i]));
  EXPECT_NEAR(eval.at("loss"), ce / 3, 1e-6);

  // Training metrics: mean of the per-step total loss, top-1 over all examples.
  task.train_metrics(outputs_of(logits), batch, terms, &train_sums);
  task.train_metrics(outputs_of(logits), batch, terms, &train_sums);
  auto train = task.compute_metrics(train_sums, true);
  EXPECT_NEAR(train.at("loss"), terms.total().item<double>(), 1e-9);
  EXPECT_NEAR(train.at("accuracy"), 1.0 / 3, 1e-12);

  // Sums merge element-wise (what a distributed all-reduce does).
  MetricSums merged;
  merged.merge(eval_sums);
  merged.merge(eval_sums);
  EXPECT_DOUBLE_EQ(merged.get("count"), 6);
  EXPECT_NEAR(task.compute_metrics(merged, false).at("accuracy"), 1.0 / 3, 1e-12);
}

TEST(ClassificationTask, SignatureNamesModelAndClasses) {
  ClassificationTask task(tiny_config());
  auto sig = task.signature();
  EXPECT_EQ(sig.at("model"), "resnet_tiny");
  EXPECT_EQ(sig.at("num_classes"), "10");
  EXPECT_EQ(sig.at("task"), "classify");
}

// inception_v3 is built by name and fed [-1, 1] (TF-Slim's inception preprocessing), the
// ResNets RGB minus the ImageNet means.
TEST(ClassificationTask, InceptionV3TakesMinusOneToOneInput) {
  auto c = tiny_config();
  EXPECT_EQ(ClassificationTask(c).preprocess_options().scale, 1.0f);
  c.model.arch = "inception_v3";
  c.image_size = 75;
  ClassificationTask task(c);
  EXPECT_EQ(task.preprocess_options().scale, data::kInceptionScale);
  EXPECT_EQ(task.preprocess_options().offset, data::kInceptionOffset);
  task.model()->eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(task.forward(torch::zeros({2, 3, 75, 75})).sizes(), (std::vector<int64_t>{2, c.model.num_classes}));
}

TEST(ClassificationTask, ChannelsLastGivesTheSameLogits) {
  auto cfg = tiny_config();
  torch::manual_seed(7);
  ClassificationTask nchw(cfg);
  cfg.channels_last = true;
  torch::manual_seed(7);
  ClassificationTask nhwc(cfg);
  nchw.model()->eval();
  nhwc.model()->eval();
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 3, 28, 28});
  auto a = nchw.forward(x);
  auto b = nhwc.forward(x.permute({0, 2, 3, 1}).contiguous());  // NHWC images, as the pipeline makes them
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max().item<double>();
  EXPECT_EQ(nhwc.sample_spec().image_shape, (std::vector<int64_t>{28, 28, 3}));
  EXPECT_EQ(nchw.sample_spec().image_shape, (std::vector<int64_t>{3, 28, 28}));
}

}  // namespace
}  // namespace orchard::tasks

namespace orchard::tasks {
namespace {

TEST(ClassificationPredict, TopKClassesBySoftmaxProbability) {
  ClassificationTask task(tiny_config(0));
  const auto logits = torch::tensor({{0.f, 2.f, 1.f, -1.f}, {3.f, 0.f, 0.f, 0.f}});
  const auto top = task.predict(logits, 2);
  ASSERT_EQ(top.size(), 2u);
  ASSERT_EQ(top[0].size(), 2u);
  const double z0 = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_EQ(top[0][0].class_id, 1);
  EXPECT_NEAR(top[0][0].probability, std::exp(2.0) / z0, 1e-6);
  EXPECT_EQ(top[0][1].class_id, 2);
  EXPECT_NEAR(top[0][1].probability, std::exp(1.0) / z0, 1e-6);
  EXPECT_EQ(top[1][0].class_id, 0);
  EXPECT_EQ(task.predict(logits, 10)[0].size(), 4u);  // k is capped at the classes
}

}  // namespace
}  // namespace orchard::tasks
