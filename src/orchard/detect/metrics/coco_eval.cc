#include "orchard/detect/metrics/coco_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "orchard/core/error.h"

namespace orchard {
namespace detect {
namespace {

constexpr int kNumIouThrs = 10;
constexpr int kNumRecThrs = 101;
constexpr int kNumAreas = 4;
constexpr int kNumMaxDets = 3;
constexpr int kMaxDets[kNumMaxDets] = {1, 10, 100};
constexpr int kMaxDetsLast = kMaxDets[kNumMaxDets - 1];  // evaluateImg() keeps this many
// all, small, medium, large; both ends inclusive.
constexpr double kAreaRanges[kNumAreas][2] = {{0, 1e10}, {0, 1024}, {1024, 9216}, {9216, 1e10}};
// Indices into the thresholds below of 0.5 and 0.75 (summarize() looks them up by equality;
// both are exact in np.linspace(.5, .95, 10)).
constexpr int kIou50 = 0;
constexpr int kIou75 = 5;
// np.spacing(1), added to the precision denominator by accumulate().
constexpr double kEps = std::numeric_limits<double>::epsilon();

static_assert(kNumIouThrs <= 16, "per-threshold flags are kept in 16-bit masks");
constexpr uint16_t kAllThresholds = (1u << kNumIouThrs) - 1;

// np.linspace(start, stop, N): start + i * ((stop - start) / (N - 1)) with the last value set to
// stop, rounded the same way so that thresholds compare exactly as in pycocotools.
template <int N>
std::array<double, N> linspace(double start, double stop) {
  std::array<double, N> v{};
  const double step = (stop - start) / (N - 1);
  for (int i = 0; i < N; ++i) v[i] = static_cast<double>(i) * step + start;
  v[N - 1] = stop;
  return v;
}

// maskUtils.iou for one box pair (maskApi.c bbIou), with the same operation order.
double box_iou(const CocoDetection& d, const CocoGroundTruth& g) {
  const double w = std::fmin(d.w + d.x, g.w + g.x) - std::fmax(d.x, g.x);
  if (w <= 0) return 0;
  const double h = std::fmin(d.h + d.y, g.h + g.y) - std::fmax(d.y, g.y);
  if (h <= 0) return 0;
  const double inter = w * h;
  const double det_area = d.w * d.h;
  const double union_area = g.iscrowd ? det_area : det_area + g.w * g.h - inter;
  return inter / union_area;
}

// Boxes of the masks of one cell, for the prefilter maskApi.c's rleIou applies: masks whose tight
// boxes do not overlap have IoU 0 without walking their runs.
bool mask_boxes_overlap(const std::vector<double>& a, const std::vector<double>& b) {
  return std::fmin(a[0] + a[2], b[0] + b[2]) - std::fmax(a[0], b[0]) > 0 &&
         std::fmin(a[1] + a[3], b[1] + b[3]) - std::fmax(a[1], b[1]) > 0;
}

bool outside(double area, int a) { return area < kAreaRanges[a][0] || area > kAreaRanges[a][1]; }

// What evaluateImg() decides for one kept detection, for every area range: bit t of `tp` is
// set when it is a true positive at threshold t, bit t of `ignored` when it counts as
// neither (matched to an ignored ground truth, or unmatched and outside the area range).
struct DetResult {
  double score;
  uint16_t rank;  // position among the detections of its image and category, by score
  uint16_t tp[kNumAreas];
  uint16_t ignored[kNumAreas];
};

// Buffers reused across cells so that the per-cell work does not allocate.
struct CellScratch {
  std::vector<double> iou;                           // [D, G], ground truths in insertion order
  std::vector<double> det_area;                      // [D]: the box's (bbox) or the mask's (segm) area
  std::vector<std::vector<double>> det_box, gt_box;  // segm: the masks' tight boxes
  std::vector<int32_t> gt_order;                     // non-ignored ground truths first, stable
  std::vector<uint8_t> gt_ignored;                   // by position in gt_order
  std::vector<uint8_t> gt_crowd;                     // by position in gt_order
  std::vector<uint8_t> gt_matched;                   // by position in gt_order
};

// evaluateImg() for one (category, image) cell and every area range. `dets` are sorted by
// score and already cut to 100; results go to out[0 .. D).
void evaluate_cell(CocoIouType iou_type, const CocoGroundTruth* const* gts, int num_gts,
                   const CocoDetection* const* dets, int num_dets, const std::array<double, kNumIouThrs>& iou_thrs,
                   CellScratch& s, DetResult* out, int64_t* num_not_ignored) {
  const int G = num_gts;
  const int D = num_dets;
  s.iou.resize(static_cast<size_t>(D) * G);
  s.det_area.resize(D);
  if (iou_type == CocoIouType::kBbox) {
    for (int d = 0; d < D; ++d) {
      s.det_area[d] = dets[d]->w * dets[d]->h;
      for (int g = 0; g < G; ++g) s.iou[static_cast<size_t>(d) * G + g] = box_iou(*dets[d], *gts[g]);
    }
  } else {
    const Rle& first = G > 0 ? gts[0]->mask : dets[0]->mask;
    auto check_size = [&](const Rle& mask, int64_t image_id, int64_t category_id) {
      if (mask.h == first.h && mask.w == first.w) return;
      std::ostringstream msg;
      msg << "COCO segm (image " << image_id << ", category " << category_id << "): masks of different sizes, "
          << first.h << "x" << first.w << " and " << mask.h << "x" << mask.w;
      throw Error(msg.str());
    };
    s.gt_box.resize(G);
    for (int g = 0; g < G; ++g) {
      check_size(gts[g]->mask, gts[g]->image_id, gts[g]->category_id);
      s.gt_box[g] = rle_to_bbox(gts[g]->mask);
    }
    s.det_box.resize(D);
    for (int d = 0; d < D; ++d) {
      check_size(dets[d]->mask, dets[d]->image_id, dets[d]->category_id);
      s.det_box[d] = rle_to_bbox(dets[d]->mask);
      s.det_area[d] = static_cast<double>(rle_area(dets[d]->mask));
    }
    for (int d = 0; d < D; ++d)
      for (int g = 0; g < G; ++g)
        s.iou[static_cast<size_t>(d) * G + g] =
            mask_boxes_overlap(s.det_box[d], s.gt_box[g]) ? rle_iou(dets[d]->mask, gts[g]->mask, gts[g]->iscrowd) : 0.0;
  }

  for (int d = 0; d < D; ++d) {
    out[d].score = dets[d]->score;
    out[d].rank = static_cast<uint16_t>(d);
  }

  s.gt_order.resize(G);
  s.gt_ignored.resize(G);
  s.gt_crowd.resize(G);
  s.gt_matched.resize(G);
  for (int a = 0; a < kNumAreas; ++a) {
    int n = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (int g = 0; g < G; ++g) {
        const CocoGroundTruth& gt = *gts[g];
        const double area = gt.area >= 0 ? gt.area : gt.w * gt.h;
        const bool ignored = gt.iscrowd || outside(area, a);
        if (ignored != (pass == 1)) continue;
        s.gt_order[n] = g;
        s.gt_ignored[n] = ignored;
        s.gt_crowd[n] = gt.iscrowd;
        ++n;
        if (!ignored) ++num_not_ignored[a];
      }
    }

    for (int d = 0; d < D; ++d) {
      out[d].tp[a] = 0;
      out[d].ignored[a] = 0;
    }
    if (G == 0) {  // nothing to match: every detection is unmatched at every threshold
      for (int d = 0; d < D; ++d)
        if (outside(s.det_area[d], a)) out[d].ignored[a] = kAllThresholds;
      continue;
    }
    for (int t = 0; t < kNumIouThrs; ++t) {
      const uint16_t bit = static_cast<uint16_t>(1u << t);
      std::fill(s.gt_matched.begin(), s.gt_matched.end(), 0);
      for (int d = 0; d < D; ++d) {
        const double* iou_row = s.iou.data() + static_cast<size_t>(d) * G;
        double best = std::min(iou_thrs[t], 1 - 1e-10);
        int m = -1;
        for (int gi = 0; gi < G; ++gi) {
          // A matched ground truth is taken, unless it is a crowd region.
          if (s.gt_matched[gi] && !s.gt_crowd[gi]) continue;
          // Matched to a real ground truth: the ignored ones (all after it) cannot replace it.
          if (m > -1 && !s.gt_ignored[m] && s.gt_ignored[gi]) break;
          const double v = iou_row[s.gt_order[gi]];
          if (v < best) continue;
          best = v;
          m = gi;
        }
        if (m == -1) {
          if (outside(s.det_area[d], a)) out[d].ignored[a] |= bit;
          continue;
        }
        s.gt_matched[m] = 1;
        if (s.gt_ignored[m]) out[d].ignored[a] |= bit;
        else out[d].tp[a] |= bit;
      }
    }
  }
}

// accumulate() results: precision [K, A, M, T, R] and recall [K, A, M, T], -1 where a
// category has no (non-ignored) ground truth in an area range.
struct Accumulated {
  size_t num_categories = 0;
  std::vector<double> precision;
  std::vector<double> recall;

