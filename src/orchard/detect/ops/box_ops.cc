#include "orchard/detect/ops/box_ops.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

constexpr double kEpsilon = 1e-8;  // faster_rcnn_box_coder.EPSILON

void check_boxes(const at::Tensor& boxes, const char* name) {
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(1) == 4, name, " must be [N, 4], got ", boxes.sizes());
}

struct CenterSize {
  at::Tensor yc, xc, h, w;
};

// BoxList.get_center_coordinates_and_sizes over the last dimension.
CenterSize center_size(const at::Tensor& boxes) {
  const auto c = boxes.unbind(-1);
  CenterSize out;
  out.h = c[2] - c[0];
  out.w = c[3] - c[1];
  out.yc = c[0] + out.h / 2;
  out.xc = c[1] + out.w / 2;
  return out;
}

void check_iou_threshold(float iou_threshold) {
  if (!(iou_threshold >= 0.0f && iou_threshold <= 1.0f)) {
    throw Error("nms: iou_threshold must be in [0, 1], not " + std::to_string(iou_threshold));
  }
}

// Reused buffers, so that per-class NMS allocates once per thread.
struct NmsScratch {
  std::vector<int64_t> heap;
  std::vector<float> y1, x1, y2, x2, area;  // kept boxes of positive area, corners ordered
};

constexpr int64_t kNmsBlock = 32;

// IoU of the candidate (corners ordered, area > 0) with kept box j, as the TF kernel
// computes it (same float operations in the same order).
inline float kept_iou(const NmsScratch& k, int64_t j, float y1, float x1, float y2, float x2, float area) {
  const float ih = std::max(std::min(y2, k.y2[j]) - std::max(y1, k.y1[j]), 0.0f);
  const float iw = std::max(std::min(x2, k.x2[j]) - std::max(x1, k.x1[j]), 0.0f);
  const float inter = ih * iw;
  return inter / (area + k.area[j] - inter);
}

// Whether the candidate overlaps a kept box by more than iou_threshold. Kept boxes are
// scanned newest first (overlapping boxes have similar scores, so a suppressor tends to be
// recent) in blocks: a branch-free, vectorisable pass tests inter > t' * union with t'
// a hair below the threshold, and only a block that passes it is checked exactly, so the
// result is the exact float IoU test of the TF kernel.
bool suppressed_by_kept(const NmsScratch& k, float y1, float x1, float y2, float x2, float area, float threshold,
                        float loose_threshold) {
  const float* ky1 = k.y1.data();
  const float* kx1 = k.x1.data();
  const float* ky2 = k.y2.data();
  const float* kx2 = k.x2.data();
  const float* karea = k.area.data();
  for (auto end = static_cast<int64_t>(k.area.size()); end > 0; end -= kNmsBlock) {
    const int64_t begin = std::max<int64_t>(0, end - kNmsBlock);
    int hit = 0;
    for (int64_t j = begin; j < end; ++j) {
      const float ih = std::max(std::min(y2, ky2[j]) - std::max(y1, ky1[j]), 0.0f);
      const float iw = std::max(std::min(x2, kx2[j]) - std::max(x1, kx1[j]), 0.0f);
      const float inter = ih * iw;
      hit |= inter > loose_threshold * (area + karea[j] - inter);
    }
    if (!hit) continue;
    for (int64_t j = end - 1; j >= begin; --j) {
      if (kept_iou(k, j, y1, x1, y2, x2, area) > threshold) return true;
    }
  }
  return false;
}

