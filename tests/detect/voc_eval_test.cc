#include "orchard/detect/metrics/voc_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

// Expected values are worked by hand from the OD API's per_image_evaluation and
// metrics.compute_average_precision (the rule is written above each test).
constexpr double kTol = 1e-12;

VocGroundTruth box(double ymin, double xmin, double ymax, double xmax, int64_t category, bool difficult = false,
                   bool group_of = false) {
  VocGroundTruth g;
  g.ymin = ymin, g.xmin = xmin, g.ymax = ymax, g.xmax = xmax;
  g.category_id = category;
  g.difficult = difficult;
  g.group_of = group_of;
  return g;
}

VocDetection det(double ymin, double xmin, double ymax, double xmax, int64_t category, double score) {
  VocDetection d;
  d.ymin = ymin, d.xmin = xmin, d.ymax = ymax, d.xmax = xmax;
  d.category_id = category;
  d.score = score;
  return d;
}

VocMetricsOptions pascal() { return VocMetricsOptions::for_metrics_set("pascal_voc_detection_metrics"); }

// tp, fp (a second detection of a taken box), tp over 2 boxes: precision 1, 1/2, 2/3 at recall
// 1/2, 1/2, 1; the envelope is 1 up to recall 1/2, then 2/3: AP = 1/2 + 1/2 * 2/3 = 5/6.
TEST(VocEval, DuplicateDetectionIsAFalsePositive) {
  VocEvaluator e(1, pascal());
  e.add_ground_truth(7, {box(0, 0, 10, 10, 1), box(20, 20, 30, 30, 1)});
  e.add_detections(7, {det(0, 0, 10, 10, 1, 0.9), det(0, 0, 10, 10, 1, 0.8), det(20, 20, 30, 30, 1, 0.7)});
  const auto m = e.evaluate();
  EXPECT_NEAR(m.per_class_ap[0], 5.0 / 6.0, kTol);
  EXPECT_NEAR(m.mean_ap, 5.0 / 6.0, kTol);
}

// IoU exactly 0.5 (100 / 200) matches: `>=` the threshold.
TEST(VocEval, IouAtTheThresholdMatches) {
  VocEvaluator e(1, pascal());
  e.add_ground_truth(1, {box(0, 0, 10, 10, 1)});
  e.add_detections(1, {det(0, 0, 10, 20, 1, 0.5)});
  EXPECT_NEAR(e.evaluate().mean_ap, 1.0, kTol);
}

// A detection on a difficult box is neither a TP nor a FP and the box is not counted:
// entries fp (0.8), tp (0.7) over 1 box -> precision 1/2 at recall 1 -> AP 1/2. Without the
// flag the same detections are tp, fp, tp over 2 boxes: 5/6.
TEST(VocEval, DifficultBoxesAreIgnored) {
  for (bool difficult : {true, false}) {
    VocEvaluator e(1, pascal());
    e.add_ground_truth(1, {box(0, 0, 10, 10, 1), box(50, 50, 60, 60, 1, difficult)});
    e.add_detections(1, {det(50, 50, 60, 60, 1, 0.9), det(80, 80, 90, 90, 1, 0.8), det(0, 0, 10, 10, 1, 0.7)});
    EXPECT_NEAR(e.evaluate().mean_ap, difficult ? 0.5 : 5.0 / 6.0, kTol) << difficult;
  }
}

// Open Images V2 (group_of_weight 0): detections inside a group-of box (IoA >= 0.5) are
// ignored and the box does not count: left are tp (0.7) and fp (0.6) over 1 box: AP 1.
// The challenge (weight 1): the group-of box counts, and one entry of weight 1 with the best
// score of its detections (0.9) is added: 0.9 tp, 0.7 tp, 0.6 fp over 2 boxes: AP 1. Without
// the detection of the ordinary box: V2 has only a fp (AP 0), the challenge 0.9 tp, 0.6 fp
// over 2 boxes: precision 1 at recall 1/2: AP 1/2.
TEST(VocEval, GroupOfBoxes) {
  const std::vector<VocGroundTruth> gt{box(0, 0, 100, 100, 1, false, true), box(200, 200, 210, 210, 1)};
  const std::vector<VocDetection> inside{det(10, 10, 20, 20, 1, 0.9), det(30, 30, 60, 60, 1, 0.8),
                                         det(300, 300, 310, 310, 1, 0.6)};
  for (bool with_tp : {true, false}) {
    auto dets = inside;
    if (with_tp) dets.push_back(det(200, 200, 210, 210, 1, 0.7));
    VocEvaluator v2(1, VocMetricsOptions::for_metrics_set("oid_V2_detection_metrics"));
    v2.add_ground_truth(1, gt);
    v2.add_detections(1, dets);
    EXPECT_NEAR(v2.evaluate().mean_ap, with_tp ? 1.0 : 0.0, kTol) << with_tp;
    VocEvaluator challenge(1, VocMetricsOptions::for_metrics_set("oid_challenge_detection_metrics"));
    challenge.add_ground_truth(1, gt);
    challenge.add_detections(1, dets);
    EXPECT_NEAR(challenge.evaluate().mean_ap, with_tp ? 1.0 : 0.5, kTol) << with_tp;
  }
}

