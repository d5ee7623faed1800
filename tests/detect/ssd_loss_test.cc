#include "orchard/detect/losses/ssd_loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

at::Tensor boxes(std::vector<float> v) { return at::tensor(v, at::kFloat).reshape({-1, 4}); }
at::Tensor classes(std::vector<int64_t> v) { return at::tensor(v, at::kLong); }
std::vector<int64_t> longs(const at::Tensor& t) {
  const auto c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
void expect_all_near(const at::Tensor& got, std::vector<double> want, double tol = 1e-5) {
  const auto g = got.to(at::kDouble).contiguous().reshape(-1);
  ASSERT_EQ(g.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i].item<double>(), want[i], tol) << "element " << i;
}

// tf.nn.sigmoid_cross_entropy_with_logits for one entry.
double sigmoid_ce(double x, double z) { return std::max(x, 0.0) - x * z + std::log1p(std::exp(-std::abs(x))); }
// tf.losses.huber_loss for one entry.
double huber(double e, double delta = 1.0) {
  const double a = std::abs(e), q = std::min(a, delta);
  return 0.5 * q * q + delta * (a - q);
}

TEST(AssignTargets, MatchedUnmatchedIgnored) {
  const auto anchors = boxes({0, 0, 0.5f, 0.5f,     // identical to the gt: IoU 1
                              0.5f, 0.5f, 1, 1,     // disjoint: background
                              0, 0, 0.5f, 0.22f,    // IoU 0.44: ignored
                              0, 0, 0.5f, 0.25f});  // IoU 0.5: matched
  ArgMaxMatcherOptions m;
  m.unmatched_threshold = 0.4f;
  const auto t = assign_targets(anchors, boxes({0, 0, 0.5f, 0.5f}), classes({3}), m, {});
  EXPECT_EQ(longs(t.match), (std::vector<int64_t>{0, kUnmatched, kIgnored, 0}));
  EXPECT_EQ(longs(t.cls_targets), (std::vector<int64_t>{3, 0, 0, 3}));
  expect_all_near(t.reg_weights, {1, 0, 0, 1});
  expect_all_near(t.cls_weights, {1, 1, 0, 1});
  EXPECT_EQ(longs(t.matched), (std::vector<int64_t>{1, 0, 0, 1}));
  // Anchor 3: centre x 0.125 -> 0.25 over width 0.25, width doubled.
  expect_all_near(t.reg_targets, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 5 * std::log(2.0)}, 1e-4);
}

TEST(AssignTargets, NoGroundtruthIsAllBackground) {
  const auto t =
      assign_targets(boxes({0, 0, 0.5f, 0.5f, 0.5f, 0.5f, 1, 1}), at::zeros({0, 4}), at::zeros({0}, at::kLong), {}, {});
  EXPECT_EQ(longs(t.match), (std::vector<int64_t>{kUnmatched, kUnmatched}));
  EXPECT_EQ(longs(t.cls_targets), (std::vector<int64_t>{0, 0}));
  expect_all_near(t.cls_weights, {1, 1});
  expect_all_near(t.reg_weights, {0, 0});
  expect_all_near(t.reg_targets, std::vector<double>(8, 0.0));
}

// One gt equal to anchor 0; anchor 1 is background. num_classes 1.
struct TwoAnchors {
  at::Tensor anchors = boxes({0, 0, 0.5f, 0.5f, 0.5f, 0.5f, 1, 1});
  std::vector<at::Tensor> gt_boxes{boxes({0, 0, 0.5f, 0.5f})};
  std::vector<at::Tensor> gt_classes{classes({1})};
  at::Tensor encodings = at::tensor(std::vector<float>{0.5f, -2, 0.25f, 0, 3, 3, 3, 3}).reshape({1, 2, 4});
  at::Tensor logits = at::tensor(std::vector<float>{0, 2, 1, -1}).reshape({1, 2, 2});
};

