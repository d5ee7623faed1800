// tasks/multilabel and the ML-Images schedule: the loss coefficients, the weighted sigmoid
// cross entropy, L2, average precision and the metrics, against hand computations.
#include "orchard/tasks/multilabel/multilabel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/data/ml_images.h"
#include "orchard/train/schedule.h"

namespace orchard::tasks {
namespace {

double coef_pos(double n) { return std::max(-std::log10((0.01 + n) / 10), 0.01); }
double coef_neg(double n) {
  const double c = -std::log10((8 + n) / 10);
  return c > 0.01 ? c : 0.001;
}

// Logits as the task's forward pass returns them.
ImageModelOutputs outputs_of(const torch::Tensor& logits) {
  ImageModelOutputs outputs;
  outputs.logits = logits;
  return outputs;
}

void expect_near(const torch::Tensor& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[static_cast<int64_t>(i)].item<double>(), want[i], tol) << "element " << i;
}

TEST(MultiLabelLoss, CoefficientsFollowTheConsecutiveBatchCounters) {
  // Classes: 0 positive, 1 negative-only (selected), 2 positive through a 1 next to an
  // unknown -1, 3 negative-only (not selected in step 1).
  auto labels = torch::tensor({{1.f, 0.f, -1.f, 0.f}, {0.f, 0.f, 1.f, -1.f}});
  auto pos = torch::zeros({4}), neg = torch::zeros({4});
  auto c1 = ml_images_coefficients(labels, torch::tensor({true, true, false, false}), 0.7, pos, neg);
  expect_near(pos, {1, 0, 1, 0});
  expect_near(neg, {0, 1, 0, 0});
  expect_near(c1, {coef_pos(1), coef_neg(1), coef_pos(1), 0});
  EXPECT_NEAR(c1[0].item<double>(), 0.995679, 1e-6);  // -log10(1.01 / 10)
  EXPECT_NEAR(c1[1].item<double>(), 0.045757, 1e-6);  // -log10(9 / 10)

  auto c2 = ml_images_coefficients(labels, torch::ones({4}, torch::kBool), 0.7, pos, neg);
  expect_near(pos, {2, 0, 2, 0});
  expect_near(neg, {0, 2, 0, 1});
  expect_near(c2, {coef_pos(2), 0.001, coef_pos(2), coef_neg(1)});  // -log10(10 / 10) = 0 -> 0.001

  // Class 0 turns negative-only: its positive run resets and a negative run starts.
  auto labels3 = labels.clone();
  labels3.index_put_({0, 0}, 0.f);
  auto c3 = ml_images_coefficients(labels3, torch::ones({4}, torch::kBool), 0.7, pos, neg);
  expect_near(pos, {0, 0, 3, 0});
  expect_near(neg, {1, 3, 0, 2});
  expect_near(c3, {coef_neg(1), 0.001, coef_pos(3), 0.001});

  // A long positive run floors at 0.01 (the formula alone would go negative after 10).
  for (int i = 0; i < 12; ++i) ml_images_coefficients(labels, torch::zeros({4}, torch::kBool), 0.7, pos, neg);
  auto c4 = ml_images_coefficients(labels, torch::zeros({4}, torch::kBool), 0.7, pos, neg);
  EXPECT_NEAR(c4[0].item<double>(), 0.01, 1e-7);
  EXPECT_EQ(c4[1].item<double>(), 0.0);  // negative-only and not selected
}

TEST(MultiLabelLoss, WeightedSigmoidCrossEntropyByHand) {
  auto logits = torch::tensor({{2.f, -1.f}, {0.f, 3.f}});
  auto labels = torch::tensor({{1.f, 0.f}, {-1.f, 1.f}});
  auto coef = torch::tensor({0.5f, 2.f});
  const double pw = 12;
  auto sp = [](double x) { return std::log1p(std::exp(-x)); };  // -log(sigmoid(x))
  // class 0: (12 * -log s(2) + masked) / 2; class 1: (-log(1 - s(-1)) + 12 * -log s(3)) / 2
  const double class0 = (pw * sp(2) + 0) / 2;
  const double class1 = (sp(1) + pw * sp(3)) / 2;
  const double want = 0.5 * class0 + 2 * class1;
  EXPECT_NEAR(want, 1.2770939, 1e-6);
  EXPECT_NEAR(weighted_sigmoid_cross_entropy(logits, labels, coef, pw).item<double>(), want, 1e-5);
  EXPECT_NEAR(weighted_sigmoid_cross_entropy(logits, labels, coef, pw, 0.25).item<double>(), want / 4, 1e-5);
  // Any unknown value (not only -1) is masked: the loss does not change.
  auto other = labels.clone();
  other.index_put_({1, 0}, 0.5f);
  EXPECT_NEAR(weighted_sigmoid_cross_entropy(logits, other, coef, pw).item<double>(), want, 1e-5);
}

MultiLabelConfig tiny_config() {
  MultiLabelConfig c;
  c.model.arch = "resnet_tiny";
  c.model.num_classes = 4;
  c.image_size = 16;
  c.weight_decay = 1e-3;
  return c;
}

data::Batch batch_of(const torch::Tensor& targets) {
  data::Batch b;
  b.fields["labels"] = targets;
  b.size = targets.size(0);
  return b;
}

TEST(MultiLabelLoss, TaskLossIsCoefficientWeightedCrossEntropyPlusHalfL2OverAllVariables) {
  torch::manual_seed(0);
  MultiLabelTask task(tiny_config());
  auto images = torch::randn({2, 3, 16, 16});
  auto targets = torch::tensor({{1.f, 0.f, -1.f, 0.f}, {0.f, 0.f, 1.f, 1.f}});
  auto batch = batch_of(targets);
  task.module()->train();
  auto logits = task.forward(images);

  // Same draw of neg_select as the task makes.
  torch::manual_seed(11);
  const auto selected = torch::rand({4}).le(0.3);
  auto pos = torch::zeros({4}), neg = torch::zeros({4});
  const auto coef = ml_images_coefficients(targets, selected, 0.7, pos, neg);
  const double ce =
      weighted_sigmoid_cross_entropy(logits, targets, coef, task.config().pos_weight, 2.0 / 8).item<double>();
  double squares = 0;
  int variables = 0;
  for (const auto& p : task.module()->parameters())
    squares += p.to(torch::kDouble).pow(2).sum().item<double>(), ++variables;
  EXPECT_GT(variables, 20);  // batch-norm gammas and betas included

  torch::manual_seed(11);
  auto terms = task.loss(outputs_of(logits), batch, /*global_batch_size=*/8);
  EXPECT_NEAR(terms.data.item<double>(), ce, 1e-5);
  EXPECT_NEAR(terms.regularizer.item<double>(), 1e-3 * squares / 2, 1e-6 * squares);
  EXPECT_NEAR(terms.total().item<double>(), ce + 1e-3 * squares / 2, 1e-5);

  // The counters live with the model (checkpointed) and evaluation leaves them alone.
  bool found = false;
  for (const auto& b : task.module()->named_buffers())
    if (b.key() == "multilabel_pos_count") found = true, expect_near(b.value(), {1, 0, 1, 1});
  EXPECT_TRUE(found);
  EXPECT_TRUE(MultiLabelTask::is_task_state("multilabel_neg_count"));
  task.module()->eval();
  task.loss(outputs_of(logits), batch, 8);
  for (const auto& b : task.module()->named_buffers())
    if (b.key() == "multilabel_pos_count") expect_near(b.value(), {1, 0, 1, 1});
}

TEST(MultiLabelMetrics, AveragePrecisionPrecisionRecallAndAccuracy) {
  MultiLabelTask task(tiny_config());
  task.module()->eval();
  // Class 0 scores 3, 2, 1, 0, -1 for labels 1, 0, 1, 0, 1: AP = (1 + 2/3 + 3/5) / 3.
  // Class 1: perfect ranking (AP 1). Class 2: no positives (left out). Class 3: all unknown.
  auto logits = torch::tensor({{3.f, 5.f, -2.f, 0.f},
                               {2.f, -5.f, -2.f, 0.f},
                               {1.f, 4.f, -2.f, 0.f},
                               {0.f, -4.f, 1.f, 0.f},
                               {-1.f, -3.f, -2.f, 0.f}});
  auto targets = torch::tensor({{1.f, 1.f, 0.f, -1.f},
                                {0.f, 0.f, 0.f, -1.f},
                                {1.f, 1.f, 0.f, -1.f},
                                {0.f, 0.f, 0.f, -1.f},
                                {1.f, 0.f, 0.f, -1.f}});
  auto batch = batch_of(targets);
  MetricSums sums;
  // Two batches (the same one twice) merge into the same AP.
  for (int i = 0; i < 2; ++i) task.eval_step(outputs_of(logits), batch, task.loss(outputs_of(logits), batch, 5), &sums);
  auto m = task.compute_metrics(sums, false);
  EXPECT_NEAR(m.at("mAP"), ((1 + 2.0 / 3 + 3.0 / 5) / 3 + 1) / 2, 1e-9);
  EXPECT_EQ(m.at("classes_with_positives"), 2);
  // Threshold 0.5 (probability >= 0.5, so logit 0 counts as predicted). Class 0 predicts
  // rows 0-3: TP rows 0 and 2, FP rows 1 and 3, FN row 4. Class 1: TP rows 0 and 2. Class 2:
  // FP row 3. Class 3 is all unknown and counts nowhere. TP 4, FP 3, FN 1.
  EXPECT_NEAR(m.at("precision"), 4.0 / 7, 1e-9);
  EXPECT_NEAR(m.at("recall"), 4.0 / 5, 1e-9);
  EXPECT_NEAR(m.at("f1"), 2 * (4.0 / 7) * (4.0 / 5) / (4.0 / 7 + 4.0 / 5), 1e-9);
  // The seed's accuracy, argmax(logits) == argmax(labels) (first maximum): rows predict
  // 1, 0, 1, 2, 3 against 0, 0, 0, 0, 0: only row 1 hits.
  EXPECT_NEAR(m.at("accuracy"), 1.0 / 5, 1e-9);
}

TEST(MultiLabelMetrics, BinnedAveragePrecisionMatchesExactOnRandomScores) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> score(0, 2);
  const int n = 2000;
  std::vector<std::pair<float, int>> items;
  auto pos = torch::zeros({1, MultiLabelTask::kApBins}), neg = torch::zeros({1, MultiLabelTask::kApBins});
  for (int i = 0; i < n; ++i) {
    const int label = std::bernoulli_distribution(0.3)(rng);
    const float s = score(rng) + 1.5f * label;
    items.push_back({s, label});
    const double r = MultiLabelTask::kApLogitRange;
    int bin = static_cast<int>(std::floor((std::clamp<double>(s, -r, r) + r) / (2 * r) * MultiLabelTask::kApBins));
    bin = std::min(bin, MultiLabelTask::kApBins - 1);
    (label ? pos : neg)[0][bin] += 1;
  }
  std::sort(items.begin(), items.end(), [](auto a, auto b) { return a.first > b.first; });
  double tp = 0, ap = 0, total = 0;
  for (const auto& it : items) total += it.second;
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].second) tp += 1, ap += tp / static_cast<double>(i + 1) / total;
  const double binned = average_precision_from_histograms(pos, neg)[0].item<double>();
  EXPECT_NEAR(binned, ap, 2e-3) << "exact " << ap;
}