// The challenge evaluates a class on an image only where the image's verified labels or boxes
// name it: the false positive of class 2 on image 1 (labels {1}) is dropped there, so class 2
// keeps AP 1; Open Images V2 counts it (fp 0.9 before tp 0.8: precision 1/2 at recall 1).
TEST(VocEval, ChallengeEvaluatesOnlyVerifiedClasses) {
  auto run = [](const std::string& set) {
    VocEvaluator e(2, VocMetricsOptions::for_metrics_set(set));
    e.add_ground_truth(1, {box(0, 0, 10, 10, 1)});
    e.add_ground_truth(2, {box(0, 0, 10, 10, 2)});
    e.add_detections(1, {det(0, 0, 10, 10, 1, 0.9), det(40, 40, 50, 50, 2, 0.9)});
    e.add_detections(2, {det(0, 0, 10, 10, 2, 0.8)});
    return e.evaluate();
  };
  EXPECT_NEAR(run("oid_challenge_detection_metrics").per_class_ap[1], 1.0, kTol);
  EXPECT_NEAR(run("oid_V2_detection_metrics").per_class_ap[1], 0.5, kTol);
}

// eval_config.image_classes_field_map_empty_to_ones: image 1 has no verified labels (an empty
// image/class/label) and one box of class 1. Mapped to all ones (the proto's default), every
// class is verified there, so its class-2 detection (0.9) is a false positive before image 2's
// true positive (0.8): class 2's AP 1/2. Not mapped (ssd_mobilenet_v2_oid_v4's `false`), only
// class 1 is evaluated on image 1 and class 2 keeps AP 1. Labels that are given are used either
// way (image 3: {1}, so its class-2 detection is dropped), and the option is the challenge's only.
TEST(VocEval, ChallengeEmptyImageLabelsMeanEveryClassWhenMapped) {
  auto run = [](const std::string& set, bool empty_means_all) {
    VocMetricsOptions options = VocMetricsOptions::for_metrics_set(set);
    options.empty_image_labels_mean_all = empty_means_all;
    VocEvaluator e(2, options);
    e.add_ground_truth(1, {box(0, 0, 10, 10, 1)}, /*image_labels=*/{});
    e.add_ground_truth(2, {box(0, 0, 10, 10, 2)}, {2});
    e.add_ground_truth(3, {}, {1});
    e.add_detections(1, {det(0, 0, 10, 10, 1, 0.95), det(40, 40, 50, 50, 2, 0.9)});
    e.add_detections(2, {det(0, 0, 10, 10, 2, 0.8)});
    e.add_detections(3, {det(0, 0, 10, 10, 2, 0.85)});
    return e.evaluate();
  };
  EXPECT_NEAR(run("oid_challenge_detection_metrics", true).per_class_ap[1], 0.5, kTol);
  EXPECT_NEAR(run("oid_challenge_detection_metrics", true).mean_ap, 0.75, kTol);
  EXPECT_NEAR(run("oid_challenge_detection_metrics", false).per_class_ap[1], 1.0, kTol);
  EXPECT_NEAR(run("oid_challenge_detection_metrics", false).per_class_ap[0], 1.0, kTol);
  // Open Images V2 has no image labels: every detection counts (fp 0.9, fp 0.85, tp 0.8: 1/3).
  EXPECT_NEAR(run("oid_V2_detection_metrics", true).per_class_ap[1], 1.0 / 3.0, kTol);
  EXPECT_NEAR(run("oid_V2_detection_metrics", false).per_class_ap[1], 1.0 / 3.0, kTol);
}