TEST(SsdLoss, HandComputedValues) {
  TwoAnchors f;
  const double loc = huber(0.5) + huber(-2) + huber(0.25) + huber(0);  // 0.125 + 1.5 + 0.03125
  const double cls = sigmoid_ce(0, 0) + sigmoid_ce(2, 1) + sigmoid_ce(1, 1) + sigmoid_ce(-1, 0);
  for (bool mine : {false, true}) {
    SsdLossOptions o;
    o.miner.enabled = mine;
    SsdLossStats stats;
    const auto l = ssd_loss(f.encodings, f.logits, f.anchors, f.gt_boxes, f.gt_classes, o, &stats);
    EXPECT_NEAR(l.at("localization_loss").item<double>(), loc, 1e-5);
    EXPECT_NEAR(l.at("localization_loss").item<double>(), 1.65625, 1e-5);
    EXPECT_NEAR(l.at("classification_loss").item<double>(), cls, 1e-5);
    EXPECT_EQ(stats.num_matches, 1);
  }
  SsdLossOptions o;
  o.classification = ClassificationLoss::kWeightedSoftmax;
  o.localization_weight = 2;
  o.classification_weight = 3;
  o.normalize_loc_loss_by_codesize = true;
  const auto l = ssd_loss(f.encodings, f.logits, f.anchors, f.gt_boxes, f.gt_classes, o);
  EXPECT_NEAR(l.at("localization_loss").item<double>(), 2 * loc / 4, 1e-5);
  // -log softmax([0, 2])[1] and -log softmax([1, -1])[0] are both log(1 + e^-2).
  EXPECT_NEAR(l.at("classification_loss").item<double>(), 3 * 2 * std::log1p(std::exp(-2.0)), 1e-5);
}

// weighted_sigmoid_focal as the OD API's SigmoidFocalClassificationLoss computes it, per column:
// sigmoid CE(x, y) * (1 - p_t)^gamma * (y alpha + (1 - y)(1 - alpha)), p_t = y p + (1 - y)(1 - p);
// with encode_background_as_zeros an unmatched anchor's targets are all 0 (SSDMetaArch's
// unmatched_class_label), the background column's too.
TEST(SsdLoss, SigmoidFocalAndBackgroundAsZerosHandComputed) {
  TwoAnchors f;  // anchor 0 matched (class 1): logits [0, 2]; anchor 1 unmatched: [1, -1]
  const auto focal = [](double x, double y, double gamma, double alpha) {
    const double p = 1 / (1 + std::exp(-x)), pt = y * p + (1 - y) * (1 - p);
    return sigmoid_ce(x, y) * std::pow(1 - pt, gamma) * (alpha < 0 ? 1 : y * alpha + (1 - y) * (1 - alpha));
  };
  const auto loss = [&](SsdLossOptions o) {
    o.miner.enabled = false;
    return ssd_loss(f.encodings, f.logits, f.anchors, f.gt_boxes, f.gt_classes, o)
        .at("classification_loss")
        .item<double>();
  };
  for (const double alpha : {-1.0, 0.25})
    for (const bool zeros : {false, true}) {
      SsdLossOptions o;
      o.classification = ClassificationLoss::kWeightedSigmoidFocal;
      o.focal_alpha = static_cast<float>(alpha);
      o.encode_background_as_zeros = zeros;
      const double background = zeros ? 0 : 1;  // anchor 1's target on the background column
      EXPECT_NEAR(
          loss(o),
          focal(0, 0, 2, alpha) + focal(2, 1, 2, alpha) + focal(1, background, 2, alpha) + focal(-1, 0, 2, alpha), 1e-6)
          << alpha << " " << zeros;
    }
  SsdLossOptions o;
  o.classification = ClassificationLoss::kWeightedSigmoidFocal;
  o.focal_alpha = 0.25f;
  EXPECT_NEAR(loss(o), 0.15307404457226714, 1e-6);  // worked in double precision
  o.encode_background_as_zeros = true;
  EXPECT_NEAR(loss(o), 0.673810757753689, 1e-6);
  // gamma 0 without alpha is the plain sigmoid loss.
  o.focal_gamma = 0;
  o.focal_alpha = -1;
  SsdLossOptions plain;
  plain.encode_background_as_zeros = true;
  EXPECT_NEAR(loss(o), loss(plain), 1e-6);
  EXPECT_NEAR(loss(plain), sigmoid_ce(0, 0) + sigmoid_ce(2, 1) + sigmoid_ce(1, 0) + sigmoid_ce(-1, 0), 1e-6);
  // Softmax: an all-zeros target adds nothing; the matched anchor's -log softmax([0, 2])[1] remains.
  SsdLossOptions softmax;
  softmax.classification = ClassificationLoss::kWeightedSoftmax;
  softmax.encode_background_as_zeros = true;
  EXPECT_NEAR(loss(softmax), std::log1p(std::exp(-2.0)), 1e-6);
}

