#include "orchard/detect/metrics/coco_eval.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "orchard/core/error.h"
#include "orchard/detect/metrics/coco_mask.h"

namespace orchard {
namespace detect {
namespace {

// Expected values are worked by hand from pycocotools' rules (see the comment on each test).
// A precision of tp / (tp + fp + np.spacing(1)) is within 1e-15 of the exact ratio.
constexpr double kTol = 1e-12;
// Recall reaches 1/2 and stays there with precision 1: the 51 recall points 0, .01, ..., .50
// get 1, the other 50 get 0.
constexpr double kHalfRecallAp = 51.0 / 101.0;

CocoGroundTruth gt(int64_t image, int64_t category, double x, double y, double w, double h, bool crowd = false,
                   double area = -1) {
  CocoGroundTruth g;
  g.image_id = image;
  g.category_id = category;
  g.x = x;
  g.y = y;
  g.w = w;
  g.h = h;
  g.iscrowd = crowd;
  g.area = area;
  return g;
}

CocoDetection det(int64_t image, int64_t category, double x, double y, double w, double h, double score) {
  CocoDetection d;
  d.image_id = image;
  d.category_id = category;
  d.x = x;
  d.y = y;
  d.w = w;
  d.h = h;
  d.score = score;
  return d;
}

void expect_stats(const CocoMetrics& m, const std::array<double, 12>& expected) {
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(m.stats[i], expected[i], kTol) << "stats[" << i << "]";
}

// Boxes by area: 20x20 = 400 is small (< 32²), 50x50 = 2500 medium, 100x100 = 10000 large.
TEST(CocoEval, PerfectDetectionsScoreOneEverywhere) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 10, 10, 20, 20));
  ev.add_ground_truth(gt(2, 1, 0, 0, 50, 50));
  ev.add_ground_truth(gt(3, 1, 0, 0, 100, 100));
  ev.add_detection(det(1, 1, 10, 10, 20, 20, 0.9));
  ev.add_detection(det(2, 1, 0, 0, 50, 50, 0.8));
  ev.add_detection(det(3, 1, 0, 0, 100, 100, 0.7));
  const CocoMetrics m = ev.evaluate();
  expect_stats(m, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  ASSERT_EQ(m.per_category_ap.size(), 1u);
  EXPECT_NEAR(m.per_category_ap.at(1), 1, kTol);
}

// No large object: the large slices have no ground truth and are -1. In the small slice the
// medium ground truth is ignored and so is the detection matched to it.
TEST(CocoEval, AreaRangeWithoutGroundTruthIsMinusOne) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 10, 10, 20, 20));
  ev.add_ground_truth(gt(2, 1, 0, 0, 50, 50));
  ev.add_detection(det(1, 1, 10, 10, 20, 20, 0.9));
  ev.add_detection(det(2, 1, 0, 0, 50, 50, 0.8));
  expect_stats(ev.evaluate(), {1, 1, 1, 1, 1, -1, 1, 1, 1, 1, 1, -1});
}

TEST(CocoEval, NoDetectionsScoreZero) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
  ev.add_image(2);
  expect_stats(ev.evaluate(), {0, 0, 0, -1, 0, -1, 0, 0, 0, -1, 0, -1});
}

TEST(CocoEval, NoGroundTruthIsMinusOne) {
  CocoEvaluator empty;
  EXPECT_EQ(empty.num_images(), 0u);
  expect_stats(empty.evaluate(), {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1});

  CocoEvaluator ev;
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
  const CocoMetrics m = ev.evaluate();
  expect_stats(m, {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1});
  EXPECT_TRUE(m.per_category_ap.empty());
}

// Two medium objects, one found: recall 1/2 with precision 1 at every threshold.
TEST(CocoEval, OneMissedObjectOfTwo) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
  ev.add_ground_truth(gt(1, 1, 100, 100, 50, 50));
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
  const double ap = kHalfRecallAp;
  expect_stats(ev.evaluate(), {ap, ap, ap, -1, ap, -1, 0.5, 0.5, 0.5, -1, 0.5, -1});
}

