#include "orchard/detect/ops/box_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

at::Tensor boxes(std::vector<float> v) { return at::tensor(v, at::kFloat).reshape({-1, 4}); }
at::Tensor floats(std::vector<float> v) { return at::tensor(v, at::kFloat); }
std::vector<int64_t> longs(const at::Tensor& t) {
  const auto c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
void expect_all_near(const at::Tensor& got, std::vector<double> want, double tol = 1e-5) {
  const auto g = got.to(at::kDouble).contiguous().reshape(-1);
  ASSERT_EQ(g.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i].item<double>(), want[i], tol) << "element " << i;
}

TEST(BoxArea, HandCases) {
  expect_all_near(box_area(boxes({0, 0, 1, 2, 0.1f, 0.2f, 0.4f, 0.6f, 0.5f, 0.5f, 0.5f, 0.9f})), {2.0, 0.12, 0.0});
}

TEST(PairwiseIou, HandCases) {
  const auto a = boxes({0, 0, 1, 1});
  const auto b = boxes({
      0.5f,  0.5f,  1.5f,  1.5f,   // quarter overlap: 0.25 / 1.75
      2,     2,     3,     3,      // disjoint
      0.25f, 0.25f, 0.75f, 0.75f,  // nested: 0.25 / 1
      0,     0,     1,     1,      // identical
      0.5f,  0.5f,  0.5f,  0.5f,   // zero area inside
      0,     1,     1,     2,      // touching edge
  });
  const auto iou = pairwise_iou(a, b);
  ASSERT_EQ(iou.sizes(), (at::IntArrayRef{1, 6}));
  expect_all_near(iou, {1.0 / 7.0, 0.0, 0.25, 1.0, 0.0, 0.0});
  // Two zero-area boxes: the union is 0, the IoU 0 (not NaN).
  const auto z = boxes({0.5f, 0.5f, 0.5f, 0.5f});
  expect_all_near(pairwise_iou(z, z), {0.0});
  EXPECT_EQ(pairwise_iou(boxes({0, 0, 1, 1, 0, 0, 2, 2}), boxes({0, 0, 1, 1, 0, 0, 1, 1, 5, 5, 6, 6})).sizes(),
            (at::IntArrayRef{2, 3}));
  EXPECT_EQ(pairwise_iou(at::zeros({0, 4}), a).sizes(), (at::IntArrayRef{0, 1}));
}

TEST(BoxCoder, HandEncoding) {
  // Anchor center (0.4, 0.3), size (0.4, 0.2); box center (0.6, 0.3), size (0.6, 0.1).
  const auto anchor = boxes({0.2f, 0.2f, 0.6f, 0.4f});
  const auto box = boxes({0.3f, 0.25f, 0.9f, 0.35f});
  const auto codes = encode_boxes(box, anchor, {});
  expect_all_near(codes, {10 * 0.2 / 0.4, 0.0, 5 * std::log(1.5), 5 * std::log(0.5)}, 1e-4);
  // Other scale factors divide out the same way.
  FasterRcnnBoxCoderOptions unit{1, 1, 1, 1};
  expect_all_near(encode_boxes(box, anchor, unit), {0.5, 0.0, std::log(1.5), std::log(0.5)}, 1e-5);
  expect_all_near(decode_boxes(codes, anchor, {}), {0.3, 0.25, 0.9, 0.35}, 1e-5);
}

TEST(BoxCoder, ZeroSizedBoxEncodesFinite) {
  // EPSILON keeps log(0) out: th = 5 * log(1e-8 / (1 + 1e-8)).
  const auto codes = encode_boxes(boxes({0.5f, 0.5f, 0.5f, 0.5f}), boxes({0, 0, 1, 1}), {});
  EXPECT_TRUE(codes.isfinite().all().item<bool>());
  expect_all_near(codes, {0.0, 0.0, 5 * std::log(1e-8), 5 * std::log(1e-8)}, 1e-3);
}

