// COCO detection metrics, computed as pycocotools' COCOeval does for iouType 'bbox' (boxes) or 'segm'
// (instance masks): evaluate() + accumulate() + summarize() with the default parameters, in plain C++.
//
// Boxes are [x, y, w, h] in absolute pixels, (x, y) the top-left corner, as in COCO json and
// COCO results files. IoU is maskUtils.iou for boxes: no +1 on widths, and against a crowd
// ground truth the denominator is the detection's area (the part of the detection inside the
// crowd region). Masks are run-length encoded (coco_mask.h) over the whole image; their IoU is
// maskUtils.iou for RLEs (rle_iou), with the same crowd rule.
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
//
// Boxes and masks are evaluated by two evaluators, as the TF OD API's CocoDetectionEvaluator and
// CocoMaskEvaluator do: give both the same ground truths and detections (a box evaluator ignores
// and drops the masks; a mask evaluator ignores the detection boxes).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "orchard/detect/metrics/coco_mask.h"

namespace orchard {
namespace detect {

// pycocotools' iouType: what the IoU of a detection and a ground truth is computed on.
enum class CocoIouType {
  kBbox,  // the boxes (x, y, w, h)
  kSegm,  // the masks (`mask`)
};

struct CocoGroundTruth {
  int64_t image_id = 0;
  int64_t category_id = 0;
  double x = 0, y = 0, w = 0, h = 0;
  // The annotation's `area` (for COCO json, the segmentation area), used for the area ranges by
  // both evaluators. Negative: not given, w * h of the box is used (the OD API's
  // ExportSingleImageGroundtruthToCoco does the same for masks too); the mask's own area is never
  // used for a ground truth.
  double area = -1;
  // Crowd regions are ignored: a detection matched to one is neither a TP nor a FP, and one
  // crowd region can absorb any number of detections.
  bool iscrowd = false;
  // kSegm only: the instance mask over the whole image ([h, w] of the image, COCO's `segmentation`
  // as an RLE; polygons go through rle_from_polygon + rle_merge first). Required there.
  Rle mask;
};

struct CocoDetection {
  int64_t image_id = 0;
  int64_t category_id = 0;
  // kBbox: the box. kSegm: unused (may stay 0).
  double x = 0, y = 0, w = 0, h = 0;
  double score = 0;
  // kSegm only: the predicted mask over the whole image, of the same size as the ground truths' masks
  // of its image. Required there. Its area (rle_area, as loadRes computes it) places an unmatched
  // detection in or out of an area range.
  Rle mask;
};

struct CocoMetrics {
  // pycocotools summarize() order: AP@[.5:.95], AP@.5, AP@.75, AP small/medium/large,
  // AR@1, AR@10, AR@100, AR@100 small/medium/large. -1 where the slice has no ground truth.
  std::array<double, 12> stats{};
  // AP@[.5:.95], all areas, 100 detections, per category id (the OD API's
  // PerformanceByCategory/mAP). -1 for a category whose ground truths are all crowd.
  std::map<int64_t, double> per_category_ap;
  // What was evaluated; decides the names' prefix.
  CocoIouType iou_type = CocoIouType::kBbox;

  // The TF OD API names of `stats`, in the same order: DetectionBoxes_Precision/mAP, ...,
  // DetectionBoxes_Recall/AR@100 (large) for boxes; DetectionMasks_Precision/mAP, ... for masks
  // (the OD API's CocoMaskEvaluator).
  std::vector<std::pair<std::string, double>> named() const;
  // The same, followed by DetectionBoxes_PerformanceByCategory/mAP/<name> (DetectionMasks_... for
  // masks) for every category in per_category_ap (ascending id); a category missing from
  // `category_names` is named by its id.
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
//
// For masks (CocoIouType::kSegm) a caller passes, per ground truth: image_id, category_id, mask,
// iscrowd, and area (or a box, whose w * h stands in for a missing area); per detection:
// image_id, category_id, mask, score. All masks of one image must have one size. A mask evaluator
// keeps every detection's runs (4 bytes each); only the 100 best-scored detections of an image
// and category count (ties in insertion order), so a caller may drop the rest before adding them
// without changing the metrics.
class CocoEvaluator {
 public:
  explicit CocoEvaluator(CocoIouType iou_type = CocoIouType::kBbox) : iou_type_(iou_type) {}

  // Images are registered explicitly so that an image with neither ground truth nor detections
  // still counts (pycocotools' imgIds). Registering twice is harmless.
  void add_image(int64_t image_id);
  // Registers the image too. Throws orchard::Error on a non-finite coordinate or area, and for
  // kSegm on a missing (0 x 0) or malformed mask (rle_check). kBbox does not keep the mask.
  void add_ground_truth(const CocoGroundTruth& gt);
  // Registers the image too. Throws orchard::Error on a non-finite coordinate or score, and for
  // kSegm on a missing (0 x 0) or malformed mask. kBbox does not keep the mask.
  void add_detection(const CocoDetection& det);
  // Appends everything `other` collected (for evaluation split over workers); `other`'s
  // detections come after this one's in the tie-breaking order. Throws orchard::Error when the
  // two evaluate different iou types.
  void merge(const CocoEvaluator& other);
  void clear();

  // Throws orchard::Error (kSegm) when two masks of one image and category differ in size.
  CocoMetrics evaluate() const;

  CocoIouType iou_type() const { return iou_type_; }

  size_t num_images() const { return image_ids_.size(); }
  const std::vector<CocoGroundTruth>& ground_truths() const { return gts_; }
  const std::vector<CocoDetection>& detections() const { return dets_; }

 private:
  CocoIouType iou_type_;
  std::unordered_set<int64_t> image_ids_;
  std::vector<CocoGroundTruth> gts_;
  std::vector<CocoDetection> dets_;
};

}  // namespace detect
}  // namespace orchard