TEST(CocoEval, DuplicateDetectionIsAFalsePositive) {
  // A lower-scored duplicate comes after the only true positive: the envelope hides it, AP 1.
  {
    CocoEvaluator ev;
    ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
    ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
    ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.8));
    EXPECT_NEAR(ev.evaluate().stats[0], 1, kTol);
  }
  // Two images, one object each. Ranked: A (TP, image 1), A' (duplicate, FP), B (TP, image 2).
  // tp 1 1 2, fp 0 1 1: recall .5 .5 1, precision 1 .5 2/3, envelope 1 2/3 2/3.
  // Recall points 0 .. .50 (51) get 1, .51 .. 1 (50) get 2/3: AP = (51 + 100/3) / 101.
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
  ev.add_ground_truth(gt(2, 1, 0, 0, 50, 50));
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.8));
  ev.add_detection(det(2, 1, 0, 0, 50, 50, 0.7));
  const double ap = 253.0 / 303.0;
  // AR@1 keeps A and B (one per image): recall 1.
  expect_stats(ev.evaluate(), {ap, ap, ap, -1, ap, -1, 1, 1, 1, -1, 1, -1});
}

// IoU exactly 0.6 (60 / 100): a match at the thresholds .50, .55 and .60 (np.linspace gives
// exactly 0.6, and a match needs iou >= threshold), a false positive at the other seven.
TEST(CocoEval, LowIouDetectionCountsAtLowThresholdsOnly) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 10, 10));
  ev.add_detection(det(1, 1, 0, 0, 10, 6, 0.9));
  expect_stats(ev.evaluate(), {0.3, 1, 0, 0.3, -1, -1, 0.3, 0.3, 0.3, 0.3, -1, -1});
}

TEST(CocoEval, MaxDetsLimitRecall) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
  ev.add_ground_truth(gt(1, 1, 100, 100, 50, 50));
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
  ev.add_detection(det(1, 1, 100, 100, 50, 50, 0.8));
  const CocoMetrics m = ev.evaluate();
  EXPECT_NEAR(m.stats[0], 1, kTol);
  EXPECT_NEAR(m.stats[6], 0.5, kTol);  // AR@1: only the top detection of the image
  EXPECT_NEAR(m.stats[7], 1, kTol);
  EXPECT_NEAR(m.stats[8], 1, kTol);
}

// maxDets counts per image and category. 99 false positives then the true positive at rank
// 100: kept, precision 1/100 at full recall, so AP .01 and AR@100 1 (AR@10 0). With one more
// false positive above it, it is cut: AP 0, AR 0. Detections of another category do not count.
TEST(CocoEval, MaxDetsCountPerImageAndCategory) {
  for (int num_fp : {99, 100}) {
    CocoEvaluator ev;
    ev.add_ground_truth(gt(1, 1, 0, 0, 10, 10));
    ev.add_ground_truth(gt(1, 2, 0, 0, 10, 10));
    for (int i = 0; i < num_fp; ++i) {
      ev.add_detection(det(1, 1, 1000 + 20 * i, 0, 10, 10, 0.99 - 0.001 * i));
      ev.add_detection(det(1, 2, 1000 + 20 * i, 0, 10, 10, 0.99 - 0.001 * i));
    }
    ev.add_detection(det(1, 1, 0, 0, 10, 10, 0.001));
    const CocoMetrics m = ev.evaluate();
    const double ap = num_fp == 99 ? 0.01 : 0;
    const double ar = num_fp == 99 ? 1 : 0;
    EXPECT_NEAR(m.per_category_ap.at(1), ap, kTol) << num_fp;
    EXPECT_NEAR(m.per_category_ap.at(2), 0, kTol) << num_fp;
    EXPECT_NEAR(m.stats[7], 0, kTol) << num_fp;
    EXPECT_NEAR(m.stats[8], ar / 2, kTol) << num_fp;  // category 2 has recall 0
  }
}

// A small object S found by D, a large object L missed, and a large false positive F scored
// above D.
//  all:    F (FP), D (TP): recall 0 .5, precision 0 .5, envelope .5 .5: 51 points of .5.
//  small:  F is unmatched and outside the range, so ignored; D is a TP: AP 1, AR 1.
//  medium: both ground truths outside the range: -1.
//  large:  S is ignored, D matches it and is ignored; F is a FP in range: AP 0, AR 0.
//  AR@1:   only F (the top detection) is kept: 0.
TEST(CocoEval, AreaRanges) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 20, 20));
  ev.add_ground_truth(gt(1, 1, 100, 100, 200, 200));
  ev.add_detection(det(1, 1, 400, 400, 150, 150, 0.95));
  ev.add_detection(det(1, 1, 0, 0, 20, 20, 0.9));
  const double ap = 0.5 * kHalfRecallAp;
  expect_stats(ev.evaluate(), {ap, ap, ap, 1, -1, 0, 0, 0.5, 0.5, 1, -1, 0});
}