  size_t slice(size_t k, int a, int m) const {
    return (k * kNumAreas + static_cast<size_t>(a)) * kNumMaxDets + static_cast<size_t>(m);
  }
  const double* precision_at(size_t k, int a, int m, int t) const {
    return &precision[(slice(k, a, m) * kNumIouThrs + static_cast<size_t>(t)) * kNumRecThrs];
  }
  double recall_at(size_t k, int a, int m, int t) const {
    return recall[slice(k, a, m) * kNumIouThrs + static_cast<size_t>(t)];
  }
};

struct AccumulateScratch {
  std::vector<uint32_t> flags;  // tp mask | ignored mask << 16, for the detections kept
  std::vector<double> rc, pr;
};

// accumulate() for one category. `sorted` holds its detections over all images, by score
// descending, ties in (image id, rank) order as pycocotools' stable sort leaves them.
void accumulate_category(size_t k, const DetResult* sorted, size_t n, const int64_t* npig,
                         const std::array<double, kNumRecThrs>& rec_thrs, AccumulateScratch& s, Accumulated& acc) {
  s.rc.resize(n);
  s.pr.resize(n);
  for (int a = 0; a < kNumAreas; ++a) {
    if (npig[a] == 0) continue;
    const double num_gt = static_cast<double>(npig[a]);
    for (int m = 0; m < kNumMaxDets; ++m) {
      s.flags.clear();
      for (size_t i = 0; i < n; ++i)
        if (sorted[i].rank < kMaxDets[m])
          s.flags.push_back(sorted[i].tp[a] | static_cast<uint32_t>(sorted[i].ignored[a]) << 16);
      const size_t base = acc.slice(k, a, m);
      for (int t = 0; t < kNumIouThrs; ++t) {
        const uint32_t tp_bit = 1u << t, ignored_bit = tp_bit << 16;
        // pycocotools builds recall and precision at every detection, takes the envelope
        // (max from the right) and samples it where recall first reaches each point. Recall
        // only rises at a true positive, and between two true positives precision only falls,
        // so the envelope at a true positive is the max over the true positives from there,
        // and the sampled values need precision at the true positives alone. Ignored
        // detections change neither count.
        size_t num_tp = 0;
        double tp = 0, fp = 0;
        for (uint32_t f : s.flags) {
          if (f & ignored_bit) continue;
          if (f & tp_bit) {
            tp += 1;
            s.rc[num_tp] = tp / num_gt;
            s.pr[num_tp] = tp / (fp + tp + kEps);
            ++num_tp;
          } else {
            fp += 1;
          }
        }
        acc.recall[base * kNumIouThrs + t] = num_tp == 0 ? 0 : s.rc[num_tp - 1];
        for (size_t i = num_tp; i-- > 1;)
          if (s.pr[i] > s.pr[i - 1]) s.pr[i - 1] = s.pr[i];
        // np.searchsorted(rc, recThrs, side='left'); recall points past the end get 0.
        double* q = &acc.precision[(base * kNumIouThrs + t) * kNumRecThrs];
        size_t idx = 0;
        for (int r = 0; r < kNumRecThrs; ++r) {
          while (idx < num_tp && s.rc[idx] < rec_thrs[r]) ++idx;
          q[r] = idx < num_tp ? s.pr[idx] : 0;
        }
      }
    }
  }
}

// summarize()'s mean over the cells > -1 of a precision slice: thresholds [t_begin, t_end),
// categories [k_begin, k_end), all recall points; -1 if there are none.
double mean_precision(const Accumulated& acc, int t_begin, int t_end, int a, int m, size_t k_begin, size_t k_end) {
  double sum = 0;
  size_t count = 0;
  for (size_t k = k_begin; k < k_end; ++k)
    for (int t = t_begin; t < t_end; ++t) {
      const double* q = acc.precision_at(k, a, m, t);
      for (int r = 0; r < kNumRecThrs; ++r)
        if (q[r] > -1) {
          sum += q[r];
          ++count;
        }
    }
  return count == 0 ? -1.0 : sum / static_cast<double>(count);
}

double mean_recall(const Accumulated& acc, int a, int m) {
  double sum = 0;
  size_t count = 0;
  for (size_t k = 0; k < acc.num_categories; ++k)
    for (int t = 0; t < kNumIouThrs; ++t) {
      const double v = acc.recall_at(k, a, m, t);
      if (v > -1) {
        sum += v;
        ++count;
      }
    }
  return count == 0 ? -1.0 : sum / static_cast<double>(count);
}

void check_finite(bool ok, const char* what, int64_t image_id, int64_t category_id) {
  if (ok) return;
  std::ostringstream msg;
  msg << "COCO " << what << " (image " << image_id << ", category " << category_id << "): non-finite value";
  throw Error(msg.str());
}

void check_mask(const Rle& mask, const char* what, int64_t image_id, int64_t category_id) {
  std::ostringstream where;
  where << "COCO segm " << what << " (image " << image_id << ", category " << category_id << ")";
  if (mask.h <= 0 || mask.w <= 0) throw Error(where.str() + ": no mask");
  rle_check(mask, where.str());
}

// The OD API's prefix for each evaluator (CocoDetectionEvaluator, CocoMaskEvaluator).
const char* metric_prefix(CocoIouType iou_type) {
  return iou_type == CocoIouType::kSegm ? "DetectionMasks_" : "DetectionBoxes_";
}

}  // namespace

std::vector<std::pair<std::string, double>> CocoMetrics::named() const {
  // coco_tools.COCO_METRIC_NAMES_AND_INDEX.
  static const char* const kNames[12] = {
      "Precision/mAP",         "Precision/mAP@.50IOU",   "Precision/mAP@.75IOU",
      "Precision/mAP (small)", "Precision/mAP (medium)", "Precision/mAP (large)",
      "Recall/AR@1",           "Recall/AR@10",           "Recall/AR@100",
      "Recall/AR@100 (small)", "Recall/AR@100 (medium)", "Recall/AR@100 (large)",
  };
  const std::string prefix = metric_prefix(iou_type);
  std::vector<std::pair<std::string, double>> out;
  out.reserve(12);
  for (int i = 0; i < 12; ++i) out.emplace_back(prefix + kNames[i], stats[i]);
  return out;
}

std::vector<std::pair<std::string, double>> CocoMetrics::named(
    const std::map<int64_t, std::string>& category_names) const {
  std::vector<std::pair<std::string, double>> out = named();
  for (const auto& [id, ap] : per_category_ap) {
    const auto it = category_names.find(id);
    const std::string name = it != category_names.end() ? it->second : std::to_string(id);
    out.emplace_back(std::string(metric_prefix(iou_type)) + "PerformanceByCategory/mAP/" + name, ap);
  }
  return out;
}

void CocoEvaluator::add_image(int64_t image_id) { image_ids_.insert(image_id); }

void CocoEvaluator::add_ground_truth(const CocoGroundTruth& gt) {
  check_finite(std::isfinite(gt.x) && std::isfinite(gt.y) && std::isfinite(gt.w) && std::isfinite(gt.h) &&
                   std::isfinite(gt.area),
               "ground truth", gt.image_id, gt.category_id);
  if (iou_type_ == CocoIouType::kSegm) check_mask(gt.mask, "ground truth", gt.image_id, gt.category_id);
  image_ids_.insert(gt.image_id);
  gts_.push_back(gt);
  if (iou_type_ == CocoIouType::kBbox) gts_.back().mask = Rle();
}

void CocoEvaluator::add_detection(const CocoDetection& det) {
  check_finite(std::isfinite(det.x) && std::isfinite(det.y) && std::isfinite(det.w) && std::isfinite(det.h) &&
                   std::isfinite(det.score),
               "detection", det.image_id, det.category_id);
  if (iou_type_ == CocoIouType::kSegm) check_mask(det.mask, "detection", det.image_id, det.category_id);
  image_ids_.insert(det.image_id);
  dets_.push_back(det);
  if (iou_type_ == CocoIouType::kBbox) dets_.back().mask = Rle();
}

void CocoEvaluator::merge(const CocoEvaluator& other) {
  if (other.iou_type_ != iou_type_) throw Error("CocoEvaluator::merge: a bbox and a segm evaluator cannot be merged");
  image_ids_.insert(other.image_ids_.begin(), other.image_ids_.end());
  gts_.insert(gts_.end(), other.gts_.begin(), other.gts_.end());
  dets_.insert(dets_.end(), other.dets_.begin(), other.dets_.end());
}

void CocoEvaluator::clear() {
  image_ids_.clear();
  gts_.clear();
  dets_.clear();
}

CocoMetrics CocoEvaluator::evaluate() const {
  const auto iou_thrs = linspace<kNumIouThrs>(0.5, 0.95);
  const auto rec_thrs = linspace<kNumRecThrs>(0.0, 1.0);

  // pycocotools' imgIds and catIds, sorted.
  std::vector<int64_t> images(image_ids_.begin(), image_ids_.end());
  std::sort(images.begin(), images.end());
  std::unordered_map<int64_t, uint64_t> image_index;
  image_index.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) image_index.emplace(images[i], i);