// Greedy NMS over raw float32 data (boxes [n, 4], scores [n]); writes the kept indices to
// *keep by descending score. Candidates come off a heap, so only those visited are ordered,
// and each is compared with the kept boxes only: O(n + visited * (log n + kept)).
void nms_kernel(const float* boxes, const float* scores, int64_t n, float iou_threshold, int64_t max_output,
                float score_threshold, NmsScratch* scratch, std::vector<int64_t>* keep) {
  keep->clear();
  auto& heap = scratch->heap;
  heap.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (scores[i] > score_threshold) heap.push_back(i);  // NaN scores never pass
  }
  const auto limit = max_output < 0 ? heap.size() : std::min<size_t>(heap.size(), static_cast<size_t>(max_output));
  if (limit == 0) return;
  // Heap order: the top is the highest score, the lowest index among equal scores.
  const auto lower_priority = [scores](int64_t a, int64_t b) {
    return scores[a] < scores[b] || (scores[a] == scores[b] && a > b);
  };
  std::make_heap(heap.begin(), heap.end(), lower_priority);
  keep->reserve(limit);
  for (auto* v : {&scratch->y1, &scratch->x1, &scratch->y2, &scratch->x2, &scratch->area}) v->clear();
  // Slightly below the threshold: covers the rounding of inter / union and of the product.
  const float loose_threshold = iou_threshold * (1.0f - 1e-5f);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower_priority);
    const int64_t i = heap.back();
    heap.pop_back();
    const float* b = boxes + 4 * i;
    const float y1 = std::min(b[0], b[2]), y2 = std::max(b[0], b[2]);
    const float x1 = std::min(b[1], b[3]), x2 = std::max(b[1], b[3]);
    const float area = (y2 - y1) * (x2 - x1);
    // A box without area has IoU 0 with everything: never suppressed, never suppresses.
    const bool has_area = area > 0.0f;
    if (has_area && suppressed_by_kept(*scratch, y1, x1, y2, x2, area, iou_threshold, loose_threshold)) continue;
    keep->push_back(i);
    if (keep->size() == limit) break;
    if (has_area) {
      scratch->y1.push_back(y1), scratch->x1.push_back(x1), scratch->y2.push_back(y2), scratch->x2.push_back(x2);
      scratch->area.push_back(area);
    }
  }
}

}  // namespace

at::Tensor box_area(const at::Tensor& boxes) {
  check_boxes(boxes, "boxes");
  const auto c = boxes.unbind(1);
  return (c[2] - c[0]) * (c[3] - c[1]);
}

at::Tensor pairwise_iou(const at::Tensor& a, const at::Tensor& b) {
  check_boxes(a, "a");
  check_boxes(b, "b");
  const auto ca = a.unsqueeze(1).unbind(2);  // [N, 1] each
  const auto cb = b.unsqueeze(0).unbind(2);  // [1, M] each
  const auto ih = (at::minimum(ca[2], cb[2]) - at::maximum(ca[0], cb[0])).clamp_min(0);
  const auto iw = (at::minimum(ca[3], cb[3]) - at::maximum(ca[1], cb[1])).clamp_min(0);
  const auto inter = ih * iw;
  const auto unions = box_area(a).unsqueeze(1) + box_area(b).unsqueeze(0) - inter;
  return at::where(inter == 0, at::zeros_like(inter), inter / unions);
}

at::Tensor encode_boxes(const at::Tensor& boxes, const at::Tensor& anchors, const FasterRcnnBoxCoderOptions& o) {
  check_boxes(boxes, "boxes");
  check_boxes(anchors, "anchors");
  TORCH_CHECK(boxes.size(0) == anchors.size(0), "encode_boxes: ", boxes.size(0), " boxes but ", anchors.size(0),
              " anchors");
  const auto a = center_size(anchors.to(boxes.device(), boxes.scalar_type()));
  const auto g = center_size(boxes);
  const auto ha = a.h + kEpsilon, wa = a.w + kEpsilon;
  const auto h = g.h + kEpsilon, w = g.w + kEpsilon;
  return at::stack({(g.yc - a.yc) / ha * o.y_scale, (g.xc - a.xc) / wa * o.x_scale, at::log(h / ha) * o.height_scale,
                    at::log(w / wa) * o.width_scale},
                   1);
}

