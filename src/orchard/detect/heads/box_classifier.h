// Faster R-CNN's second stage (the box classifier) around its network: the proposals'
// minibatch and targets, the loss, and the final detections, as the OD API's
// FasterRCNNMetaArch computes them (docs/od_api_two_stage.md, sections 3.6, 3.10 and 3.11).
// Boxes in pixels of the (padded) input.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "orchard/detect/losses/ssd_loss.h"
#include "orchard/detect/ops/box_ops.h"

namespace orchard::detect {

struct BoxClassifierOptions {
  int64_t batch_size = 64;             // second_stage_batch_size
  float balance_fraction = 0.25f;      // second_stage_balance_fraction
  float localization_weight = 1.0f;    // second_stage_localization_loss_weight
  float classification_weight = 1.0f;  // second_stage_classification_loss_weight
  // second_stage_classification_loss: weighted_softmax (the OD API's default; logits divided by
  // logit_scale) or weighted_sigmoid (`sigmoid`: per-class sigmoid cross entropy, background
  // column included, summed over the classes).
  bool sigmoid = false;
  float logit_scale = 1.0f;
  // model.faster_rcnn.hard_example_miner (set: `miner.enabled`): training keeps every proposal
  // (no sampling) and the loss sums the mined ones' terms (box_classifier_loss).
  HardExampleMinerOptions miner = no_miner();

  static HardExampleMinerOptions no_miner() {
    HardExampleMinerOptions m;
    m.enabled = false;
    return m;
  }
};

// One image's sampled proposals and their targets.
struct ProposalTargets {
  at::Tensor boxes;        // [P, 4] the sampled proposals, in their (score) order
  at::Tensor classes;      // [P] int64: the matched box's class (1-based), 0 for background
  at::Tensor reg_targets;  // [P, 4] the matched box encoded against the proposal (0 for background)
  at::Tensor match;        // [P] int64: the matched ground-truth row, negative for background
  // [P, K + 1] float, background first: the matched box's k-hot labels where the ground truth
  // has several labels per box (merge_boxes_with_multiple_labels); undefined: one-hot `classes`.
  at::Tensor class_targets;
};

// utils/ops.merge_boxes_with_multiple_labels (train_config.merge_multiple_label_boxes): boxes
// [N, 4] normalised, classes [N] 1-based. Boxes whose coordinates agree once quantised to
// int64(v * 9999) become one, the first of them, in the order of their first occurrence, with
// the k-hot encoding [N', num_classes] (float, class k in column k - 1) of all their labels.
struct MergedBoxes {
  at::Tensor boxes;    // [N', 4]
  at::Tensor labels;   // [N', num_classes] float, 0 or 1
  at::Tensor classes;  // [N'] int64: the lowest label of each (1-based; the argmax of its k-hot row)
};
MergedBoxes merge_boxes_with_multiple_labels(const at::Tensor& boxes, const at::Tensor& classes, int64_t num_classes);

// Training: matches `proposals` [K, 4] to the ground truth (gt_boxes [G, 4], gt_classes [G]
// 1-based) with the detection target assigner (IoU >= 0.5: that box's class, else background;
// no forced matches), then keeps a balanced minibatch of batch_size (at most
// floor(balance_fraction * batch_size) positives, drawn from libtorch's generator) in the
// proposals' order. The ground-truth boxes are not added to the proposals (as the OD API).
ProposalTargets sample_proposals(const at::Tensor& proposals, const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                                 const BoxClassifierOptions& options);

// The same targets for every one of `proposals`, without sampling (the loss of proposals already
// sampled, or of all of them in evaluation).
ProposalTargets assign_proposals(const at::Tensor& proposals, const at::Tensor& gt_boxes, const at::Tensor& gt_classes);

// "BoxClassifierLoss/localization_loss" and "BoxClassifierLoss/classification_loss":
// refined_box_encodings [P, K, 4] (a box per class) and class_logits [P, K + 1] (background
// first) of the images' sampled proposals, concatenated image by image as in `targets`. Huber
// (delta 1) on the target class's box of the positives and softmax cross entropy (with
// options.sigmoid: sigmoid cross entropy summed over the K + 1 columns) on all, against the
// one-hot `classes` or the targets' k-hot `class_targets` (the positives' box loss then takes the
// box of `classes`, the lowest label, as the OD API's argmax of the targets); each
// proposal's terms divided by its image's proposal count times the number of images, so the loss
// is the mean over images of the mean over their proposals; times the weights. With the miner
// (options.miner.enabled, the OD API's _unpad_proposals_and_apply_hard_mining): of each image's
// proposals only those HardExampleMiner keeps contribute (NMS over the proposal boxes at
// iou_threshold ranked by their terms (BOTH: weighted by the loss weights), at most
// num_hard_examples; no negative ratio: the OD API passes no matches). TF's code returns after
// the batch's first image; Orchard mines every image.
std::map<std::string, at::Tensor> box_classifier_loss(const at::Tensor& refined_box_encodings,
                                                      const at::Tensor& class_logits,
                                                      const std::vector<ProposalTargets>& targets,
                                                      const BoxClassifierOptions& options);

// Inference, one image: each class's box decoded against its proposal (proposals [P, 4]), the
// score converter ("SOFTMAX", "SIGMOID" or "IDENTITY") without the background column, then
// per-class NMS with class-specific boxes (`nms`), clipped to the image_height x image_width
// image and normalised to it. CPU tensors.
Detections box_classifier_detections(const at::Tensor& refined_box_encodings, const at::Tensor& class_logits,
                                     const at::Tensor& proposals, int64_t image_height, int64_t image_width,
                                     BatchNmsOptions nms, const std::string& score_converter = "SOFTMAX");

// Mask R-CNN's mask targets (FasterRCNNMetaArch._loss_box_classifier): each proposal's matched
// ground-truth mask cropped at the proposal and resized bilinearly to mask_height x mask_width
// (tf.image.crop_and_resize), zeros for background. gt_masks [G, H, W] (bool or float) share the
// pixel frame of `proposals` [P, 4] (pixels, top-left origin); match [P] as ProposalTargets'.
// -> [P, mask_height, mask_width] float32 in [0, 1].
at::Tensor mask_targets(const at::Tensor& gt_masks, const at::Tensor& proposals, const at::Tensor& match,
                        int64_t mask_height, int64_t mask_width);

// "BoxClassifierLoss/mask_loss": sigmoid cross entropy of the target class's mask logits
// [P, mh, mw] against `targets` [P, mh, mw], weighted per proposal by `weights` [P] (1 for
// positives), summed and divided by max(sum(weights) * mh * mw, 1) (the mean per pixel of the
// positives over the whole batch), times `weight` (second_stage_mask_prediction_loss_weight).
at::Tensor mask_loss(const at::Tensor& mask_logits, const at::Tensor& targets, const at::Tensor& weights, float weight);

// ops.reframe_box_masks_to_image_masks: box-relative masks [K, mh, mw] of `boxes` [K, 4]
// (normalised to the image) pasted into image_height x image_width masks [K, H, W] float32, by
// crop_and_resize with each box's inverse transform (bilinear, 0 outside the box).
at::Tensor paste_box_masks(const at::Tensor& box_masks, const at::Tensor& boxes, int64_t image_height,
                           int64_t image_width);

}  // namespace orchard::detect