  std::vector<int64_t> categories;
  for (const auto& gt : gts_) categories.push_back(gt.category_id);
  std::sort(categories.begin(), categories.end());
  categories.erase(std::unique(categories.begin(), categories.end()), categories.end());
  const size_t K = categories.size();

  CocoMetrics metrics;
  metrics.iou_type = iou_type_;
  metrics.stats.fill(-1);
  if (K == 0) return metrics;

  auto category_of = [&](int64_t id) -> int64_t {
    const auto it = std::lower_bound(categories.begin(), categories.end(), id);
    return it != categories.end() && *it == id ? it - categories.begin() : -1;
  };
  // A cell is one (image, category) pair. Cells are visited image-major, which reads the
  // detections roughly in the order they were added (image by image).
  auto cell_of = [&](int64_t image_id, int64_t k) { return image_index.at(image_id) * K + static_cast<uint64_t>(k); };

  struct GtKey {
    uint64_t cell;
    uint32_t index;
  };
  std::vector<GtKey> gt_keys;
  gt_keys.reserve(gts_.size());
  for (size_t i = 0; i < gts_.size(); ++i)
    gt_keys.push_back({cell_of(gts_[i].image_id, category_of(gts_[i].category_id)), static_cast<uint32_t>(i)});
  std::sort(gt_keys.begin(), gt_keys.end(),
            [](const GtKey& a, const GtKey& b) { return a.cell != b.cell ? a.cell < b.cell : a.index < b.index; });