at::Tensor decode_boxes(const at::Tensor& codes, const at::Tensor& anchors, const FasterRcnnBoxCoderOptions& o) {
  check_boxes(anchors, "anchors");
  TORCH_CHECK(codes.dim() >= 2 && codes.size(-1) == 4 && codes.size(-2) == anchors.size(0), "decode_boxes: codes ",
              codes.sizes(), " do not fit ", anchors.size(0), " anchors");
  const auto a = center_size(anchors.to(codes.device(), codes.scalar_type()));
  const auto t = codes.unbind(-1);
  const auto h = at::exp(t[2] / o.height_scale) * a.h;
  const auto w = at::exp(t[3] / o.width_scale) * a.w;
  const auto yc = t[0] / o.y_scale * a.h + a.yc;
  const auto xc = t[1] / o.x_scale * a.w + a.xc;
  return at::stack({yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2}, -1);
}

at::Tensor argmax_match(const at::Tensor& similarity, const ArgMaxMatcherOptions& o) {
  TORCH_CHECK(similarity.dim() == 2, "argmax_match: similarity must be [num_gt, num_anchors], got ",
              similarity.sizes());
  if (!o.ignore_thresholds) {
    if (o.unmatched_threshold > o.matched_threshold) {
      throw Error("argmax matcher: unmatched_threshold (" + std::to_string(o.unmatched_threshold) +
                  ") must not exceed matched_threshold (" + std::to_string(o.matched_threshold) + ")");
    }
    if (o.unmatched_threshold == o.matched_threshold && !o.negatives_lower_than_unmatched) {
      throw Error(
          "argmax matcher: with negatives_lower_than_unmatched false, the matched and unmatched thresholds "
          "cannot be equal");
    }
  }
  const int64_t num_gt = similarity.size(0), num_anchors = similarity.size(1);
  const auto long_opts = similarity.options().dtype(at::kLong);
  if (num_gt == 0) return at::full({num_anchors}, kUnmatched, long_opts);

  auto [best, matches] = similarity.max(0);  // first maximal row on ties, as tf.argmax
  if (!o.ignore_thresholds) {
    const auto below = best < o.unmatched_threshold;
    const auto between = (best >= o.unmatched_threshold) & (best < o.matched_threshold);
    const int64_t below_value = o.negatives_lower_than_unmatched ? kUnmatched : kIgnored;
    const int64_t between_value = o.negatives_lower_than_unmatched ? kIgnored : kUnmatched;
    matches = matches.masked_fill(below, below_value).masked_fill(between, between_value);
  }
  if (o.force_match_for_each_row && num_anchors > 0) {
    // Each row claims its best column; where several rows claim one column the first row
    // wins (argmax of the one-hot indicators over rows).
    const auto best_col = similarity.argmax(1);                                                    // [G]
    const auto claims = best_col.unsqueeze(1) == at::arange(num_anchors, long_opts).unsqueeze(0);  // [G, A]
    const auto claimed = claims.any(0);
    const auto claiming_row = claims.to(at::kInt).argmax(0);
    matches = at::where(claimed, claiming_row, matches);
  }
  return matches;
}

at::Tensor nms(const at::Tensor& boxes, const at::Tensor& scores, float iou_threshold, int64_t max_output,
               float score_threshold) {
  check_boxes(boxes, "nms boxes");
  TORCH_CHECK(scores.dim() == 1 && scores.size(0) == boxes.size(0), "nms: scores must be [", boxes.size(0), "], got ",
              scores.sizes());
  check_iou_threshold(iou_threshold);
  const auto b = boxes.to(at::kCPU, at::kFloat).contiguous();
  const auto s = scores.to(at::kCPU, at::kFloat).contiguous();
  std::vector<int64_t> keep;
  NmsScratch scratch;
  nms_kernel(b.data_ptr<float>(), s.data_ptr<float>(), b.size(0), iou_threshold, max_output, score_threshold, &scratch,
             &keep);
  auto out = at::empty({static_cast<int64_t>(keep.size())}, at::kLong);
  std::copy(keep.begin(), keep.end(), out.data_ptr<int64_t>());
  return out;
}