// The ground truth's `area` field decides its range, not its box: a 20x20 box with area 2000
// is medium.
TEST(CocoEval, GroundTruthAreaFieldDecidesTheRange) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 20, 20, false, 2000));
  ev.add_detection(det(1, 1, 0, 0, 20, 20, 0.9));
  expect_stats(ev.evaluate(), {1, 1, 1, -1, 1, -1, 1, 1, 1, -1, 1, -1});
}

// Two detections inside a crowd region (IoU against a crowd = intersection / detection area
// = 1) are both absorbed by it: no false positive, AP 1. A category whose only ground truth
// is a crowd region has no ground truth to find: -1, and it is left out of the means.
TEST(CocoEval, CrowdRegionAbsorbsDetections) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
  ev.add_ground_truth(gt(1, 1, 200, 200, 100, 100, true));
  ev.add_detection(det(1, 1, 210, 210, 30, 30, 0.95));
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
  ev.add_detection(det(1, 1, 250, 250, 30, 30, 0.85));
  ev.add_ground_truth(gt(1, 2, 0, 0, 50, 50, true));
  ev.add_detection(det(1, 2, 0, 0, 50, 50, 0.9));
  const CocoMetrics m = ev.evaluate();
  // small: the 50x50 object is outside it, and the 30x30 detections are absorbed: -1.
  // AR@1 keeps only the top detection, absorbed by the crowd: recall 0.
  expect_stats(m, {1, 1, 1, -1, 1, -1, 0, 1, 1, -1, 1, -1});
  EXPECT_NEAR(m.per_category_ap.at(1), 1, kTol);
  EXPECT_NEAR(m.per_category_ap.at(2), -1, kTol);
}

// A 100x100 detection half inside a 100x100 crowd region: crowd IoU 5000 / 10000 = .5 (the
// union would give 1/3). At threshold .5 it is absorbed (AP 1); at the nine others it is a FP
// ranked above the one TP: precision 0 then .5, envelope .5, AP .5. Mean (1 + 9 * .5) / 10.
TEST(CocoEval, CrowdIouUsesTheDetectionArea) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
  ev.add_ground_truth(gt(1, 1, 200, 200, 100, 100, true));
  ev.add_detection(det(1, 1, 250, 200, 100, 100, 0.95));
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
  const CocoMetrics m = ev.evaluate();
  EXPECT_NEAR(m.stats[0], 0.55, kTol);
  EXPECT_NEAR(m.stats[1], 1, kTol);
  EXPECT_NEAR(m.stats[2], 0.5, kTol);
  EXPECT_NEAR(m.stats[6], 0, kTol);  // AR@1 keeps only the crowd detection
  EXPECT_NEAR(m.stats[8], 1, kTol);
}

// Equal scores across images keep pycocotools' order: image ids ascending. A false positive
// in image 1 then the true positive in image 2 (of two objects): recall 0 .5, precision 0 .5,
// envelope .5: 51 points of .5. With the false positive in image 3 instead the true positive
// comes first: precision 1 at recall .5: 51 points of 1. Insertion order does not matter.
TEST(CocoEval, ScoreTiesAcrossImagesFollowImageIds) {
  for (int64_t fp_image : {1, 3}) {
    CocoEvaluator ev;
    ev.add_ground_truth(gt(2, 1, 0, 0, 50, 50));
    ev.add_ground_truth(gt(fp_image, 1, 0, 0, 50, 50));
    ev.add_detection(det(2, 1, 0, 0, 50, 50, 0.5));
    ev.add_detection(det(fp_image, 1, 200, 200, 50, 50, 0.5));
    const double expected = fp_image == 1 ? 0.5 * kHalfRecallAp : kHalfRecallAp;
    EXPECT_NEAR(ev.evaluate().stats[0], expected, kTol) << fp_image;
  }
}