  // Within a cell: score descending, insertion order among equal scores (the mergesort).
  struct DetKey {
    uint64_t cell;
    double score;
    uint32_t index;
  };
  std::vector<DetKey> det_keys;
  det_keys.reserve(dets_.size());
  for (size_t i = 0; i < dets_.size(); ++i) {
    const int64_t k = category_of(dets_[i].category_id);
    if (k < 0) continue;
    det_keys.push_back({cell_of(dets_[i].image_id, k), dets_[i].score, static_cast<uint32_t>(i)});
  }
  std::sort(det_keys.begin(), det_keys.end(), [](const DetKey& a, const DetKey& b) {
    if (a.cell != b.cell) return a.cell < b.cell;
    if (a.score != b.score) return a.score > b.score;
    return a.index < b.index;
  });

  // Each category's results go to one contiguous range, in (image, rank) order; count first
  // (at most 100 per cell) so that they can be written in place.
  std::vector<size_t> category_begin(K + 1, 0);
  for (size_t i = 0, run = 0; i < det_keys.size(); ++i) {
    run = i > 0 && det_keys[i].cell == det_keys[i - 1].cell ? run + 1 : 0;
    if (run < static_cast<size_t>(kMaxDetsLast)) ++category_begin[det_keys[i].cell % K + 1];
  }
  for (size_t k = 0; k < K; ++k) category_begin[k + 1] += category_begin[k];
  std::vector<size_t> category_next(category_begin.begin(), category_begin.end() - 1);
  std::vector<DetResult> by_category(category_begin[K]);