// Per class: class 1 tp (AP 1); class 2 fp 0.8 then tp 0.7 (AP 1/2): mAP 3/4. Weighted pools
// the entries: 0.9 tp, 0.8 fp, 0.7 tp over 2 boxes: 5/6.
TEST(VocEval, WeightedPoolsTheClasses) {
  for (const std::string set : {"pascal_voc_detection_metrics", "weighted_pascal_voc_detection_metrics"}) {
    VocEvaluator e(3, VocMetricsOptions::for_metrics_set(set));
    e.add_ground_truth(1, {box(0, 0, 10, 10, 1), box(20, 20, 30, 30, 2)});
    e.add_detections(1, {det(0, 0, 10, 10, 1, 0.9), det(50, 50, 60, 60, 2, 0.8), det(20, 20, 30, 30, 2, 0.7)});
    const auto m = e.evaluate();
    EXPECT_NEAR(m.per_class_ap[0], 1.0, kTol);
    EXPECT_NEAR(m.per_class_ap[1], 0.5, kTol);
    EXPECT_TRUE(std::isnan(m.per_class_ap[2]));  // no ground truth: NaN, left out of the mean
    EXPECT_NEAR(m.mean_ap, set[0] == 'w' ? 5.0 / 6.0 : 0.75, kTol) << set;
  }
}

// numpy's argsort(scores)[::-1] orders equal scores later-first, and the evaluation sorts
// twice (the per-image sort, then precision/recall over the entries it produced), so equal
// scores of one image end in the order they were given: fp, tp over 1 box -> precision 1/2 at
// recall 1 -> AP 1/2. An invalid detection (ymin == ymax) is dropped before anything else, even
// on the box.
TEST(VocEval, TiesAndInvalidBoxes) {
  VocEvaluator e(1, pascal());
  e.add_ground_truth(1, {box(0, 0, 10, 10, 1)});
  e.add_detections(1, {det(5, 0, 5, 10, 1, 0.99), det(80, 80, 90, 90, 1, 0.5), det(0, 0, 10, 10, 1, 0.5)});
  EXPECT_NEAR(e.evaluate().mean_ap, 0.5, kTol);
}

// Images without detections still count their boxes; detections on an image without ground
// truth are false positives; a second add for an image is ignored.
TEST(VocEval, ImagesWithoutDetectionsOrGroundTruth) {
  VocEvaluator e(1, pascal());
  e.add_ground_truth(1, {box(0, 0, 10, 10, 1)});
  e.add_ground_truth(2, {box(0, 0, 10, 10, 1)});
  e.add_ground_truth(2, {});  // ignored
  e.add_detections(1, {det(0, 0, 10, 10, 1, 0.9)});
  e.add_detections(1, {det(50, 50, 60, 60, 1, 0.95)});  // ignored
  e.add_detections(3, {det(0, 0, 10, 10, 1, 0.8)});
  // tp 0.9, fp 0.8 over 2 boxes: precision 1 at recall 1/2: AP 1/2.
  EXPECT_NEAR(e.evaluate().mean_ap, 0.5, kTol);
}