// Equal scores within an image keep insertion order (a stable sort). FP then TP on one object:
// recall 0 1, precision 0 .5, envelope .5: AP .5, and AR@1 sees only the FP. TP first: AP 1.
TEST(CocoEval, ScoreTiesWithinAnImageFollowInsertionOrder) {
  for (bool fp_first : {true, false}) {
    CocoEvaluator ev;
    ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
    const CocoDetection fp = det(1, 1, 200, 200, 50, 50, 0.5);
    const CocoDetection tp = det(1, 1, 0, 0, 50, 50, 0.5);
    ev.add_detection(fp_first ? fp : tp);
    ev.add_detection(fp_first ? tp : fp);
    const CocoMetrics m = ev.evaluate();
    EXPECT_NEAR(m.stats[0], fp_first ? 0.5 : 1, kTol) << fp_first;
    EXPECT_NEAR(m.stats[6], fp_first ? 0 : 1, kTol) << fp_first;
  }
}

// Category 1 found perfectly (AP 1); category 2 has two objects, one found (51/101). A
// category-1 detection on category 2's missed object is only a (harmless, last) FP for
// category 1. Detections of a category without ground truth are dropped.
TEST(CocoEval, PerCategoryAp) {
  CocoEvaluator ev;
  ev.add_ground_truth(gt(1, 1, 0, 0, 50, 50));
  ev.add_ground_truth(gt(1, 2, 100, 100, 50, 50));
  ev.add_ground_truth(gt(1, 2, 200, 200, 50, 50));
  ev.add_detection(det(1, 1, 0, 0, 50, 50, 0.9));
  ev.add_detection(det(1, 2, 100, 100, 50, 50, 0.8));
  ev.add_detection(det(1, 1, 200, 200, 50, 50, 0.7));
  ev.add_detection(det(1, 9, 200, 200, 50, 50, 0.99));
  const CocoMetrics m = ev.evaluate();
  ASSERT_EQ(m.per_category_ap.size(), 2u);
  EXPECT_NEAR(m.per_category_ap.at(1), 1, kTol);
  EXPECT_NEAR(m.per_category_ap.at(2), kHalfRecallAp, kTol);
  EXPECT_NEAR(m.stats[0], (1 + kHalfRecallAp) / 2, kTol);
  EXPECT_NEAR(m.stats[8], 0.75, kTol);

  const auto named = m.named({{1, "cat"}});
  ASSERT_EQ(named.size(), 14u);
  EXPECT_EQ(named[12].first, "DetectionBoxes_PerformanceByCategory/mAP/cat");
  EXPECT_NEAR(named[12].second, 1, kTol);
  EXPECT_EQ(named[13].first, "DetectionBoxes_PerformanceByCategory/mAP/2");
}

TEST(CocoEval, NamedFollowsTheObjectDetectionApi) {
  CocoMetrics m;
  for (int i = 0; i < 12; ++i) m.stats[i] = i;
  const auto named = m.named();
  ASSERT_EQ(named.size(), 12u);
  EXPECT_EQ(named[0].first, "DetectionBoxes_Precision/mAP");
  EXPECT_EQ(named[1].first, "DetectionBoxes_Precision/mAP@.50IOU");
  EXPECT_EQ(named[2].first, "DetectionBoxes_Precision/mAP@.75IOU");
  EXPECT_EQ(named[3].first, "DetectionBoxes_Precision/mAP (small)");
  EXPECT_EQ(named[5].first, "DetectionBoxes_Precision/mAP (large)");
  EXPECT_EQ(named[6].first, "DetectionBoxes_Recall/AR@1");
  EXPECT_EQ(named[8].first, "DetectionBoxes_Recall/AR@100");
  EXPECT_EQ(named[10].first, "DetectionBoxes_Recall/AR@100 (medium)");
  EXPECT_EQ(named[11].first, "DetectionBoxes_Recall/AR@100 (large)");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(named[i].second, i);
}

TEST(CocoEval, ImagesMergeAndClear) {
  CocoEvaluator a, b;
  a.add_image(5);
  a.add_ground_truth(gt(5, 1, 0, 0, 50, 50));
  a.add_ground_truth(gt(6, 1, 0, 0, 50, 50));
  b.add_detection(det(5, 1, 0, 0, 50, 50, 0.9));
  b.add_image(7);
  EXPECT_EQ(a.num_images(), 2u);
  a.merge(b);
  EXPECT_EQ(a.num_images(), 3u);
  EXPECT_EQ(a.detections().size(), 1u);
  EXPECT_NEAR(a.evaluate().stats[0], kHalfRecallAp, kTol);
  a.clear();
  EXPECT_EQ(a.num_images(), 0u);
  EXPECT_EQ(a.evaluate().stats[0], -1);
}

