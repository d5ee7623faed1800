// The TF Object Detection API's PASCAL VOC and Open Images detection metrics
// (object_detection_evaluation.ObjectDetectionEvaluation with its per-image evaluation), in
// plain C++: the `metrics_set`s pascal_voc_detection_metrics, weighted_pascal_voc_detection_metrics,
// oid_V2_detection_metrics (= open_images_V2_detection_metrics, and open_images_metrics as the 2017
// OD API named it) and
// oid_challenge_detection_metrics.
//
// Per image and class: detections with ymin >= ymax or xmin >= xmax are dropped, the rest taken
// by descending score (at most 10000); each is matched to the non-group-of ground truth of
// highest IoU (no +1 on widths). IoU >= 0.5 with an unmatched ordinary box: a true positive;
// with an already matched one: a false positive; with a `difficult` box: ignored. Detections
// still unmatched are tried against the group-of boxes by IoA (the part of the detection inside
// the box) >= 0.5: they are ignored, and each group-of box that caught one adds one entry of
// weight group_of_weight (scored by the best of them) when that weight is > 0. The challenge
// evaluates a class on an image only where the image's verified labels or boxes name it (an
// image without labels: every class, or only its boxes' with empty_image_labels_mean_all false).
// Per class: precision/recall over all images by descending score, ground truths counted
// without difficult boxes (group-of boxes with group_of_weight), AP = the VOC area under the
// interpolated precision (every recall point). mAP = the mean over the classes with ground
// truth (weighted: one AP over the entries of all classes pooled).
//
// Ties in score: numpy's argsort(scores)[::-1], which for the short arrays it sorts by insertion
// (up to 16) is a stable ascending sort reversed: of equal scores the later one comes first.
// Orchard applies that rule at every length.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace orchard::detect {

struct VocMetricsOptions {
  std::string prefix = "PascalBoxes";  // PascalBoxes, WeightedPascalBoxes, OpenImagesV2, OpenImagesDetectionChallenge
  double matching_iou_threshold = 0.5;
  bool use_weighted_mean_ap = false;
  double group_of_weight = 0.0;
  // oid_challenge: detections of a class are evaluated only on images whose verified
  // image-level labels (or ground-truth boxes) name that class.
  bool use_image_labels = false;
  // With use_image_labels, an image given no verified labels has every class verified (its
  // annotations are exhaustive): eval_config.image_classes_field_map_empty_to_ones, true by the
  // proto's default, where the OD API's input pipeline turns an empty image/class/label field
  // into all ones. false: such an image is evaluated only for its boxes' classes.
  bool empty_image_labels_mean_all = false;
  bool use_difficult = false;  // PASCAL: `difficult` boxes are ignored (else ordinary boxes)
  bool use_group_of = false;   // Open Images: `group_of` boxes (else ordinary boxes)
  // The OD API's metric set of that name; throws orchard::Error for another name.
  static VocMetricsOptions for_metrics_set(const std::string& metrics_set);
  static bool is_metrics_set(const std::string& metrics_set);
};

struct VocGroundTruth {
  double ymin = 0, xmin = 0, ymax = 0, xmax = 0;  // absolute (or any common) coordinates
  int64_t category_id = 0;                        // 1-based label-map id
  bool difficult = false;
  bool group_of = false;
};

struct VocDetection {
  double ymin = 0, xmin = 0, ymax = 0, xmax = 0;
  int64_t category_id = 0;
  double score = 0;
};

struct VocMetrics {
  double mean_ap = 0;                // NaN where no class has ground truth
  std::vector<double> per_class_ap;  // index = id - 1; NaN for a class without ground truth
  // <prefix>_Precision/mAP@0.5IOU, then <prefix>_PerformanceByCategory/AP@0.5IOU/<name> for each
  // id 1..num_classes (named by `class_names[id - 1]`, by the id where there is none).
  std::vector<std::pair<std::string, double>> named(const VocMetricsOptions& options,
                                                    const std::vector<std::string>& class_names) const;
};

class VocEvaluator {
 public:
  // num_classes: the label map's largest id.
  VocEvaluator(int64_t num_classes, VocMetricsOptions options);

  // Ground truth of one image, before its detections; a second call for the same image is
  // ignored (as the OD API, with a warning there). `image_labels`: verified image-level labels
  // (ids 1..num_classes; empty: see empty_image_labels_mean_all).
  void add_ground_truth(int64_t image_id, const std::vector<VocGroundTruth>& boxes,
                        const std::vector<int64_t>& image_labels = {});
  // Detections of one image (evaluated against its ground truth at once); a second call for
  // the same image is ignored. Throws orchard::Error on a non-finite value or a bad id.
  void add_detections(int64_t image_id, const std::vector<VocDetection>& detections);

  VocMetrics evaluate() const;

 private:
  struct Image {
    std::vector<VocGroundTruth> boxes;
    std::vector<int64_t> labels;  // evaluatable classes (challenge)
  };
  int64_t num_classes_;
  VocMetricsOptions options_;
  std::unordered_map<int64_t, Image> ground_truth_;
  std::unordered_map<int64_t, bool> detected_;
  std::vector<double> num_gt_;  // per class, weighted
  // Per class: (score, weight) entries in the order the images were added.
  std::vector<std::vector<std::pair<double, double>>> entries_;
};

}  // namespace orchard::detect
