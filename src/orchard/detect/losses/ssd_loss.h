// SSD training targets and loss, as the TF OD API computes them: TargetAssigner with an
// IoU similarity, ArgMaxMatcher and FasterRcnnBoxCoder (core/target_assigner.py), the
// weighted smooth L1, sigmoid, softmax and sigmoid focal losses and the HardExampleMiner
// (core/losses.py), combined and normalised as SSDMetaArch.loss does
// (meta_architectures/ssd_meta_arch.py).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "orchard/detect/ops/box_ops.h"

namespace orchard::detect {

// One image's targets over its A anchors, on the anchors' device.
struct SsdTargets {
  at::Tensor cls_targets;  // [A] int64: the matched class (1-based), 0 = background (also ignored)
  at::Tensor reg_targets;  // [A, 4] float32: encoded matched box, 0 where not matched
  at::Tensor reg_weights;  // [A] float32: 1 for positives, else 0
  at::Tensor cls_weights;  // [A] float32: 0 for ignored anchors, else 1
  at::Tensor matched;      // [A] bool: positive
  at::Tensor match;        // [A] int64: argmax_match's result (gt row, kUnmatched, kIgnored)
};

// anchors [A, 4], gt_boxes [G, 4] normalised, gt_classes [G] int64 in 1..num_classes.
// G == 0: every anchor is background with weight 1.
SsdTargets assign_targets(const at::Tensor& anchors, const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                          const ArgMaxMatcherOptions& matcher, const FasterRcnnBoxCoderOptions& coder);

enum class ClassificationLoss {
  kWeightedSigmoid,  // sigmoid cross entropy on one-hot targets over all num_classes + 1 columns
  kWeightedSoftmax,  // softmax cross entropy with the class index
  // SigmoidFocalClassificationLoss: each column's sigmoid cross entropy times
  // alpha_t (1 - p_t)^gamma, p_t the probability of its target, alpha_t alpha on target
  // columns and 1 - alpha off them (no alpha: 1).
  kWeightedSigmoidFocal,
};

// What the miner ranks anchors by.
enum class MinerLossType { kClassification, kLocalization, kBoth };
// "CLASSIFICATION", "LOCALIZATION" or "BOTH" (the proto enum's names); throws orchard::Error.
MinerLossType miner_loss_type_from_name(const std::string& name);

// ssd_mobilenet_v2_coco's hard_example_miner { ... }.
struct HardExampleMinerOptions {
  bool enabled = true;
  int64_t num_hard_examples = 3000;  // <= 0: all anchors
  float iou_threshold = 0.99f;       // NMS over the decoded predicted boxes, by loss
  MinerLossType loss_type = MinerLossType::kClassification;
  int64_t max_negatives_per_positive = 3;  // <= 0: no ratio, keep what NMS keeps
  int64_t min_negatives_per_image = 3;
};

struct SsdLossOptions {
  ClassificationLoss classification = ClassificationLoss::kWeightedSigmoid;
  float focal_gamma = 2.0f;   // weighted_sigmoid_focal's gamma
  float focal_alpha = -1.0f;  // weighted_sigmoid_focal's alpha; < 0: unset (no alpha weighting)
  // model.ssd.encode_background_as_zeros: an unmatched anchor's target is all zeros (the
  // background column too) rather than one-hot on the background column.
  bool encode_background_as_zeros = false;
  float smooth_l1_delta = 1.0f;
  float classification_weight = 1.0f;
  float localization_weight = 1.0f;
  bool normalize_loss_by_num_matches = true;
  bool normalize_loc_loss_by_codesize = false;
  HardExampleMinerOptions miner;
  FasterRcnnBoxCoderOptions coder;
  ArgMaxMatcherOptions matcher;
};

// The anchors the miner keeps for one image.
struct MinedAnchors {
  at::Tensor indices;  // [K] int64 on the CPU, by descending loss
  int64_t num_positives = 0;
  int64_t num_negatives = 0;  // K - num_positives (TF counts kept ignored anchors here too)
};

// What HardExampleMiner ranks by: the classification or the localization losses, or (BOTH)
// their sum weighted by the loss weights; float on the CPU, contiguous, without gradient.
at::Tensor miner_rank_losses(const at::Tensor& classification_losses, const at::Tensor& localization_losses,
                             MinerLossType type, float classification_weight, float localization_weight);

// HardExampleMiner for one image: NMS over decoded_boxes [A, 4] ranked by losses [A]
// (at most num_hard_examples), then all positives and the first
// max(min_negatives_per_image, max_negatives_per_positive * positives) negatives of that
// ranking. match [A] is the matcher's result. Like TF, an ignored anchor is kept when it
// ranks before the last kept negative (its loss is 0, so this only shows in the counts).
MinedAnchors mine_hard_examples(const at::Tensor& decoded_boxes, const at::Tensor& losses, const at::Tensor& match,
                                const HardExampleMinerOptions& options);

// Batch totals, for summaries (TF logs the per-image means of the mined counts).
struct SsdLossStats {
  int64_t num_matches = 0;      // positive anchors in the batch
  int64_t mined_positives = 0;  // summed over images; 0 without the miner
  int64_t mined_negatives = 0;
};

// box_encodings [B, A, 4], class_logits [B, A, num_classes + 1] (column 0 = background),
// anchors [A, 4]; per image gt_boxes[i] [G_i, 4] normalised and gt_classes[i] [G_i] int64
// 1-based. Returns {"localization_loss", "classification_loss"}: scalars, already weighted
// and divided by max(1, positive anchors in the batch), differentiable wrt box_encodings
// and class_logits; with the miner only the mined anchors contribute (the choice itself is
// not differentiated). The miner's NMS runs on the CPU.
std::map<std::string, at::Tensor> ssd_loss(const at::Tensor& box_encodings, const at::Tensor& class_logits,
                                           const at::Tensor& anchors, const std::vector<at::Tensor>& gt_boxes,
                                           const std::vector<at::Tensor>& gt_classes, const SsdLossOptions& options,
                                           SsdLossStats* stats = nullptr);

}  // namespace orchard::detect