TEST(CocoEval, RejectsNonFiniteValues) {
  CocoEvaluator ev;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(ev.add_detection(det(1, 1, 0, 0, 10, 10, nan)), Error);
  EXPECT_THROW(ev.add_ground_truth(gt(1, 1, 0, nan, 10, 10)), Error);
  EXPECT_EQ(ev.num_images(), 0u);
}

// Instance masks (iouType 'segm'). Images are 20x20; masks are made from pixel rectangles.
constexpr int64_t kImageSize = 20;

struct Pixels {
  std::vector<uint8_t> v = std::vector<uint8_t>(kImageSize * kImageSize, 0);
  // Sets (value 1) or clears (0) the rectangle of columns [x, x + w) and rows [y, y + h).
  Pixels& fill(int x, int y, int w, int h, uint8_t value = 1) {
    for (int r = y; r < y + h; ++r)
      for (int c = x; c < x + w; ++c) v[r * kImageSize + c] = value;
    return *this;
  }
  Rle rle() const { return rle_encode(v.data(), kImageSize, kImageSize); }
};

CocoGroundTruth mask_gt(int64_t image, int64_t category, const Pixels& mask, double area, bool crowd = false) {
  CocoGroundTruth g = gt(image, category, 0, 0, 0, 0, crowd, area);
  g.mask = mask.rle();
  return g;
}

CocoDetection mask_det(int64_t image, int64_t category, const Pixels& mask, double score) {
  CocoDetection d = det(image, category, 0, 0, 0, 0, score);
  d.mask = mask.rle();
  return d;
}

// The ground truth is the 10x10 square at (0, 0); the detection is that square less the 8x5 block of columns
// 1-8, rows 2-6, so its tight box is the same square. Mask IoU 60 / 100 = 0.6, exactly the third threshold:
// a match at .50, .55, .60, a false positive at the seven others (as in LowIouDetectionCountsAtLowThresholdsOnly),
// while the box evaluator, given the masks' boxes, sees IoU 1.
TEST(CocoEvalSegm, MaskIouDecidesTheMatch) {
  CocoEvaluator masks(CocoIouType::kSegm), boxes;
  CocoGroundTruth g = mask_gt(1, 1, Pixels().fill(0, 0, 10, 10), 100);
  g.w = g.h = 10;
  CocoDetection d = mask_det(1, 1, Pixels().fill(0, 0, 10, 10).fill(1, 2, 8, 5, 0), 0.9);
  d.w = d.h = 10;
  EXPECT_EQ(rle_area(d.mask), 60u);
  for (CocoEvaluator* ev : {&masks, &boxes}) {
    ev->add_ground_truth(g);
    ev->add_detection(d);
  }
  expect_stats(masks.evaluate(), {0.3, 1, 0, 0.3, -1, -1, 0.3, 0.3, 0.3, 0.3, -1, -1});
  expect_stats(boxes.evaluate(), {1, 1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1});
  // The box evaluator does not keep the masks.
  EXPECT_TRUE(boxes.ground_truths()[0].mask.counts.empty());
  EXPECT_TRUE(boxes.detections()[0].mask.counts.empty());
  EXPECT_EQ(masks.detections()[0].mask.counts, d.mask.counts);
}

// A crowd region (columns 0-9, 200 pixels) and an object (the 5x5 square at (15, 15)). Detection A, the 10x10
// square at (5, 0), has half its pixels in the crowd region: crowd IoU 50 / 100 = .5 (the union would give
// 50 / 250). At .50 it is absorbed and B finds the object: AP 1; at the nine other thresholds A is a false
// positive ranked above B: AP .5. Mean (1 + 9 * .5) / 10 = .55. AR@1 keeps only A: 0.
TEST(CocoEvalSegm, CrowdIouUsesTheDetectionArea) {
  CocoEvaluator ev(CocoIouType::kSegm);
  ev.add_ground_truth(mask_gt(1, 1, Pixels().fill(15, 15, 5, 5), 25));
  ev.add_ground_truth(mask_gt(1, 1, Pixels().fill(0, 0, 10, 20), 200, true));
  ev.add_detection(mask_det(1, 1, Pixels().fill(5, 0, 10, 10), 0.95));
  ev.add_detection(mask_det(1, 1, Pixels().fill(15, 15, 5, 5), 0.9));
  expect_stats(ev.evaluate(), {0.55, 1, 0.5, 0.55, -1, -1, 0, 1, 1, 1, -1, -1});
}