TEST(SsdLoss, NormalisedByMatchesAcrossTheBatch) {
  TwoAnchors f;
  const auto anchors = f.anchors;
  std::vector<at::Tensor> gt{f.gt_boxes[0], boxes({0, 0, 0.5f, 0.5f, 0.5f, 0.5f, 1, 1})};
  std::vector<at::Tensor> cls{classes({1}), classes({1, 1})};
  const auto enc =
      at::stack({f.encodings[0], at::tensor(std::vector<float>{0.5f, 0, 0, 0, 0, 0.5f, 0, 0}).reshape({2, 4})});
  const auto logits = at::zeros({2, 2, 2});
  SsdLossOptions o;
  o.miner.enabled = false;
  SsdLossStats stats;
  const auto l = ssd_loss(enc, logits, anchors, gt, cls, o, &stats);
  EXPECT_EQ(stats.num_matches, 3);
  EXPECT_NEAR(l.at("localization_loss").item<double>(), (1.65625 + 0.125 + 0.125) / 3, 1e-5);
  EXPECT_NEAR(l.at("classification_loss").item<double>(), 8 * std::log(2.0) / 3, 1e-5);
  // Without normalisation: plain sums.
  o.normalize_loss_by_num_matches = false;
  EXPECT_NEAR(ssd_loss(enc, logits, anchors, gt, cls, o).at("localization_loss").item<double>(), 1.90625, 1e-5);
}

TEST(HardExampleMiner, SubsamplesAsTfDoes) {
  // Box 4 duplicates box 1; the rest are apart.
  const auto b = boxes({0, 0,    0.1f, 0.1f, 0, 0.2f, 0.1f, 0.3f, 0,    0.4f, 0.1f, 0.5f,  //
                        0, 0.6f, 0.1f, 0.7f, 0, 0.2f, 0.1f, 0.3f, 0.5f, 0.5f, 0.6f, 0.6f});
  const auto losses = at::tensor(std::vector<float>{0.1f, 0.9f, 0.5f, 0.8f, 0.7f, 0.2f});
  const auto match = classes({0, kUnmatched, kUnmatched, kIgnored, kUnmatched, kUnmatched});
  HardExampleMinerOptions o;
  o.max_negatives_per_positive = 1;
  o.min_negatives_per_image = 0;
  // NMS by loss: 1, 3, (4 suppressed by 1), 2, 5, 0. One positive allows one negative (1);
  // the ignored 3 ranks before the next negative, so it stays, as in TF.
  const auto mined = mine_hard_examples(b, losses, match, o);
  EXPECT_EQ(longs(mined.indices), (std::vector<int64_t>{1, 3, 0}));
  EXPECT_EQ(mined.num_positives, 1);
  EXPECT_EQ(mined.num_negatives, 2);
  // min_negatives_per_image raises the cap; num_hard_examples cuts the NMS.
  o.min_negatives_per_image = 3;
  EXPECT_EQ(longs(mine_hard_examples(b, losses, match, o).indices), (std::vector<int64_t>{1, 3, 2, 5, 0}));
  o.num_hard_examples = 2;
  EXPECT_EQ(longs(mine_hard_examples(b, losses, match, o).indices), (std::vector<int64_t>{1, 3}));
  // No ratio: whatever NMS keeps.
  HardExampleMinerOptions all;
  all.max_negatives_per_positive = 0;
  EXPECT_EQ(longs(mine_hard_examples(b, losses, match, all).indices), (std::vector<int64_t>{1, 3, 2, 5, 0}));
}

// 10 x 10 disjoint anchors of side 0.1, 2 classes.
at::Tensor grid_anchors() {
  std::vector<float> v;
  for (int y = 0; y < 10; ++y) {
    for (int x = 0; x < 10; ++x) v.insert(v.end(), {0.1f * y, 0.1f * x, 0.1f * (y + 1), 0.1f * (x + 1)});
  }
  return boxes(v);
}