TEST(BoxCoder, RoundTripAndBatchBroadcast) {
  at::manual_seed(3);
  const int64_t n = 50;
  auto make = [&] {
    const auto lo = at::rand({n, 2}) * 0.6;
    const auto size = at::rand({n, 2}) * 0.3 + 0.05;
    return at::cat({lo, lo + size}, 1);
  };
  const auto anchors = make(), gt = make();
  const auto codes = encode_boxes(gt, anchors, {});
  EXPECT_TRUE(at::allclose(decode_boxes(codes, anchors, {}), gt, 1e-4, 1e-5));
  const auto gt2 = make();
  const auto batch = at::stack({codes, encode_boxes(gt2, anchors, {})});  // [2, n, 4]
  const auto decoded = decode_boxes(batch, anchors, {});
  ASSERT_EQ(decoded.sizes(), (at::IntArrayRef{2, n, 4}));
  EXPECT_TRUE(at::allclose(decoded[0], gt, 1e-4, 1e-5));
  EXPECT_TRUE(at::allclose(decoded[1], gt2, 1e-4, 1e-5));
}

TEST(ArgMaxMatcher, ThresholdsAndIgnoreBand) {
  // Columns: best 0.7 (row 0), 0.55 (row 1), 0.5 (row 1, exactly matched), 0.45 (between),
  // 0.4 (exactly unmatched: between), 0.1 (below).
  const auto sim = floats({0.7f, 0.45f, 0.3f, 0.1f, 0.4f, 0.1f,  //
                           0.2f, 0.55f, 0.5f, 0.45f, 0.05f, 0.0f})
                       .reshape({2, 6});
  ArgMaxMatcherOptions o;
  o.matched_threshold = 0.5f;
  o.unmatched_threshold = 0.4f;
  o.force_match_for_each_row = false;
  EXPECT_EQ(longs(argmax_match(sim, o)), (std::vector<int64_t>{0, 1, 1, kIgnored, kIgnored, kUnmatched}));
  o.negatives_lower_than_unmatched = false;  // the band becomes negative, below it ignored
  EXPECT_EQ(longs(argmax_match(sim, o)), (std::vector<int64_t>{0, 1, 1, kUnmatched, kUnmatched, kIgnored}));
}

TEST(ArgMaxMatcher, ForceMatchForEachRow) {
  ArgMaxMatcherOptions o;  // 0.5 / 0.5
  // Row 0's best IoU (0.3) is below threshold: only forcing matches it.
  const auto sim = floats({0.3f, 0.1f, 0.0f, 0.2f, 0.8f, 0.1f}).reshape({2, 3});
  o.force_match_for_each_row = false;
  EXPECT_EQ(longs(argmax_match(sim, o)), (std::vector<int64_t>{kUnmatched, 1, kUnmatched}));
  o.force_match_for_each_row = true;
  EXPECT_EQ(longs(argmax_match(sim, o)), (std::vector<int64_t>{0, 1, kUnmatched}));
  // A row takes its best column even where another row has a higher similarity there.
  const auto steal = floats({0.9f, 0.8f, 0.7f, 0.1f, 0.75f, 0.2f}).reshape({2, 3});
  EXPECT_EQ(longs(argmax_match(steal, o)), (std::vector<int64_t>{0, 1, 0}));
  // Equal similarities: the first row, as tf.argmax.
  o.force_match_for_each_row = false;
  EXPECT_EQ(longs(argmax_match(floats({0.6f, 0.1f, 0.6f, 0.2f}).reshape({2, 2}), o)),
            (std::vector<int64_t>{0, kUnmatched}));
  o.force_match_for_each_row = true;
  // Two rows claiming one column: the first row wins.
  const auto clash = floats({0.3f, 0.2f, 0.4f, 0.1f}).reshape({2, 2});
  EXPECT_EQ(longs(argmax_match(clash, o)), (std::vector<int64_t>{0, kUnmatched}));
}