  // evaluate(): every non-empty cell, every area range.
  std::vector<int64_t> num_not_ignored(K * kNumAreas, 0);
  std::vector<const CocoGroundTruth*> cell_gts;
  std::vector<const CocoDetection*> cell_dets;
  CellScratch cell_scratch;
  size_t gi = 0, di = 0;
  while (gi < gt_keys.size() || di < det_keys.size()) {
    const uint64_t cell = std::min(gi < gt_keys.size() ? gt_keys[gi].cell : UINT64_MAX,
                                   di < det_keys.size() ? det_keys[di].cell : UINT64_MAX);
    const size_t k = cell % K;
    cell_gts.clear();
    for (; gi < gt_keys.size() && gt_keys[gi].cell == cell; ++gi) cell_gts.push_back(&gts_[gt_keys[gi].index]);
    cell_dets.clear();
    for (; di < det_keys.size() && det_keys[di].cell == cell; ++di)
      if (cell_dets.size() < static_cast<size_t>(kMaxDetsLast)) cell_dets.push_back(&dets_[det_keys[di].index]);
    evaluate_cell(iou_type_, cell_gts.data(), static_cast<int>(cell_gts.size()), cell_dets.data(),
                  static_cast<int>(cell_dets.size()), iou_thrs, cell_scratch, by_category.data() + category_next[k],
                  &num_not_ignored[k * kNumAreas]);
    category_next[k] += cell_dets.size();
  }