TEST(SsdLoss, HardMiningKeepsThreeNegativesPerPositive) {
  at::manual_seed(11);
  const auto anchors = grid_anchors();
  const int64_t batch = 3, num_anchors = 100, num_classes = 2;
  // Image 0: one object on anchor 0 (class 1); image 1: none; image 2: two (anchors 10, 55).
  const std::vector<std::vector<int64_t>> positives{{0}, {}, {10, 55}};
  std::vector<at::Tensor> gt_boxes, gt_classes;
  for (const auto& p : positives) {
    gt_boxes.push_back(p.empty() ? at::zeros({0, 4}) : anchors.index_select(0, classes(p)));
    gt_classes.push_back(p.empty() ? at::zeros({0}, at::kLong) : at::full({(int64_t)p.size()}, 2, at::kLong));
  }
  auto logits = (at::randn({batch, num_anchors, num_classes + 1}) * 2).requires_grad_();
  auto enc = (at::full({batch, num_anchors, 4}, 0.1f)).requires_grad_();
  SsdLossStats stats;
  const auto l = ssd_loss(enc, logits, anchors, gt_boxes, gt_classes, SsdLossOptions{}, &stats);
  EXPECT_EQ(stats.num_matches, 3);
  EXPECT_EQ(stats.mined_positives, 3);
  EXPECT_EQ(stats.mined_negatives, 3 + 3 + 6);  // min_negatives_per_image for the empty image

  // Reference: every positive plus the 3 * positives (at least 3) negatives of highest loss.
  const auto lg = logits.detach().to(at::kDouble);
  double want_cls = 0;
  std::vector<std::set<int64_t>> want_selected(batch);
  for (int64_t i = 0; i < batch; ++i) {
    const std::set<int64_t> pos(positives[i].begin(), positives[i].end());
    std::vector<std::pair<double, int64_t>> neg;
    for (int64_t a = 0; a < num_anchors; ++a) {
      double loss = 0;
      for (int64_t c = 0; c <= num_classes; ++c) {
        const double target = pos.count(a) ? (c == 2) : (c == 0);
        loss += sigmoid_ce(lg[i][a][c].item<double>(), target);
      }
      if (pos.count(a)) {
        want_cls += loss, want_selected[i].insert(a);
      } else {
        neg.push_back({loss, a});
      }
    }
    std::sort(neg.rbegin(), neg.rend());
    const size_t k = std::max<size_t>(3, 3 * pos.size());
    for (size_t j = 0; j < k; ++j) want_cls += neg[j].first, want_selected[i].insert(neg[j].second);
  }
  EXPECT_NEAR(l.at("classification_loss").item<double>(), want_cls / 3, 1e-4);
  // Target of every positive is 0 (anchor == gt); codes 0.1 each give 4 * 0.005 per positive.
  EXPECT_NEAR(l.at("localization_loss").item<double>(), 3 * 4 * huber(0.1) / 3, 1e-5);

  (l.at("classification_loss") + l.at("localization_loss")).backward();
  const auto cls_grad_rows = logits.grad().abs().sum(2) > 0;  // [B, A]
  const auto loc_grad_rows = enc.grad().abs().sum(2) > 0;
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t a = 0; a < num_anchors; ++a) {
      EXPECT_EQ(cls_grad_rows[i][a].item<bool>(), want_selected[i].count(a) == 1) << "image " << i << " anchor " << a;
      const bool positive = std::count(positives[i].begin(), positives[i].end(), a) > 0;
      EXPECT_EQ(loc_grad_rows[i][a].item<bool>(), positive) << "image " << i << " anchor " << a;
    }
  }
}

TEST(SsdLoss, WithoutMinerEveryAnchorContributes) {
  at::manual_seed(5);
  const auto anchors = grid_anchors();
  auto logits = at::randn({1, 100, 3}).requires_grad_();
  const auto enc = at::zeros({1, 100, 4});
  SsdLossOptions o;
  o.miner.enabled = false;
  const auto l = ssd_loss(enc, logits, anchors, {anchors.slice(0, 0, 1)}, {classes({1})}, o);
  l.at("classification_loss").backward();
  EXPECT_TRUE((logits.grad().abs().sum(2) > 0).all().item<bool>());
}

TEST(SsdLoss, Ssd300ShapesRunAndStayFinite) {
  at::manual_seed(2);
  const int64_t batch = 4, num_anchors = 1917, num_classes = 90;
  const auto lo = at::rand({num_anchors, 2}) * 0.8;
  const auto anchors = at::cat({lo, lo + 0.05 + at::rand({num_anchors, 2}) * 0.15}, 1);
  std::vector<at::Tensor> gt_boxes, gt_classes;
  for (int64_t i = 0; i < batch; ++i) {
    const auto g = at::rand({3, 2}) * 0.6;
    gt_boxes.push_back(at::cat({g, g + 0.2}, 1));
    gt_classes.push_back(at::randint(1, num_classes + 1, {3}, at::kLong));
  }
  auto enc = (at::randn({batch, num_anchors, 4}) * 0.1).requires_grad_();
  auto logits = at::randn({batch, num_anchors, num_classes + 1}).requires_grad_();
  SsdLossStats stats;
  const auto l = ssd_loss(enc, logits, anchors, gt_boxes, gt_classes, SsdLossOptions{}, &stats);
  const auto total = l.at("localization_loss") + l.at("classification_loss");
  EXPECT_TRUE(std::isfinite(total.item<double>()));
  total.backward();
  EXPECT_GE(stats.num_matches, 3 * batch);  // force_match_for_each_row
  EXPECT_LE(stats.mined_negatives, 3 * stats.mined_positives + 3 * batch);
  EXPECT_TRUE(enc.grad().isfinite().all().item<bool>());
}

TEST(SsdLoss, RejectsBadClasses) {
  TwoAnchors f;
  EXPECT_ANY_THROW(ssd_loss(f.encodings, f.logits, f.anchors, f.gt_boxes, {classes({2})}, SsdLossOptions{}));
  EXPECT_THROW(miner_loss_type_from_name("HARD"), Error);
  EXPECT_EQ(miner_loss_type_from_name("BOTH"), MinerLossType::kBoth);
}

}  // namespace
}  // namespace orchard::detect
