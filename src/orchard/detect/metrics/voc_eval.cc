#include "orchard/detect/metrics/voc_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMaxDetectionsPerClass = 10000;  // the evaluation's nms_max_output_boxes

template <typename A, typename B>
double intersection(const A& a, const B& b) {
  const double h = std::max(0.0, std::min(a.ymax, b.ymax) - std::max(a.ymin, b.ymin));
  const double w = std::max(0.0, std::min(a.xmax, b.xmax) - std::max(a.xmin, b.xmin));
  return h * w;
}

template <typename A>
double area(const A& a) {
  return (a.ymax - a.ymin) * (a.xmax - a.xmin);
}

// Indices of `scores` by descending score as numpy's argsort(scores)[::-1]: a stable ascending
// order reversed.
std::vector<size_t> descending(const std::vector<double>& scores) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  std::reverse(order.begin(), order.end());
  return order;
}

// metrics.compute_precision_recall + compute_average_precision: the VOC area under the
// precision envelope at every recall change.
double average_precision(const std::vector<std::pair<double, double>>& entries, double num_gt) {
  if (entries.empty()) return 0.0;
  std::vector<double> scores;
  scores.reserve(entries.size());
  for (const auto& e : entries) scores.push_back(e.first);
  const auto order = descending(scores);
  std::vector<double> precision{0.0}, recall{0.0};
  double tp = 0, fp = 0;
  for (size_t i : order) {
    const double label = entries[i].second;
    tp += label;
    fp += label <= 0 ? 1.0 : 0.0;
    precision.push_back(tp / (tp + fp));
    recall.push_back(tp / num_gt);
  }
  precision.push_back(0.0);
  recall.push_back(1.0);
  for (size_t i = precision.size() - 1; i-- > 0;) precision[i] = std::max(precision[i], precision[i + 1]);
  double ap = 0;
  for (size_t i = 1; i < recall.size(); ++i)
    if (recall[i] != recall[i - 1]) ap += (recall[i] - recall[i - 1]) * precision[i];
  return ap;
}

}  // namespace

VocMetricsOptions VocMetricsOptions::for_metrics_set(const std::string& metrics_set) {
  VocMetricsOptions o;
  if (metrics_set == "pascal_voc_detection_metrics") {
    o.prefix = "PascalBoxes";
    o.use_difficult = true;
  } else if (metrics_set == "weighted_pascal_voc_detection_metrics") {
    o.prefix = "WeightedPascalBoxes";
    o.use_weighted_mean_ap = true;
    o.use_difficult = true;
  } else if (metrics_set == "oid_V2_detection_metrics" || metrics_set == "open_images_V2_detection_metrics" ||
             metrics_set == "open_images_metrics") {  // the 2017 OD API's name of the same evaluator
    o.prefix = "OpenImagesV2";
    o.use_group_of = true;
  } else if (metrics_set == "oid_challenge_detection_metrics") {
    o.prefix = "OpenImagesDetectionChallenge";
    o.group_of_weight = 1.0;
    o.use_group_of = true;
    o.use_image_labels = true;
  } else {
    throw Error("eval_config.metrics_set '" + metrics_set + "' is not a PASCAL VOC or Open Images metric set");
  }
  return o;
}

bool VocMetricsOptions::is_metrics_set(const std::string& metrics_set) {
  for (const char* known :
       {"pascal_voc_detection_metrics", "weighted_pascal_voc_detection_metrics", "oid_V2_detection_metrics",
        "open_images_V2_detection_metrics", "open_images_metrics", "oid_challenge_detection_metrics"})
    if (metrics_set == known) return true;
  return false;
}

VocEvaluator::VocEvaluator(int64_t num_classes, VocMetricsOptions options)
    : num_classes_(num_classes),
      options_(std::move(options)),
      num_gt_(static_cast<size_t>(std::max<int64_t>(num_classes, 0)), 0.0),
      entries_(num_gt_.size()) {
  if (num_classes < 1) throw Error("PASCAL VOC metrics: need at least 1 class");
}

void VocEvaluator::add_ground_truth(int64_t image_id, const std::vector<VocGroundTruth>& boxes,
                                    const std::vector<int64_t>& image_labels) {
  if (ground_truth_.count(image_id)) return;
  Image& image = ground_truth_[image_id];
  image.boxes = boxes;
  for (auto& b : image.boxes) {
    b.difficult = b.difficult && options_.use_difficult;
    b.group_of = b.group_of && options_.use_group_of;
  }
  for (const auto& b : image.boxes) {
    if (b.category_id < 1 || b.category_id > num_classes_)
      throw Error("PASCAL VOC metrics: ground-truth class " + std::to_string(b.category_id) + " outside 1.." +
                  std::to_string(num_classes_));
    if (!std::isfinite(b.ymin) || !std::isfinite(b.xmin) || !std::isfinite(b.ymax) || !std::isfinite(b.xmax))
      throw Error("PASCAL VOC metrics: a ground-truth box has a non-finite coordinate");
    const auto c = static_cast<size_t>(b.category_id - 1);
    if (b.difficult) continue;  // not counted, as the VOC devkit
    num_gt_[c] += b.group_of ? options_.group_of_weight : 1.0;
  }
  image.labels = image_labels;
  if (image_labels.empty() && options_.use_image_labels && options_.empty_image_labels_mean_all)
    for (int64_t category = 1; category <= num_classes_; ++category) image.labels.push_back(category);
  for (const auto& b : boxes) image.labels.push_back(b.category_id);
}

