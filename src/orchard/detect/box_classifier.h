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

#include "orchard/detect/box_ops.h"

namespace orchard::detect {

struct BoxClassifierOptions {
  int64_t batch_size = 64;             // second_stage_batch_size
  float balance_fraction = 0.25f;      // second_stage_balance_fraction
  float localization_weight = 1.0f;    // second_stage_localization_loss_weight
  float classification_weight = 1.0f;  // second_stage_classification_loss_weight
};

// One image's sampled proposals and their targets.
struct ProposalTargets {
  at::Tensor boxes;        // [P, 4] the sampled proposals, in their (score) order
  at::Tensor classes;      // [P] int64: the matched box's class (1-based), 0 for background
  at::Tensor reg_targets;  // [P, 4] the matched box encoded against the proposal (0 for background)
};

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
// (delta 1) on the target class's box of the positives and softmax cross entropy on all; each
// proposal's terms divided by its image's proposal count times the number of images, so the loss
// is the mean over images of the mean over their proposals; times the weights.
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

}  // namespace orchard::detect