// The area ranges: a ground truth by its `area` field (2000, medium, although its mask has 40 pixels), an
// unmatched detection by its mask's area (4 pixels, small, although its box is 50x50, medium). The false
// positive F scores above the true positive D. all: F then D, precision .5 at full recall: AP .5.
// medium: F is outside the range and ignored: AP 1. small and large: no ground truth, -1.
TEST(CocoEvalSegm, AreaRangesUseTheGroundTruthAreaAndTheDetectionMask) {
  CocoEvaluator ev(CocoIouType::kSegm);
  ev.add_ground_truth(mask_gt(1, 1, Pixels().fill(0, 0, 8, 5), 2000));
  CocoDetection f = mask_det(1, 1, Pixels().fill(15, 15, 2, 2), 0.95);
  f.w = f.h = 50;
  ev.add_detection(f);
  ev.add_detection(mask_det(1, 1, Pixels().fill(0, 0, 8, 5), 0.9));
  expect_stats(ev.evaluate(), {0.5, 0.5, 0.5, -1, 1, -1, 0, 1, 1, -1, 1, -1});
}

// Without an `area`, a ground truth's range comes from its box (w * h), as the OD API exports it: the 20x20
// box is small (400) whatever the mask.
TEST(CocoEvalSegm, MissingGroundTruthAreaUsesTheBox) {
  CocoEvaluator ev(CocoIouType::kSegm);
  CocoGroundTruth g = mask_gt(1, 1, Pixels().fill(0, 0, 20, 20), -1);
  g.w = g.h = 20;
  ev.add_ground_truth(g);
  ev.add_detection(mask_det(1, 1, Pixels().fill(0, 0, 20, 20), 0.9));
  expect_stats(ev.evaluate(), {1, 1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1});
}

// One object in each of two images, both found: A (.6) in image 1, B (.8) in image 2, and a copy of B in image 2.
// Within its image the copy comes after B, so it is the false positive whatever its score. Scored .5, it ranks
// last: AP 1. Scored .7, between B and A: tp 1 1 2, fp 0 1 1, recall .5 .5 1, precision 1 .5 2/3, envelope
// 1 2/3 2/3: AP (51 + 100/3) / 101, as in DuplicateDetectionIsAFalsePositive.
TEST(CocoEvalSegm, DuplicateMaskIsAFalsePositive) {
  for (double copy_score : {0.5, 0.7}) {
    CocoEvaluator ev(CocoIouType::kSegm);
    ev.add_ground_truth(mask_gt(1, 1, Pixels().fill(0, 0, 5, 5), 25));
    ev.add_ground_truth(mask_gt(2, 1, Pixels().fill(3, 3, 6, 4), 24));
    ev.add_detection(mask_det(1, 1, Pixels().fill(0, 0, 5, 5), 0.6));
    ev.add_detection(mask_det(2, 1, Pixels().fill(3, 3, 6, 4), 0.8));
    ev.add_detection(mask_det(2, 1, Pixels().fill(3, 3, 6, 4), copy_score));
    const CocoMetrics m = ev.evaluate();
    const double ap = copy_score < 0.6 ? 1 : 253.0 / 303.0;
    EXPECT_NEAR(m.stats[0], ap, kTol) << copy_score;
    EXPECT_NEAR(m.stats[8], 1, kTol) << copy_score;
  }
}

