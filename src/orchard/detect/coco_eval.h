// COCO box detection metrics, computed as pycocotools' COCOeval(iouType='bbox') does:
// evaluate() + accumulate() + summarize() with the default parameters, in plain C++.
//
// Boxes are [x, y, w, h] in absolute pixels, (x, y) the top-left corner, as in COCO json and
// COCO results files. IoU is maskUtils.iou for boxes: no +1 on widths, and against a crowd
// ground truth the denominator is the detection's area (the part of the detection inside the
// crowd region).
//
// Fixed parameters (pycocotools Params.setDetParams; summarize() is only defined for them):
//   IoU thresholds  np.linspace(.5, .95, 10)   (so the 9th is 0.8999999999999999)
//   recall points   np.linspace(0, 1, 101)
//   maxDets         1, 10, 100, per image *and category*
//   area ranges     all [0, 1e10], small [0, 32²], medium [32², 96²], large [96², 1e10],
//                   both ends inclusive
//
// Ties: detections are ordered by score with a stable sort over the order pycocotools sees:
// image ids ascending, then the order in which detections were added. Among ground truths of
// one image and category, insertion order decides which of two equal-IoU matches wins.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace orchard {
namespace detect {

struct CocoGroundTruth {
  int64_t image_id = 0;
  int64_t category_id = 0;
  double x = 0, y = 0, w = 0, h = 0;
  // The annotation's `area` (for COCO json, the segmentation area), used for the area ranges.
  // Negative: not given, w * h is used. The IoU always uses the box.
  double area = -1;
  // Crowd regions are ignored: a detection matched to one is neither a TP nor a FP, and one
  // crowd region can absorb any number of detections.
  bool iscrowd = false;
};

struct CocoDetection {
  int64_t image_id = 0;
  int64_t category_id = 0;
  double x = 0, y = 0, w = 0, h = 0;
  double score = 0;
};

struct CocoMetrics {
  // pycocotools summarize() order: AP@[.5:.95], AP@.5, AP@.75, AP small/medium/large,
  // AR@1, AR@10, AR@100, AR@100 small/medium/large. -1 where the slice has no ground truth.
  std::array<double, 12> stats{};
  // AP@[.5:.95], all areas, 100 detections, per category id (the OD API's
  // PerformanceByCategory/mAP). -1 for a category whose ground truths are all crowd.
  std::map<int64_t, double> per_category_ap;

  // The TF OD API names of `stats`, in the same order: DetectionBoxes_Precision/mAP, ...,
  // DetectionBoxes_Recall/AR@100 (large).
  std::vector<std::pair<std::string, double>> named() const;
  // The same, followed by DetectionBoxes_PerformanceByCategory/mAP/<name> for every category
  // in per_category_ap (ascending id); a category missing from `category_names` is named by
  // its id.
  std::vector<std::pair<std::string, double>> named(const std::map<int64_t, std::string>& category_names) const;
};

// Collects ground truth and detections, then computes the metrics in one pass.
//
// Categories evaluated: every category id that has at least one ground truth. pycocotools
// uses the ground-truth dataset's category list instead; the 12 stats are the same either way
// (a category without ground truth is -1 in every cell and left out of the means), only
// per_category_ap has no entry for such a category. Detections of such categories are dropped.
//
// Not thread-safe; evaluate() does not change the collected data.
class CocoEvaluator {
 public:
  // Images are registered explicitly so that an image with neither ground truth nor detections
  // still counts (pycocotools' imgIds). Registering twice is harmless.
  void add_image(int64_t image_id);
  // Registers the image too. Throws orchard::Error on a non-finite coordinate or area.
  void add_ground_truth(const CocoGroundTruth& gt);
  // Registers the image too. Throws orchard::Error on a non-finite coordinate or score.
  void add_detection(const CocoDetection& det);
  // Appends everything `other` collected (for evaluation split over workers); `other`'s
  // detections come after this one's in the tie-breaking order.
  void merge(const CocoEvaluator& other);
  void clear();

  CocoMetrics evaluate() const;

  size_t num_images() const { return image_ids_.size(); }
  const std::vector<CocoGroundTruth>& ground_truths() const { return gts_; }
  const std::vector<CocoDetection>& detections() const { return dets_; }

 private:
  std::unordered_set<int64_t> image_ids_;
  std::vector<CocoGroundTruth> gts_;
  std::vector<CocoDetection> dets_;
};

}  // namespace detect
}  // namespace orchard