TEST(ArgMaxMatcher, IgnoreThresholdsEmptyAndValidation) {
  ArgMaxMatcherOptions o;
  o.ignore_thresholds = true;
  o.force_match_for_each_row = false;
  const auto sim = floats({0.1f, 0.05f, 0.0f, 0.02f}).reshape({2, 2});
  EXPECT_EQ(longs(argmax_match(sim, o)), (std::vector<int64_t>{0, 0}));
  o.force_match_for_each_row = true;
  EXPECT_EQ(longs(argmax_match(sim, o)), (std::vector<int64_t>{0, 1}));

  EXPECT_EQ(longs(argmax_match(at::zeros({0, 3}), ArgMaxMatcherOptions{})),
            (std::vector<int64_t>{kUnmatched, kUnmatched, kUnmatched}));

  ArgMaxMatcherOptions bad;
  bad.unmatched_threshold = 0.6f;
  EXPECT_THROW(argmax_match(sim, bad), Error);
  bad.unmatched_threshold = 0.5f;
  bad.negatives_lower_than_unmatched = false;
  EXPECT_THROW(argmax_match(sim, bad), Error);
}

TEST(Nms, SuppressesOverlapKeepsDisjoint) {
  // IoU(b0, b1) = 0.9 / 1.1.
  const auto b = boxes({0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 2, 1, 3});
  EXPECT_EQ(longs(nms(b, floats({0.9f, 0.8f, 0.7f}), 0.5f)), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(longs(nms(b, floats({0.9f, 0.8f, 0.7f}), 0.85f)), (std::vector<int64_t>{0, 1, 2}));
  // The higher score wins, whichever index it has.
  EXPECT_EQ(longs(nms(b, floats({0.8f, 0.9f, 0.7f}), 0.5f)), (std::vector<int64_t>{1, 2}));
}

TEST(Nms, ThresholdIsStrict) {
  // IoU exactly 0.5 (intersection 1, union 2): suppressed only when the threshold is below.
  const auto b = boxes({0, 0, 1, 2, 0, 0, 1, 1});
  const auto s = floats({0.9f, 0.8f});
  EXPECT_EQ(longs(nms(b, s, 0.5f)), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(longs(nms(b, s, 0.49f)), (std::vector<int64_t>{0}));
}

TEST(Nms, ScoreOrderTiesMaxOutputAndScoreThreshold) {
  const auto b = boxes({0, 0, 1, 1, 0, 2, 1, 3, 0, 4, 1, 5, 0, 6, 1, 7});  // disjoint
  EXPECT_EQ(longs(nms(b, floats({0.1f, 0.9f, 0.5f, 0.7f}), 0.5f)), (std::vector<int64_t>{1, 3, 2, 0}));
  EXPECT_EQ(longs(nms(b, floats({0.1f, 0.9f, 0.5f, 0.7f}), 0.5f, 2)), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(longs(nms(b, floats({0.1f, 0.9f, 0.5f, 0.7f}), 0.5f, 0)).size(), 0u);
  EXPECT_EQ(longs(nms(b, floats({0.5f, 0.5f, 0.7f, 0.5f}), 0.5f)), (std::vector<int64_t>{2, 0, 1, 3}));
  EXPECT_EQ(longs(nms(b, floats({0.1f, 0.9f, 0.5f, 0.7f}), 0.5f, -1, 0.5f)), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(nms(at::zeros({0, 4}), at::zeros({0}), 0.5f).numel(), 0);
  EXPECT_THROW(nms(b, floats({1, 1, 1, 1}), 1.5f), Error);
}

TEST(Nms, ZeroAreaAndFlippedCorners) {
  // Zero-area boxes overlap nothing, even at threshold 0; flipped corners are reordered.
  const auto z = boxes({0, 0, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f});
  EXPECT_EQ(longs(nms(z, floats({0.9f, 0.8f, 0.7f}), 0.0f)), (std::vector<int64_t>{0, 1, 2}));
  const auto f = boxes({0, 0, 1, 1, 1, 1, 0, 0});
  EXPECT_EQ(longs(nms(f, floats({0.9f, 0.8f}), 0.5f)), (std::vector<int64_t>{0}));
}

// Textbook greedy NMS (suppression flags over the sorted list, O(N^2)) as the reference.
std::vector<int64_t> reference_nms(const at::Tensor& b, const at::Tensor& s, double threshold) {
  const int64_t n = b.size(0);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const auto sa = s.accessor<float, 1>();
  const auto ba = b.accessor<float, 2>();
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return sa[x] > sa[y]; });
  std::vector<bool> dead(n, false);
  std::vector<int64_t> keep;
  for (int64_t p = 0; p < n; ++p) {
    const int64_t i = order[p];
    if (dead[i]) continue;
    keep.push_back(i);
    for (int64_t q = p + 1; q < n; ++q) {
      const int64_t j = order[q];
      const double ih = std::max(0.0, double(std::min(ba[i][2], ba[j][2])) - std::max(ba[i][0], ba[j][0]));
      const double iw = std::max(0.0, double(std::min(ba[i][3], ba[j][3])) - std::max(ba[i][1], ba[j][1]));
      const double ai = double(ba[i][2] - ba[i][0]) * (ba[i][3] - ba[i][1]);
      const double aj = double(ba[j][2] - ba[j][0]) * (ba[j][3] - ba[j][1]);
      if (ih * iw / (ai + aj - ih * iw) > threshold) dead[j] = true;
    }
  }
  return keep;
}

TEST(Nms, MatchesTextbookGreedyNmsOnRandomBoxes) {
  at::manual_seed(7);
  const int64_t n = 600;
  const auto lo = at::rand({n, 2});
  const auto b = at::cat({lo, lo + at::rand({n, 2}) * 0.3 + 0.01}, 1);
  const auto s = at::rand({n});
  for (float t : {0.0f, 0.3f, 0.5f, 0.7f, 0.99f})
    EXPECT_EQ(longs(nms(b, s, t)), reference_nms(b, s, t)) << "threshold " << t;
}

TEST(MulticlassNms, PerClassIndependenceAndMerge) {
  // IoU(b0, b1) = 0.225 / 0.275; b2 is apart.
  const auto b = boxes({0, 0, 0.5f, 0.5f, 0, 0.05f, 0.5f, 0.55f, 0.6f, 0.6f, 0.9f, 0.9f});
  const auto s = floats({0.9f, 0.3f,   //
                         0.8f, 0.95f,  //
                         0.1f, 1e-9f})
                     .reshape({3, 2});
  BatchNmsOptions o;  // iou 0.6, score threshold 1e-8
  const auto d = multiclass_nms(b, s, o);
  // Class 1 keeps b0, b2 (b1 suppressed); class 2 keeps b1 (b0 suppressed, b2 under threshold).
  expect_all_near(d.scores, {0.95, 0.9, 0.1});
  EXPECT_EQ(longs(d.classes), (std::vector<int64_t>{2, 1, 1}));
  expect_all_near(d.boxes, {0, 0.05, 0.5, 0.55, 0, 0, 0.5, 0.5, 0.6, 0.6, 0.9, 0.9});

  o.max_total_detections = 2;
  EXPECT_EQ(longs(multiclass_nms(b, s, o).classes), (std::vector<int64_t>{2, 1}));
  o.max_total_detections = 100;
  o.max_detections_per_class = 1;
  const auto one = multiclass_nms(b, s, o);
  expect_all_near(one.scores, {0.95, 0.9});
  EXPECT_EQ(longs(one.classes), (std::vector<int64_t>{2, 1}));
}

TEST(MulticlassNms, ClipsAndDropsBoxesOutsideTheWindow) {
  const auto b = boxes({1.1f, 1.1f, 1.3f, 1.3f,   // outside the image: flat after clipping
                        -0.1f, 0.2f, 0.5f, 1.2f,  // sticks out
                        0.6f, 0.0f, 0.8f, 0.1f});
  const auto s = floats({0.9f, 0.8f, 0.7f}).reshape({3, 1});
  BatchNmsOptions o;
  o.max_total_detections = 2;
  const auto d = multiclass_nms(b, s, o);
  // The dropped box takes no slot of max_total_detections.
  expect_all_near(d.scores, {0.8, 0.7});
  expect_all_near(d.boxes, {0, 0.2, 0.5, 1.0, 0.6, 0, 0.8, 0.1});
  o.clip = false;
  expect_all_near(multiclass_nms(b, s, o).scores, {0.9, 0.8});
  // Empty input.
  const auto e = multiclass_nms(at::zeros({0, 4}), at::zeros({0, 3}), BatchNmsOptions{});
  EXPECT_EQ(e.boxes.sizes(), (at::IntArrayRef{0, 4}));
  EXPECT_EQ(e.classes.numel(), 0);
}

}  // namespace
}  // namespace orchard::detect