TEST(CocoEvalSegm, NamedFollowsTheObjectDetectionApiMaskEvaluator) {
  CocoEvaluator ev(CocoIouType::kSegm);
  EXPECT_EQ(ev.iou_type(), CocoIouType::kSegm);
  ev.add_ground_truth(mask_gt(1, 3, Pixels().fill(0, 0, 5, 5), 25));
  ev.add_detection(mask_det(1, 3, Pixels().fill(0, 0, 5, 5), 0.9));
  const CocoMetrics m = ev.evaluate();
  EXPECT_EQ(m.iou_type, CocoIouType::kSegm);
  const auto named = m.named({{3, "person"}});
  ASSERT_EQ(named.size(), 13u);
  const char* const expected[12] = {
      "DetectionMasks_Precision/mAP",
      "DetectionMasks_Precision/mAP@.50IOU",
      "DetectionMasks_Precision/mAP@.75IOU",
      "DetectionMasks_Precision/mAP (small)",
      "DetectionMasks_Precision/mAP (medium)",
      "DetectionMasks_Precision/mAP (large)",
      "DetectionMasks_Recall/AR@1",
      "DetectionMasks_Recall/AR@10",
      "DetectionMasks_Recall/AR@100",
      "DetectionMasks_Recall/AR@100 (small)",
      "DetectionMasks_Recall/AR@100 (medium)",
      "DetectionMasks_Recall/AR@100 (large)",
  };
  for (int i = 0; i < 12; ++i) EXPECT_EQ(named[i].first, expected[i]);
  EXPECT_EQ(named[12].first, "DetectionMasks_PerformanceByCategory/mAP/person");
  EXPECT_NEAR(named[12].second, 1, kTol);
}

TEST(CocoEvalSegm, RejectsMissingOrMismatchedMasks) {
  CocoEvaluator ev(CocoIouType::kSegm);
  EXPECT_THROW(ev.add_ground_truth(gt(1, 1, 0, 0, 10, 10)), Error);     // no mask
  EXPECT_THROW(ev.add_detection(det(1, 1, 0, 0, 10, 10, 0.5)), Error);  // no mask
  CocoDetection bad = mask_det(1, 1, Pixels().fill(0, 0, 5, 5), 0.5);
  bad.mask.counts.pop_back();
  EXPECT_THROW(ev.add_detection(bad), Error);  // counts do not add up to 20 x 20
  EXPECT_EQ(ev.num_images(), 0u);

  ev.add_ground_truth(mask_gt(1, 1, Pixels().fill(0, 0, 5, 5), 25));
  CocoDetection small = det(1, 1, 0, 0, 0, 0, 0.5);
  const std::vector<uint8_t> pixels(100, 1);
  small.mask = rle_encode(pixels.data(), 10, 10);
  ev.add_detection(small);
  EXPECT_THROW(ev.evaluate(), Error);

  CocoEvaluator boxes;
  EXPECT_THROW(boxes.merge(ev), Error);
}

TEST(CocoEvalSegm, MergeKeepsTheMasks) {
  CocoEvaluator a(CocoIouType::kSegm), b(CocoIouType::kSegm);
  a.add_ground_truth(mask_gt(1, 1, Pixels().fill(0, 0, 5, 5), 25));
  a.add_ground_truth(mask_gt(2, 1, Pixels().fill(0, 0, 5, 5), 25));
  b.add_detection(mask_det(1, 1, Pixels().fill(0, 0, 5, 5), 0.9));
  a.merge(b);
  EXPECT_NEAR(a.evaluate().stats[0], kHalfRecallAp, kTol);
}