void VocEvaluator::add_detections(int64_t image_id, const std::vector<VocDetection>& detections) {
  if (detected_.count(image_id)) return;
  detected_[image_id] = true;
  static const Image kNone;
  const auto found = ground_truth_.find(image_id);
  const Image& image = found == ground_truth_.end() ? kNone : found->second;
  for (const auto& d : detections)
    if (!std::isfinite(d.ymin) || !std::isfinite(d.xmin) || !std::isfinite(d.ymax) || !std::isfinite(d.xmax) ||
        !std::isfinite(d.score))
      throw Error("PASCAL VOC metrics: a detection has a non-finite box or score");

  for (int64_t category = 1; category <= num_classes_; ++category) {
    if (options_.use_image_labels &&
        std::find(image.labels.begin(), image.labels.end(), category) == image.labels.end())
      continue;  // the challenge: classes not verified on the image are not evaluated there
    // The class's valid detections by descending score, at most 10000 (the evaluation's
    // non_max_suppression with IoU threshold 1: a sort and a cap).
    std::vector<const VocDetection*> dets;
    std::vector<double> scores;
    for (const auto& d : detections)
      if (d.category_id == category && d.ymin < d.ymax && d.xmin < d.xmax && d.score > -10.0) {
        dets.push_back(&d);
        scores.push_back(d.score);
      }
    if (dets.empty()) continue;
    auto order = descending(scores);
    if (order.size() > kMaxDetectionsPerClass) order.resize(kMaxDetectionsPerClass);
    std::vector<const VocGroundTruth*> ordinary, group_of;
    for (const auto& b : image.boxes)
      if (b.category_id == category) (b.group_of ? group_of : ordinary).push_back(&b);
    auto& out = entries_[static_cast<size_t>(category - 1)];
    if (ordinary.empty() && group_of.empty()) {
      for (size_t i : order) out.emplace_back(scores[i], 0.0);
      continue;
    }
    const size_t n = order.size();
    std::vector<char> tp(n, 0), difficult(n, 0), in_group(n, 0);
    // Stage 1: the ordinary boxes, by IoU.
    if (!ordinary.empty()) {
      std::vector<char> taken(ordinary.size(), 0);
      for (size_t k = 0; k < n; ++k) {
        const VocDetection& d = *dets[order[k]];
        size_t best = 0;
        double best_iou = -1;
        for (size_t g = 0; g < ordinary.size(); ++g) {
          const double inter = intersection(d, *ordinary[g]);
          const double iou = inter / (area(d) + area(*ordinary[g]) - inter);
          if (iou > best_iou) best_iou = iou, best = g;  // the first of equal maxima, as argmax
        }
        if (!(best_iou >= options_.matching_iou_threshold)) continue;
        if (ordinary[best]->difficult) {
          difficult[k] = 1;
        } else if (!taken[best]) {
          tp[k] = 1;
          taken[best] = 1;
        }
      }
    }
    // Stage 2: what is left, against the group-of boxes by IoA.
    std::vector<double> group_score(group_of.size(), 0.0);
    if (!group_of.empty()) {
      for (size_t k = 0; k < n; ++k) {
        if (tp[k] || difficult[k]) continue;
        const VocDetection& d = *dets[order[k]];
        size_t best = 0;
        double best_ioa = -1;
        for (size_t g = 0; g < group_of.size(); ++g) {
          const double ioa = intersection(d, *group_of[g]) / area(d);
          if (ioa > best_ioa) best_ioa = ioa, best = g;
        }
        if (!(best_ioa >= options_.matching_iou_threshold)) continue;
        in_group[k] = 1;
        group_score[best] = std::max(group_score[best], scores[order[k]]);
      }
    }
    for (size_t k = 0; k < n; ++k)
      if (!difficult[k] && !in_group[k]) out.emplace_back(scores[order[k]], tp[k] ? 1.0 : 0.0);
    if (options_.group_of_weight > 0)
      for (double s : group_score)
        if (s > 0) out.emplace_back(s, options_.group_of_weight);
  }
}

VocMetrics VocEvaluator::evaluate() const {
  VocMetrics m;
  m.per_class_ap.assign(num_gt_.size(), kNaN);
  std::vector<std::pair<double, double>> pooled;
  double pooled_gt = 0, sum = 0;
  int counted = 0;
  for (size_t c = 0; c < num_gt_.size(); ++c) {
    if (num_gt_[c] == 0) continue;
    m.per_class_ap[c] = average_precision(entries_[c], num_gt_[c]);
    sum += m.per_class_ap[c];
    ++counted;
    if (options_.use_weighted_mean_ap) {
      pooled.insert(pooled.end(), entries_[c].begin(), entries_[c].end());
      pooled_gt += num_gt_[c];
    }
  }
  if (options_.use_weighted_mean_ap) m.mean_ap = pooled_gt > 0 ? average_precision(pooled, pooled_gt) : kNaN;
  else m.mean_ap = counted ? sum / counted : kNaN;
  return m;
}

std::vector<std::pair<std::string, double>> VocMetrics::named(const VocMetricsOptions& options,
                                                              const std::vector<std::string>& class_names) const {
  // '{}'.format(0.5) in Python: the shortest repr.
  std::string iou = std::to_string(options.matching_iou_threshold);
  while (iou.size() > 1 && iou.back() == '0') iou.pop_back();
  if (!iou.empty() && iou.back() == '.') iou += '0';
  std::vector<std::pair<std::string, double>> out;
  out.emplace_back(options.prefix + "_Precision/mAP@" + iou + "IOU", mean_ap);
  for (size_t c = 0; c < per_class_ap.size(); ++c) {
    const std::string name = c < class_names.size() ? class_names[c] : std::to_string(c + 1);
    out.emplace_back(options.prefix + "_PerformanceByCategory/AP@" + iou + "IOU/" + name, per_class_ap[c]);
  }
  return out;
}

}  // namespace orchard::detect