Detections multiclass_nms(const at::Tensor& boxes, const at::Tensor& scores, const BatchNmsOptions& o) {
  const bool per_class = boxes.dim() == 3;  // q = num_classes: a box per class
  if (!per_class) check_boxes(boxes, "multiclass_nms boxes");
  TORCH_CHECK(scores.dim() == 2 && scores.size(0) == boxes.size(0), "multiclass_nms: scores must be [", boxes.size(0),
              ", num_classes], got ", scores.sizes());
  TORCH_CHECK(!per_class || (boxes.size(1) == scores.size(1) && boxes.size(2) == 4),
              "multiclass_nms: class-specific boxes must be [A, num_classes, 4], got ", boxes.sizes());
  check_iou_threshold(o.iou_threshold);
  const int64_t num_anchors = scores.size(0), num_classes = scores.size(1);
  // [A, 4], or [C, A, 4]: one block of boxes per class.
  const auto b = per_class ? boxes.to(at::kCPU, at::kFloat).permute({1, 0, 2}).contiguous()
                           : boxes.to(at::kCPU, at::kFloat).contiguous();
  const auto s = scores.to(at::kCPU, at::kFloat).t().contiguous();  // [C, A]: one row per class
  const float* score_data = s.data_ptr<float>();
  auto boxes_of = [&, data = b.data_ptr<float>()](int64_t c) { return data + (per_class ? c * num_anchors * 4 : 0); };

  std::vector<std::vector<int64_t>> kept(num_classes);
  at::parallel_for(0, num_classes, 1, [&](int64_t begin, int64_t end) {
    NmsScratch scratch;
    for (int64_t c = begin; c < end; ++c) {
      nms_kernel(boxes_of(c), score_data + c * num_anchors, num_anchors, o.iou_threshold, o.max_detections_per_class,
                 o.score_threshold, &scratch, &kept[c]);
    }
  });

  struct Kept {
    float score;
    int64_t cls, index;
  };
  std::vector<Kept> all;
  for (int64_t c = 0; c < num_classes; ++c) {
    for (int64_t i : kept[c]) all.push_back({score_data[c * num_anchors + i], c, i});
  }
  // Descending score; ties keep class order, then NMS order (tf.nn.top_k is stable on ties).
  std::stable_sort(all.begin(), all.end(), [](const Kept& x, const Kept& y) { return x.score > y.score; });

  const auto& w = o.clip_window;
  std::vector<float> out_boxes, out_scores;
  std::vector<int64_t> out_classes;
  for (const Kept& k : all) {
    if (o.max_total_detections > 0 && static_cast<int64_t>(out_scores.size()) >= o.max_total_detections) break;
    std::array<float, 4> box;
    std::copy_n(boxes_of(k.cls) + 4 * k.index, 4, box.begin());
    if (o.clip) {
      for (int j = 0; j < 4; ++j) box[j] = std::max(std::min(box[j], w[2 + j % 2]), w[j % 2]);
      // clip_to_window(filter_nonoverlapping=True): boxes outside the window end up flat.
      if (!((box[2] - box[0]) * (box[3] - box[1]) > 0.0f)) continue;
      if (o.change_coordinate_frame) {
        const float wh = w[2] - w[0], ww = w[3] - w[1];
        for (int j = 0; j < 4; ++j) box[j] = (box[j] - w[j % 2]) / (j % 2 ? ww : wh);
      }
    }
    out_boxes.insert(out_boxes.end(), box.begin(), box.end());
    out_scores.push_back(k.score);
    out_classes.push_back(k.cls + 1);
  }
  const auto n = static_cast<int64_t>(out_scores.size());
  Detections d;
  d.boxes = at::empty({n, 4}, at::kFloat);
  d.scores = at::empty({n}, at::kFloat);
  d.classes = at::empty({n}, at::kLong);
  std::copy(out_boxes.begin(), out_boxes.end(), d.boxes.data_ptr<float>());
  std::copy(out_scores.begin(), out_scores.end(), d.scores.data_ptr<float>());
  std::copy(out_classes.begin(), out_classes.end(), d.classes.data_ptr<int64_t>());
  return d;
}

}  // namespace orchard::detect