// tests/fixtures/coco_mask/segm_eval.txt: a random data set with polygons, crowd RLEs and detection RLEs, and
// what the real pycocotools COCOeval(iouType='segm') computes on it (see the README there). Ground truths go
// through rle_from_polygon + rle_merge as annToRLE takes them.
TEST(CocoEvalSegm, AgreesWithPycocotools) {
  std::ifstream file(ORCHARD_TEST_FIXTURES "/coco_mask/segm_eval.txt");
  ASSERT_TRUE(file) << "missing fixture";
  auto number = [](std::istringstream& in) {
    std::string token;
    in >> token;
    return std::strtod(token.c_str(), nullptr);
  };
  CocoEvaluator ev(CocoIouType::kSegm);
  std::map<int64_t, std::pair<int64_t, int64_t>> sizes;
  std::vector<double> expected_stats;
  std::map<int64_t, double> expected_ap;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "image") {
      int64_t id = 0, h = 0, w = 0;
      in >> id >> h >> w;
      sizes[id] = {h, w};
      ev.add_image(id);
    } else if (kind == "gtp" || kind == "gtr") {
      CocoGroundTruth g;
      int crowd = 0;
      in >> g.image_id >> g.category_id >> crowd;
      g.iscrowd = crowd != 0;
      g.area = number(in);
      const auto [h, w] = sizes.at(g.image_id);
      size_t n = 0;
      in >> n;
      if (kind == "gtp") {
        std::vector<Rle> parts;
        for (size_t i = 0; i < n; ++i) {
          size_t k = 0;
          in >> k;
          std::vector<double> xy(k);
          for (double& v : xy) v = number(in);
          parts.push_back(rle_from_polygon(xy, h, w));
        }
        g.mask = rle_merge(parts);
      } else {
        g.mask.h = h;
        g.mask.w = w;
        g.mask.counts.resize(n);
        for (uint32_t& c : g.mask.counts) in >> c;
      }
      ev.add_ground_truth(g);
    } else if (kind == "dt") {
      CocoDetection d;
      in >> d.image_id >> d.category_id;
      d.score = number(in);
      std::string counts;
      in >> counts;
      const auto [h, w] = sizes.at(d.image_id);
      d.mask = rle_from_string(counts == "-" ? "" : counts, h, w);
      ev.add_detection(d);
    } else {
      ASSERT_EQ(kind, "expect") << line;
      std::string what;
      in >> what;
      if (what == "stats") {
        for (int i = 0; i < 12; ++i) expected_stats.push_back(number(in));
      } else {
        int64_t id = 0;
        in >> id;
        expected_ap[id] = number(in);
      }
    }
  }
  ASSERT_EQ(expected_stats.size(), 12u);
  EXPECT_EQ(ev.num_images(), 10u);
  const CocoMetrics m = ev.evaluate();
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(m.stats[i], expected_stats[i], kTol) << "stats[" << i << "]";
  // pycocotools also lists category 8, which has detections but no ground truth: -1.
  for (const auto& [id, ap] : expected_ap) {
    if (ap == -1) {
      EXPECT_EQ(m.per_category_ap.count(id), 0u) << id;
      continue;
    }
    ASSERT_EQ(m.per_category_ap.count(id), 1u) << id;
    EXPECT_NEAR(m.per_category_ap.at(id), ap, kTol) << id;
  }
}

// Not a test: the evaluate() time for a COCO-val-sized case (5000 images, 80 categories,
// about 7 objects and 100 detections per image). Run with --gtest_also_run_disabled_tests.
TEST(CocoEval, DISABLED_Timing5000Images) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int> category(1, 80);
  CocoEvaluator ev;
  for (int64_t image = 1; image <= 5000; ++image) {
    std::vector<CocoGroundTruth> objects;
    const int num_objects = 1 + static_cast<int>(unit(rng) * 13);
    for (int i = 0; i < num_objects; ++i) {
      const double w = 5 + unit(rng) * 300, h = 5 + unit(rng) * 300;
      objects.push_back(gt(image, category(rng), unit(rng) * 340, unit(rng) * 340, w, h, unit(rng) < 0.01));
      ev.add_ground_truth(objects.back());
    }
    for (int i = 0; i < 100; ++i) {
      if (i < 3 * num_objects) {
        const CocoGroundTruth& o = objects[i % num_objects];
        const double j = 0.3 * unit(rng);
        ev.add_detection(det(image, unit(rng) < 0.8 ? o.category_id : category(rng), o.x + (unit(rng) - 0.5) * j * o.w,
                             o.y + (unit(rng) - 0.5) * j * o.h, o.w * (1 + (unit(rng) - 0.5) * j),
                             o.h * (1 + (unit(rng) - 0.5) * j), unit(rng)));
      } else {
        ev.add_detection(det(image, category(rng), unit(rng) * 600, unit(rng) * 600, 5 + unit(rng) * 200,
                             5 + unit(rng) * 200, 0.5 * unit(rng)));
      }
    }
  }
  const std::clock_t cpu_start = std::clock();
  const auto start = std::chrono::steady_clock::now();
  const CocoMetrics m = ev.evaluate();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  std::printf("evaluate(): %zu images, %zu ground truths, %zu detections: %.3f s wall, %.3f s cpu\n", ev.num_images(),
              ev.ground_truths().size(), ev.detections().size(), seconds, cpu_seconds);
  for (const auto& [name, value] : m.named()) std::printf("  %s = %.4f\n", name.c_str(), value);
}

}  // namespace
}  // namespace detect
}  // namespace orchard