TEST(MlImagesSchedule, LinearScalingPiecewiseDecayAndExponentialWarmup) {
  train::MlImagesScheduleConfig c;
  c.lr = 0.1;
  c.batch_size = 512;  // x2
  c.lr_decay_step = 100;
  auto s = train::ml_images_schedule(c);
  EXPECT_DOUBLE_EQ(s(0), 0.2);
  EXPECT_DOUBLE_EQ(s(100), 0.2);  // tf piecewise_constant: step <= boundary keeps the value
  EXPECT_NEAR(s(101), 0.02, 1e-12);
  EXPECT_NEAR(s(250), 0.002, 1e-12);
  EXPECT_NEAR(s(301), 2e-4, 1e-12);
  EXPECT_NEAR(s(100000), 2e-5, 1e-12);
  c.warmup_step = 50;
  c.lr_warmup = 0.025;
  c.warmup_decay_step = 10;
  c.warmup_decay_factor = 2;
  s = train::ml_images_schedule(c);
  EXPECT_NEAR(s(0), 0.05, 1e-12);
  EXPECT_NEAR(s(9), 0.05, 1e-12);  // staircase
  EXPECT_NEAR(s(10), 0.1, 1e-12);
  EXPECT_NEAR(s(49), 0.8, 1e-12);  // 2 * 0.025 * 2^4
  EXPECT_NEAR(s(50), 0.2, 1e-12);  // warm-up over
  c.lr_decay_step = 0;             // no decay
  EXPECT_NEAR(train::ml_images_schedule(c)(1000000), 0.2, 1e-12);
}

