#include "orchard/detect/heads/box_classifier.h"

#include <torch/torch.h>

#include <array>
#include <map>

#include "orchard/core/error.h"
#include "orchard/detect/losses/ssd_loss.h"
#include "orchard/detect/ops/crop_and_resize.h"
#include "orchard/detect/ops/sampler.h"

namespace orchard::detect {

namespace {

// create_target_assigner('FasterRCNN', 'detection').
SsdTargets detection_assignment(const at::Tensor& proposals, const at::Tensor& gt_boxes, const at::Tensor& gt_classes) {
  ArgMaxMatcherOptions matcher;
  matcher.matched_threshold = 0.5f;
  matcher.unmatched_threshold = 0.5f;
  matcher.negatives_lower_than_unmatched = true;
  matcher.force_match_for_each_row = false;
  return assign_targets(proposals, gt_boxes, gt_classes, matcher, FasterRcnnBoxCoderOptions());
}

}  // namespace

ProposalTargets assign_proposals(const at::Tensor& proposals, const at::Tensor& gt_boxes,
                                 const at::Tensor& gt_classes) {
  const SsdTargets t = detection_assignment(proposals, gt_boxes, gt_classes);
  return {proposals, t.cls_targets, t.reg_targets, t.match};
}

ProposalTargets sample_proposals(const at::Tensor& proposals, const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                                 const BoxClassifierOptions& options) {
  const SsdTargets t = detection_assignment(proposals, gt_boxes, gt_classes);
  const auto sampled = balanced_sample(t.cls_weights > 0, t.matched, options.batch_size, options.balance_fraction);
  const auto rows = sampled.nonzero().view(-1);  // ascending: the proposals' order
  return {proposals.index_select(0, rows), t.cls_targets.index_select(0, rows), t.reg_targets.index_select(0, rows),
          t.match.index_select(0, rows)};
}

MergedBoxes merge_boxes_with_multiple_labels(const at::Tensor& boxes, const at::Tensor& classes, int64_t num_classes) {
  if (boxes.dim() != 2 || boxes.size(1) != 4 || classes.dim() != 1 || classes.size(0) != boxes.size(0))
    throw Error("merge_boxes_with_multiple_labels: boxes must be [N, 4] and classes [N]");
  const auto b = boxes.to(torch::kCPU, torch::kFloat).contiguous();
  const auto c = classes.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t n = b.size(0);
  const auto bv = b.accessor<float, 2>();
  const auto cv = c.accessor<int64_t, 1>();
  std::map<std::array<int64_t, 4>, int64_t> unique;  // quantised corners -> merged row
  std::vector<int64_t> first;
  auto labels = torch::zeros({n, num_classes}, torch::kFloat);
  auto lv = labels.accessor<float, 2>();
  for (int64_t i = 0; i < n; ++i) {
    std::array<int64_t, 4> key{};
    for (int j = 0; j < 4; ++j) key[static_cast<size_t>(j)] = static_cast<int64_t>(bv[i][j] * 9999.0f);
    const auto [it, inserted] = unique.emplace(key, static_cast<int64_t>(first.size()));
    if (inserted) first.push_back(i);
    if (cv[i] < 1 || cv[i] > num_classes)
      throw Error("merge_boxes_with_multiple_labels: class " + std::to_string(cv[i]) + " outside 1.." +
                  std::to_string(num_classes));
    lv[it->second][cv[i] - 1] = 1.0f;
  }
  const int64_t m = static_cast<int64_t>(first.size());
  MergedBoxes out;
  out.boxes = b.index_select(0, torch::tensor(first, torch::kLong)).to(boxes.device());
  out.labels = labels.narrow(0, 0, m).to(boxes.device());
  out.classes =
      m > 0 ? out.labels.argmax(1) + 1 : torch::zeros({0}, torch::TensorOptions(torch::kLong).device(boxes.device()));
  return out;
}

std::map<std::string, at::Tensor> box_classifier_loss(const at::Tensor& refined_box_encodings,
                                                      const at::Tensor& class_logits,
                                                      const std::vector<ProposalTargets>& targets,
                                                      const BoxClassifierOptions& options) {
  if (refined_box_encodings.dim() != 3 || refined_box_encodings.size(2) != 4 || class_logits.dim() != 2 ||
      class_logits.size(1) != refined_box_encodings.size(1) + 1 ||
      class_logits.size(0) != refined_box_encodings.size(0))
    throw Error("box_classifier_loss: refined_box_encodings must be [P, K, 4] and class_logits [P, K + 1]");
  const double images = static_cast<double>(std::max<size_t>(targets.size(), 1));
  auto localization = torch::zeros({}, refined_box_encodings.options());
  auto classification = torch::zeros({}, refined_box_encodings.options());
  int64_t offset = 0;
  for (const auto& t : targets) {
    const int64_t n = t.classes.size(0);
    if (n == 0) continue;
    if (offset + n > refined_box_encodings.size(0)) throw Error("box_classifier_loss: more targets than predictions");
    const auto encodings = refined_box_encodings.narrow(0, offset, n);
    const auto logits = class_logits.narrow(0, offset, n);
    const auto classes = t.classes.to(encodings.device(), torch::kLong);
    const auto positive = (classes > 0).to(encodings.scalar_type());
    // The box of each proposal's target class (background rows pick class 1, weight 0).
    const auto row = (classes - 1).clamp_min(0).view({n, 1, 1}).expand({n, 1, 4});
    const auto chosen = encodings.gather(1, row).squeeze(1);
    const auto diff = (chosen - t.reg_targets.to(encodings.device())).abs();
    const auto huber = torch::where(diff <= 1.0, 0.5 * diff * diff, diff - 0.5).sum(1);
    const double scale = 1.0 / (static_cast<double>(n) * images);
    auto loc = huber * positive * scale;
    // Each proposal's one-hot (or k-hot) targets, background first.
    const auto targets = t.class_targets.defined() ? t.class_targets.to(logits.device(), logits.scalar_type())
                                                   : torch::one_hot(classes, logits.size(1)).to(logits.scalar_type());
    auto cls = options.sigmoid
                   ? torch::binary_cross_entropy_with_logits(logits, targets, {}, {}, at::Reduction::None).sum(1)
                   : -(targets * torch::log_softmax(logits / options.logit_scale, 1)).sum(1);
    cls = cls * scale;
    if (options.miner.enabled) {
      const auto rank = miner_rank_losses(cls, loc, options.miner.loss_type, options.classification_weight,
                                          options.localization_weight);
      HardExampleMinerOptions m = options.miner;
      m.max_negatives_per_positive = 0;  // no matches passed: the NMS selection as it is
      const auto kept =
          mine_hard_examples(t.boxes.detach().to(torch::kCPU, torch::kFloat), rank, t.match.to(torch::kCPU), m)
              .indices.to(encodings.device());
      loc = loc.index_select(0, kept);
      cls = cls.index_select(0, kept);
    }
    localization = localization + loc.sum();
    classification = classification + cls.sum();
    offset += n;
  }
  if (offset != refined_box_encodings.size(0)) throw Error("box_classifier_loss: fewer targets than predictions");
  return {{"BoxClassifierLoss/localization_loss", localization * options.localization_weight},
          {"BoxClassifierLoss/classification_loss", classification * options.classification_weight}};
}

Detections box_classifier_detections(const at::Tensor& refined_box_encodings, const at::Tensor& class_logits,
                                     const at::Tensor& proposals, int64_t image_height, int64_t image_width,
                                     BatchNmsOptions nms, const std::string& score_converter) {
  torch::NoGradGuard no_grad;
  const auto codes = refined_box_encodings.detach().to(torch::kCPU, torch::kFloat);
  const auto logits = class_logits.detach().to(torch::kCPU, torch::kFloat);
  // [K, P, 4] against the proposals, back to [P, K, 4].
  const auto boxes = decode_boxes(codes.permute({1, 0, 2}), proposals.detach().to(torch::kCPU, torch::kFloat),
                                  FasterRcnnBoxCoderOptions())
                         .permute({1, 0, 2})
                         .contiguous();
  at::Tensor scores;
  if (score_converter == "SOFTMAX") scores = logits.softmax(1);
  else if (score_converter == "SIGMOID") scores = logits.sigmoid();
  else scores = logits;
  scores = scores.narrow(1, 1, scores.size(1) - 1).contiguous();
  nms.clip = true;
  nms.clip_window = {0.0f, 0.0f, static_cast<float>(image_height), static_cast<float>(image_width)};
  nms.change_coordinate_frame = true;
  return multiclass_nms(boxes, scores, nms);
}

at::Tensor mask_targets(const at::Tensor& gt_masks, const at::Tensor& proposals, const at::Tensor& match,
                        int64_t mask_height, int64_t mask_width) {
  if (gt_masks.dim() != 3 || proposals.dim() != 2 || proposals.size(1) != 4 || match.dim() != 1 ||
      match.size(0) != proposals.size(0))
    throw Error("mask_targets: gt_masks must be [G, H, W], proposals [P, 4] and match [P]");
  const int64_t p = proposals.size(0);
  auto out = torch::zeros({p, mask_height, mask_width}, proposals.options().dtype(torch::kFloat));
  const auto positive = (match >= 0).nonzero().view(-1);
  if (positive.numel() == 0 || gt_masks.size(0) == 0) return out;
  // The proposals normalised to the masks' frame: pixel y on a mask of height H is y / H, the
  // OD API's normalisation by the image size.
  const float h = static_cast<float>(gt_masks.size(1)), w = static_cast<float>(gt_masks.size(2));
  const auto scale = torch::tensor({h, w, h, w}, proposals.options().dtype(torch::kFloat));
  const auto boxes = proposals.index_select(0, positive).to(torch::kFloat) / scale;
  const auto crops = crop_and_resize(gt_masks.to(torch::kFloat).unsqueeze(1), boxes,
                                     match.index_select(0, positive).to(torch::kLong), mask_height, mask_width);
  return out.index_copy(0, positive, crops.squeeze(1));
}

at::Tensor mask_loss(const at::Tensor& mask_logits, const at::Tensor& targets, const at::Tensor& weights,
                     float weight) {
  if (mask_logits.dim() != 3 || targets.sizes() != mask_logits.sizes() || weights.dim() != 1 ||
      weights.size(0) != mask_logits.size(0))
    throw Error("mask_loss: mask_logits and targets must be [P, mh, mw] and weights [P]");
  const auto w = weights.to(mask_logits.dtype());
  const auto ce = torch::nn::functional::binary_cross_entropy_with_logits(
      mask_logits, targets.to(mask_logits.dtype()),
      torch::nn::functional::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
  const auto pixels = static_cast<double>(mask_logits.size(1) * mask_logits.size(2));
  const auto normaliser = torch::clamp_min(w.sum() * pixels, 1.0);
  return (ce.sum({1, 2}) * w).sum() / normaliser * weight;
}

at::Tensor paste_box_masks(const at::Tensor& box_masks, const at::Tensor& boxes, int64_t image_height,
                           int64_t image_width) {
  if (box_masks.dim() != 3 || boxes.dim() != 2 || boxes.size(1) != 4 || boxes.size(0) != box_masks.size(0))
    throw Error("paste_box_masks: box_masks must be [K, mh, mw] and boxes [K, 4]");
  const int64_t k = box_masks.size(0);
  if (k == 0) return torch::zeros({0, image_height, image_width}, box_masks.options().dtype(torch::kFloat));
  // The unit square in the frame of each box: its corners map to the box, (0, 0) and (1, 1) of
  // the image to (-y1 / h, -x1 / w) and ((1 - y1) / h, (1 - x1) / w).
  const auto b = boxes.to(torch::kFloat);
  const auto y1 = b.select(1, 0), x1 = b.select(1, 1);
  const auto h = (b.select(1, 2) - y1).clamp_min(1e-4), w = (b.select(1, 3) - x1).clamp_min(1e-4);  // as TF's
  const auto inverse = torch::stack({-y1 / h, -x1 / w, (1 - y1) / h, (1 - x1) / w}, 1);
  return crop_and_resize(box_masks.to(torch::kFloat).unsqueeze(1), inverse, torch::arange(k, torch::kLong),
                         image_height, image_width)
      .squeeze(1);
}

}  // namespace orchard::detect