  Accumulated acc;
  acc.num_categories = K;
  acc.precision.assign(K * kNumAreas * kNumMaxDets * kNumIouThrs * kNumRecThrs, -1);
  acc.recall.assign(K * kNumAreas * kNumMaxDets * kNumIouThrs, -1);
  AccumulateScratch acc_scratch;
  for (size_t k = 0; k < K; ++k) {
    DetResult* begin = by_category.data() + category_begin[k];
    DetResult* end = by_category.data() + category_begin[k + 1];
    std::stable_sort(begin, end, [](const DetResult& a, const DetResult& b) { return a.score > b.score; });
    accumulate_category(k, begin, static_cast<size_t>(end - begin), &num_not_ignored[k * kNumAreas], rec_thrs,
                        acc_scratch, acc);
  }

  // summarize().
  const int m100 = kNumMaxDets - 1;
  auto& s = metrics.stats;
  s[0] = mean_precision(acc, 0, kNumIouThrs, 0, m100, 0, K);
  s[1] = mean_precision(acc, kIou50, kIou50 + 1, 0, m100, 0, K);
  s[2] = mean_precision(acc, kIou75, kIou75 + 1, 0, m100, 0, K);
  for (int a = 1; a < kNumAreas; ++a) s[2 + a] = mean_precision(acc, 0, kNumIouThrs, a, m100, 0, K);
  for (int m = 0; m < kNumMaxDets; ++m) s[6 + m] = mean_recall(acc, 0, m);
  for (int a = 1; a < kNumAreas; ++a) s[8 + a] = mean_recall(acc, a, m100);
  for (size_t k = 0; k < K; ++k)
    metrics.per_category_ap[categories[k]] = mean_precision(acc, 0, kNumIouThrs, 0, m100, k, k + 1);
  return metrics;
}

}  // namespace detect
}  // namespace orchard