// A random case (3 images, 2 classes, a difficult and a group-of box, no tied scores), with the
// values the OD API's own per_image_evaluation + metrics (numpy) give for it, run outside the
// suite: 1000 such random cases agreed to 1e-12 (docs/detect.md).
TEST(VocEval, AgreesWithTheObjectDetectionApi) {
  struct Case {
    std::vector<std::vector<double>> gt, det;
  };
  const std::vector<Case> images{
      {{{28, 55, 68, 89, 2, 0, 0}, {32, 54, 49, 70, 2, 0, 0}, {40, 39, 56, 50, 2, 0, 0}, {19, 9, 29, 48, 1, 1, 0}},
       {{21, 14, 33, 53, 1, 0.6231},
        {4, 3, 9, 18, 1, 0.5996},
        {20, 28, 60, 43, 1, 0.6403},
        {30, 60, 67, 90, 1, 0.7078},
        {35, 53, 44, 66, 1, 0.4004},
        {24, 4, 28, 7, 1, 0.2097}}},
      {{{58, 3, 93, 32, 2, 0, 0}, {26, 4, 43, 26, 2, 0, 0}, {5, 19, 31, 24, 2, 0, 1}, {48, 59, 60, 72, 1, 0, 0}},
       {{0, 3, 32, 37, 1, 0.6821},
        {23, 5, 48, 27, 1, 0.3949},
        {0, 17, 40, 39, 1, 0.2107},
        {53, 0, 91, 34, 2, 0.0096},
        {53, 18, 80, 25, 1, 0.0901},
        {21, 8, 43, 26, 2, 0.1272}}},
      {{{37, 30, 50, 59, 1, 0, 0}, {40, 9, 64, 28, 1, 0, 0}, {46, 12, 61, 52, 1, 0, 0}, {43, 60, 72, 95, 1, 0, 0}},
       {{33, 25, 53, 58, 1, 0.7398},
        {47, 62, 71, 98, 1, 0.9292},
        {8, 14, 41, 52, 1, 0.2802},
        {13, 47, 17, 54, 2, 0.4114},
        {34, 29, 50, 62, 1, 0.0922},
        {43, 65, 75, 99, 1, 0.5899}}},
  };
  struct Expected {
    bool weighted;
    double group_of_weight, mean_ap, ap1, ap2;
  };
  for (const Expected& x : {Expected{false, 0.0, 0.33333333333333337, 0.4, 0.26666666666666666},
                            Expected{false, 1.0, 0.3111111111111111, 0.4, 0.2222222222222222},
                            Expected{true, 0.0, 0.24444444444444446, 0.4, 0.26666666666666666}}) {
    VocMetricsOptions o;
    o.use_weighted_mean_ap = x.weighted;
    o.group_of_weight = x.group_of_weight;
    o.use_difficult = o.use_group_of = true;
    VocEvaluator e(2, o);
    int64_t id = 0;
    for (const auto& image : images) {
      std::vector<VocGroundTruth> gt;
      for (const auto& r : image.gt)
        gt.push_back(box(r[0], r[1], r[2], r[3], static_cast<int64_t>(r[4]), r[5] != 0, r[6] != 0));
      std::vector<VocDetection> dets;
      for (const auto& r : image.det) dets.push_back(det(r[0], r[1], r[2], r[3], static_cast<int64_t>(r[4]), r[5]));
      e.add_ground_truth(id, gt);
      e.add_detections(id++, dets);
    }
    const auto m = e.evaluate();
    EXPECT_NEAR(m.mean_ap, x.mean_ap, kTol) << x.weighted << " " << x.group_of_weight;
    EXPECT_NEAR(m.per_class_ap[0], x.ap1, kTol);
    EXPECT_NEAR(m.per_class_ap[1], x.ap2, kTol);
  }
}

TEST(VocEval, NamesAsTheObjectDetectionApi) {
  VocEvaluator e(2, VocMetricsOptions::for_metrics_set("open_images_V2_detection_metrics"));
  e.add_ground_truth(1, {box(0, 0, 10, 10, 1)});
  e.add_detections(1, {det(0, 0, 10, 10, 1, 0.9)});
  const auto named = e.evaluate().named(VocMetricsOptions::for_metrics_set("oid_V2_detection_metrics"), {"cat"});
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].first, "OpenImagesV2_Precision/mAP@0.5IOU");
  EXPECT_EQ(named[1].first, "OpenImagesV2_PerformanceByCategory/AP@0.5IOU/cat");
  EXPECT_EQ(named[2].first, "OpenImagesV2_PerformanceByCategory/AP@0.5IOU/2");
  // faster_rcnn_inception_resnet_v2_atrous_oid names the 2017 OD API's key of the same evaluator.
  EXPECT_TRUE(VocMetricsOptions::is_metrics_set("open_images_metrics"));
  EXPECT_EQ(VocMetricsOptions::for_metrics_set("open_images_metrics").prefix, "OpenImagesV2");
  EXPECT_TRUE(VocMetricsOptions::for_metrics_set("open_images_metrics").use_group_of);
  EXPECT_NEAR(named[0].second, 1.0, kTol);
  EXPECT_THROW(VocMetricsOptions::for_metrics_set("coco_detection_metrics"), Error);
  EXPECT_THROW(e.add_detections(5, {det(0, 0, NAN, 1, 1, 0.5)}), Error);
}

}  // namespace
}  // namespace orchard::detect
