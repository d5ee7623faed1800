// Faster R-CNN's first stage (the region proposal network's targets, loss and proposals) as the
// OD API's FasterRCNNMetaArch computes them: anchors pruned to the input in training and
// clipped at inference, ArgMaxMatcher 0.7 / 0.3 with one forced match per box, the
// FasterRcnnBoxCoder (10, 10, 5, 5), a balanced minibatch, Huber and softmax losses normalised
// per image by the minibatch, then NMS over all anchors and clipping to the image
// (docs/od_api_two_stage.md, sections 3.2 to 3.5). Boxes are in pixels of the (padded) input.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace orchard::detect {

struct RpnOptions {
  int64_t minibatch_size = 256;      // first_stage_minibatch_size
  float positive_fraction = 0.5f;    // first_stage_positive_balance_fraction
  float nms_score_threshold = 0.0f;  // first_stage_nms_score_threshold
  float nms_iou_threshold = 0.7f;    // first_stage_nms_iou_threshold
  int64_t max_proposals = 300;       // first_stage_max_proposals
  float localization_weight = 1.0f;  // first_stage_localization_loss_weight
  float objectness_weight = 1.0f;    // first_stage_objectness_loss_weight
  bool clip_anchors_to_image = false;
};

// The anchors of a height x width input the first stage works with. Training leaves out every
// anchor with a side outside the input (prune_outside_window: ymin < 0, xmin < 0, ymax > height
// or xmax > width) unless clip_anchors_to_image; inference (or clip_anchors_to_image) clips them
// to it. `index` [N'] int64: the rows of `anchors` kept (their predictions are gathered alike).
struct RpnAnchors {
  at::Tensor index;
  at::Tensor boxes;  // [N', 4]
};
RpnAnchors rpn_anchors(const at::Tensor& anchors, int64_t height, int64_t width, bool training,
                       const RpnOptions& options);

// The weighted losses "RPNLoss/localization_loss" and "RPNLoss/objectness_loss" of a batch:
// box_encodings [B, N, 4] and objectness_logits [B, N, 2] (background, object) for `anchors`
// [N, 4]; gt_boxes per image [G, 4]. Each image's sums are divided by its minibatch size (at
// least 1), then averaged over the batch. The minibatch draws from libtorch's generator.
std::map<std::string, at::Tensor> rpn_loss(const at::Tensor& box_encodings, const at::Tensor& objectness_logits,
                                           const at::Tensor& anchors, const std::vector<at::Tensor>& gt_boxes,
                                           const RpnOptions& options);

// One image's proposals: boxes [K, 4] (K <= max_proposals) and object probabilities [K], by
// descending score.
struct Proposals {
  at::Tensor boxes;
  at::Tensor scores;
};
// Decoded boxes, the softmax's object column, NMS over all anchors (score > threshold, IoU >
// threshold suppresses, at most max_proposals), then clipped to each image (its height and width
// inside the input) and those left without area dropped. CPU tensors, no gradient.
std::vector<Proposals> rpn_proposals(const at::Tensor& box_encodings, const at::Tensor& objectness_logits,
                                     const at::Tensor& anchors,
                                     const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                                     const RpnOptions& options);

}  // namespace orchard::detect
