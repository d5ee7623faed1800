// Box operations of the TF Object Detection API (object_detection/core/box_list_ops.py,
// box_coders/faster_rcnn_box_coder.py, matchers/argmax_matcher.py, core/post_processing.py
// and the tf.image.non_max_suppression kernel), with the same semantics so that a model
// trained here behaves like one trained there.
//
// Boxes are float32 [N, 4] (ymin, xmin, ymax, xmax), normalised to [0, 1] by the image
// height and width: the TF OD API's order, not torchvision's (x1, y1, x2, y2).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <limits>

namespace orchard::detect {

// (ymax - ymin) * (xmax - xmin): [N, 4] -> [N]. Not clamped: a box with ymax < ymin has a
// negative area, as in box_list_ops.area.
at::Tensor box_area(const at::Tensor& boxes);

// IoU of every box of `a` [N, 4] with every box of `b` [M, 4] -> [N, M] float32, 0 where
// the boxes do not intersect (which covers a zero union), as box_list_ops.iou.
at::Tensor pairwise_iou(const at::Tensor& a, const at::Tensor& b);

// FasterRcnnBoxCoder: codes (ty, tx, th, tw) =
//   (y_scale * (yc - yc_a) / h_a, x_scale * (xc - xc_a) / w_a,
//    height_scale * log(h / h_a), width_scale * log(w / w_a)),
// where every height and width gets +1e-8 before use when encoding (TF's EPSILON, so a
// zero-sized box encodes to finite codes) and not when decoding.
struct FasterRcnnBoxCoderOptions {
  float y_scale = 10.0f;
  float x_scale = 10.0f;
  float height_scale = 5.0f;
  float width_scale = 5.0f;
};

// boxes [N, 4] and anchors [N, 4] -> codes [N, 4] float32.
at::Tensor encode_boxes(const at::Tensor& boxes, const at::Tensor& anchors, const FasterRcnnBoxCoderOptions& options);
// codes [..., N, 4] (e.g. [B, N, 4]: the anchors broadcast over leading dims) and anchors
// [N, 4] -> boxes of the shape of `codes`. Differentiable wrt `codes`.
at::Tensor decode_boxes(const at::Tensor& codes, const at::Tensor& anchors, const FasterRcnnBoxCoderOptions& options);

// ArgMaxMatcher: each anchor (column) takes the groundtruth row of highest similarity;
// below unmatched_threshold it is a negative, in [unmatched, matched) it is ignored (with
// negatives_lower_than_unmatched; swapped otherwise), and with force_match_for_each_row
// every groundtruth row also claims its best anchor, whatever the thresholds (the lowest
// row wins where two rows claim the same anchor). ignore_thresholds matches every anchor
// to its argmax row (TF's matched_threshold=None).
struct ArgMaxMatcherOptions {
  float matched_threshold = 0.5f;
  float unmatched_threshold = 0.5f;
  bool negatives_lower_than_unmatched = true;
  bool force_match_for_each_row = true;
  bool ignore_thresholds = false;
};

inline constexpr int64_t kUnmatched = -1;  // a negative anchor (background)
inline constexpr int64_t kIgnored = -2;    // neither positive nor negative: no loss

// similarity [num_gt, num_anchors] -> [num_anchors] int64: >= 0 the matched groundtruth
// row, kUnmatched or kIgnored. num_gt == 0 gives all kUnmatched. Throws orchard::Error on
// inconsistent thresholds (unmatched > matched, or equal without
// negatives_lower_than_unmatched), as the TF constructor does.
at::Tensor argmax_match(const at::Tensor& similarity, const ArgMaxMatcherOptions& options);

// Greedy NMS with tf.image.non_max_suppression semantics: candidates with
// score > score_threshold, visited by descending score (ties: lower index first); one is
// dropped when its IoU with an already kept box is > iou_threshold (strictly); stops after
// max_output kept boxes (< 0: no limit). IoU as the TF kernel computes it: corners are
// ordered first, and a box of zero area overlaps nothing.
// boxes [N, 4], scores [N] (float32, any device; it runs on the CPU) -> kept indices [K]
// int64 on the CPU, by descending score. Throws orchard::Error unless 0 <= iou_threshold <= 1
// (as the TF op).
at::Tensor nms(const at::Tensor& boxes, const at::Tensor& scores, float iou_threshold, int64_t max_output = -1,
               float score_threshold = -std::numeric_limits<float>::infinity());

// ssd_mobilenet_v2_coco's post_processing { batch_non_max_suppression { ... } }.
struct BatchNmsOptions {
  float score_threshold = 1e-8f;
  float iou_threshold = 0.6f;
  int64_t max_detections_per_class = 100;  // < 0: no limit
  int64_t max_total_detections = 100;      // <= 0: no limit (TF's max_total_size = 0)
  // SSDMetaArch.postprocess always passes a clip window (the true image inside the padded
  // input; the whole image here): kept boxes are clipped to it and those left with zero
  // area dropped, before the max_total_detections cut.
  bool clip = true;
  std::array<float, 4> clip_window{0.0f, 0.0f, 1.0f, 1.0f};  // ymin, xmin, ymax, xmax
  // After clipping, express boxes relative to the window (a no-op for the whole image).
  bool change_coordinate_frame = false;
};

// One image's detections, by descending score. CPU tensors.
struct Detections {
  at::Tensor boxes;    // [K, 4] float32, normalised
  at::Tensor scores;   // [K] float32
  at::Tensor classes;  // [K] int64, 1-based (column c of `scores` is class c + 1)
  // Mask R-CNN: [K, mask_height, mask_width] float32 mask probabilities in each box's frame
  // (paste_box_masks puts them into the image); undefined for models without masks.
  at::Tensor masks;
};

// TF multiclass_non_max_suppression for one image with one box per anchor shared by all
// classes (q = 1): per class, score threshold + NMS + max_detections_per_class; then all
// classes merged by descending score (ties: lower class, then NMS order), clipped, and
// cut to max_total_detections.
// boxes [A, 4] decoded, scores [A, num_classes] after the score converter with the
// background column removed. Class-specific boxes (q = num_classes, Faster R-CNN's second
// stage): boxes [A, num_classes, 4], each class suppressed and reported with its own.
Detections multiclass_nms(const at::Tensor& boxes, const at::Tensor& scores, const BatchNmsOptions& options);

}  // namespace orchard::detect