TEST(MlImagesRecords, LabelBytesDecodeAndAWrongLengthNamesTheRecord) {
  data::Image im;
  im.height = im.width = 8;
  im.pixels.assign(8 * 8 * 3, 100);
  tensorflow::Example ex;
  auto* f = ex.mutable_features();
  data::set_int64s(f, "width", {8});
  data::set_int64s(f, "height", {8});
  data::set_bytes(f, "image", data::encode_png(im));
  data::set_bytes(f, "name", "a");
  data::set_bytes(f, "label", data::ml_images_label_bytes({1, 0, -1}));
  data::MlImagesParseOptions o;
  o.preprocess.image_size = 8;
  o.class_num = 3;
  o.training = false;
  auto parse = data::make_ml_images_parser(o);
  std::mt19937_64 rng(0);
  std::vector<float> image(3 * 8 * 8), target(3);
  data::SampleOut out;
  out.image = image.data();
  out.fields = {target.data()};
  parse(ex.SerializeAsString(), "train-0: record 7", rng, out);
  EXPECT_EQ(target, (std::vector<float>{1, 0, -1}));
  EXPECT_NEAR(image[0], 100 - 123.68f, 1e-4);

  o.class_num = 4;
  auto strict = data::make_ml_images_parser(o);
  try {
    strict(ex.SerializeAsString(), "train-0: record 7", rng, out);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train-0: record 7"), std::string::npos) << what;
    EXPECT_NE(what.find("'label' holds 12 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("--class_num"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace orchard::tasks

namespace orchard::tasks {
namespace {

TEST(MultiLabelPredict, LabelsAtOrAboveTheThresholdMostProbableFirst) {
  MultiLabelTask task(tiny_config());
  const auto logits = torch::tensor({{2.f, -1.f, 0.5f, 0.f}, {-3.f, -2.f, -4.f, -1.f}});
  const auto labels = task.predict(logits, 0.5);
  ASSERT_EQ(labels.size(), 2u);
  ASSERT_EQ(labels[0].size(), 3u);  // sigmoid(0) = 0.5 is at the threshold: kept
  EXPECT_EQ(labels[0][0].class_id, 0);
  EXPECT_NEAR(labels[0][0].probability, 1 / (1 + std::exp(-2.0)), 1e-6);
  EXPECT_EQ(labels[0][1].class_id, 2);
  EXPECT_EQ(labels[0][2].class_id, 3);
  EXPECT_TRUE(labels[1].empty());
}

}  // namespace
}  // namespace orchard::tasks
