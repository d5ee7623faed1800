#include "orchard/detect/losses/ssd_loss.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>

#include "orchard/core/error.h"

namespace orchard::detect {

SsdTargets assign_targets(const at::Tensor& anchors, const at::Tensor& gt_boxes, const at::Tensor& gt_classes,
                          const ArgMaxMatcherOptions& matcher, const FasterRcnnBoxCoderOptions& coder) {
  TORCH_CHECK(anchors.dim() == 2 && anchors.size(1) == 4, "anchors must be [A, 4], got ", anchors.sizes());
  TORCH_CHECK(gt_boxes.dim() == 2 && gt_boxes.size(1) == 4, "gt_boxes must be [G, 4], got ", gt_boxes.sizes());
  TORCH_CHECK(gt_classes.dim() == 1 && gt_classes.size(0) == gt_boxes.size(0), "gt_classes must be [", gt_boxes.size(0),
              "], got ", gt_classes.sizes());
  const int64_t num_anchors = anchors.size(0);
  const auto fopts = anchors.options().dtype(at::kFloat);
  const auto a = anchors.to(at::kFloat);
  SsdTargets t;
  if (gt_boxes.size(0) == 0) {
    t.match = at::full({num_anchors}, kUnmatched, fopts.dtype(at::kLong));
    t.matched = at::zeros({num_anchors}, fopts.dtype(at::kBool));
    t.cls_targets = at::zeros({num_anchors}, fopts.dtype(at::kLong));
    t.reg_targets = at::zeros({num_anchors, 4}, fopts);
    t.reg_weights = at::zeros({num_anchors}, fopts);
    t.cls_weights = at::ones({num_anchors}, fopts);
    return t;
  }
  const auto gt = gt_boxes.to(a.device(), at::kFloat);
  t.match = argmax_match(pairwise_iou(gt, a), matcher);
  t.matched = t.match >= 0;
  const auto row = t.match.clamp_min(0);  // any row; unmatched anchors are masked out below
  const auto encoded = encode_boxes(gt.index_select(0, row), a, coder);
  t.reg_targets = at::where(t.matched.unsqueeze(1), encoded, at::zeros_like(encoded));
  t.cls_targets = at::where(t.matched, gt_classes.to(a.device(), at::kLong).index_select(0, row),
                            at::zeros({num_anchors}, fopts.dtype(at::kLong)));
  t.reg_weights = t.matched.to(at::kFloat);
  t.cls_weights = (t.match != kIgnored).to(at::kFloat);
  return t;
}

MinerLossType miner_loss_type_from_name(const std::string& name) {
  if (name == "CLASSIFICATION") return MinerLossType::kClassification;
  if (name == "LOCALIZATION") return MinerLossType::kLocalization;
  if (name == "BOTH") return MinerLossType::kBoth;
  throw Error("hard_example_miner: loss_type must be CLASSIFICATION, LOCALIZATION or BOTH, not '" + name + "'");
}

at::Tensor miner_rank_losses(const at::Tensor& classification_losses, const at::Tensor& localization_losses,
                             MinerLossType type, float classification_weight, float localization_weight) {
  at::NoGradGuard no_grad;
  const auto c = classification_losses.detach().to(at::kCPU, at::kFloat);
  const auto l = localization_losses.detach().to(at::kCPU, at::kFloat);
  switch (type) {
    case MinerLossType::kClassification: return c.contiguous();
    case MinerLossType::kLocalization: return l.contiguous();
    case MinerLossType::kBoth: break;
  }
  return (c * classification_weight + l * localization_weight).contiguous();
}

MinedAnchors mine_hard_examples(const at::Tensor& decoded_boxes, const at::Tensor& losses, const at::Tensor& match,
                                const HardExampleMinerOptions& o) {
  TORCH_CHECK(match.dim() == 1 && match.size(0) == decoded_boxes.size(0), "mine_hard_examples: match must be [",
              decoded_boxes.size(0), "], got ", match.sizes());
  const int64_t num_hard = o.num_hard_examples > 0 ? o.num_hard_examples : decoded_boxes.size(0);
  auto selected = nms(decoded_boxes, losses, o.iou_threshold, num_hard);
  const auto m = match.to(at::kCPU, at::kLong).contiguous();
  const int64_t* match_data = m.data_ptr<int64_t>();
  const int64_t* sel = selected.data_ptr<int64_t>();
  const int64_t num_selected = selected.size(0);

  MinedAnchors out;
  for (int64_t k = 0; k < num_selected; ++k) out.num_positives += match_data[sel[k]] >= 0;
  if (o.max_negatives_per_positive <= 0) {
    out.indices = selected;
    out.num_negatives = num_selected - out.num_positives;
    return out;
  }
  const int64_t max_negatives = std::max(o.min_negatives_per_image, o.max_negatives_per_positive * out.num_positives);
  std::vector<int64_t> kept;
  kept.reserve(static_cast<size_t>(num_selected));
  int64_t negatives_so_far = 0;  // tf.cumsum over the negatives indicator (inclusive)
  for (int64_t k = 0; k < num_selected; ++k) {
    const int64_t mk = match_data[sel[k]];
    negatives_so_far += mk == kUnmatched;
    if (mk >= 0 || negatives_so_far <= max_negatives) kept.push_back(sel[k]);
  }
  out.num_negatives = static_cast<int64_t>(kept.size()) - out.num_positives;
  out.indices = at::empty({static_cast<int64_t>(kept.size())}, at::kLong);
  std::copy(kept.begin(), kept.end(), out.indices.data_ptr<int64_t>());
  return out;
}

std::map<std::string, at::Tensor> ssd_loss(const at::Tensor& box_encodings, const at::Tensor& class_logits,
                                           const at::Tensor& anchors, const std::vector<at::Tensor>& gt_boxes,
                                           const std::vector<at::Tensor>& gt_classes, const SsdLossOptions& o,
                                           SsdLossStats* stats) {
  TORCH_CHECK(box_encodings.dim() == 3 && box_encodings.size(2) == 4, "box_encodings must be [B, A, 4], got ",
              box_encodings.sizes());
  const int64_t batch = box_encodings.size(0), num_anchors = box_encodings.size(1);
  TORCH_CHECK(class_logits.dim() == 3 && class_logits.size(0) == batch && class_logits.size(1) == num_anchors &&
                  class_logits.size(2) >= 2,
              "class_logits must be [", batch, ", ", num_anchors, ", num_classes + 1], got ", class_logits.sizes());
  TORCH_CHECK(anchors.dim() == 2 && anchors.size(0) == num_anchors && anchors.size(1) == 4, "anchors must be [",
              num_anchors, ", 4], got ", anchors.sizes());
  TORCH_CHECK(static_cast<int64_t>(gt_boxes.size()) == batch && static_cast<int64_t>(gt_classes.size()) == batch,
              "need groundtruth for each of the ", batch, " images");
  const int64_t num_classes = class_logits.size(2) - 1;
  const auto device = box_encodings.device();
  const auto a = anchors.to(device, at::kFloat);

  std::vector<at::Tensor> cls_t, reg_t, reg_w, cls_w, match;
  for (int64_t i = 0; i < batch; ++i) {
    if (gt_classes[i].numel() > 0) {
      const auto lo = gt_classes[i].min().item<int64_t>(), hi = gt_classes[i].max().item<int64_t>();
      TORCH_CHECK(lo >= 1 && hi <= num_classes, "image ", i, ": groundtruth classes must be in 1..", num_classes,
                  ", got ", lo, "..", hi);
    }
    auto t = assign_targets(a, gt_boxes[i], gt_classes[i], o.matcher, o.coder);
    cls_t.push_back(t.cls_targets);
    reg_t.push_back(t.reg_targets);
    reg_w.push_back(t.reg_weights);
    cls_w.push_back(t.cls_weights);
    match.push_back(t.match);
  }
  const auto cls_targets = at::stack(cls_t), reg_targets = at::stack(reg_t);  // [B, A], [B, A, 4]
  const auto reg_weights = at::stack(reg_w), cls_weights = at::stack(cls_w);  // [B, A]
  const auto matches = at::stack(match);                                      // [B, A]

  // Per-anchor losses [B, A]. Huber as tf.losses.huber_loss computes it.
  const float delta = o.smooth_l1_delta;
  const auto abs_error = (box_encodings - reg_targets.to(box_encodings.scalar_type())).abs();
  const auto quadratic = abs_error.clamp_max(delta);
  const auto linear = abs_error - quadratic;
  const auto loc_losses = ((0.5 * quadratic * quadratic + delta * linear) * reg_weights.unsqueeze(2)).sum(2);

  at::Tensor cls_losses;
  if (o.classification != ClassificationLoss::kWeightedSoftmax) {
    // Sigmoid cross entropy with a one-hot target is softplus(x) off the target column and
    // softplus(-x) on it: negate the target logit instead of building one-hot targets and
    // the composite BCE (several times slower at [32, 1917, 91]). With the background
    // encoded as zeros an unmatched anchor has no target column.
    const auto target = cls_targets.unsqueeze(2);
    auto on_target = -class_logits.gather(2, target);
    if (o.encode_background_as_zeros) on_target = at::where(target > 0, on_target, -on_target);
    const auto signed_logits = class_logits.scatter(2, target, on_target);  // s: x off target, -x on it
    auto per_column = at::softplus(signed_logits);
    if (o.classification == ClassificationLoss::kWeightedSigmoidFocal) {
      // p_t = sigmoid(-s), so (1 - p_t)^gamma = sigmoid(s)^gamma.
      per_column = per_column * at::sigmoid(signed_logits).pow(o.focal_gamma);
      if (o.focal_alpha >= 0) {
        // alpha on the target columns, 1 - alpha elsewhere.
        auto alpha = at::full_like(per_column, 1.0f - o.focal_alpha);
        const auto on = o.encode_background_as_zeros
                            ? (target > 0).to(per_column.scalar_type()) * o.focal_alpha +
                                  (target == 0).to(per_column.scalar_type()) * (1.0f - o.focal_alpha)
                            : at::full_like(target, o.focal_alpha, per_column.options());
        alpha = alpha.scatter(2, target, on);
        per_column = per_column * alpha;
      }
    }
    cls_losses = per_column.sum(2) * cls_weights;
  } else {
    const auto log_p = at::log_softmax(class_logits, 2);
    cls_losses = -log_p.gather(2, cls_targets.unsqueeze(2)).squeeze(2) * cls_weights;
    // An all-zeros target contributes nothing to a softmax cross entropy.
    if (o.encode_background_as_zeros) cls_losses = cls_losses * (cls_targets > 0).to(cls_losses.scalar_type());
  }

  at::Tensor loc_sum, cls_sum;
  int64_t mined_positives = 0, mined_negatives = 0;
  if (o.miner.enabled) {
    at::Tensor decoded, rank_losses;
    {
      at::NoGradGuard no_grad;
      decoded = decode_boxes(box_encodings.detach().to(at::kFloat), a, o.coder).to(at::kCPU).contiguous();
      rank_losses =
          miner_rank_losses(cls_losses, loc_losses, o.miner.loss_type, o.classification_weight, o.localization_weight);
    }
    const auto matches_cpu = matches.to(at::kCPU);
    std::vector<MinedAnchors> mined(static_cast<size_t>(batch));
    at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        mined[i] = mine_hard_examples(decoded[i], rank_losses[i], matches_cpu[i], o.miner);
      }
    });
    std::vector<at::Tensor> flat;
    for (int64_t i = 0; i < batch; ++i) {
      flat.push_back(mined[i].indices + i * num_anchors);
      mined_positives += mined[i].num_positives;
      mined_negatives += mined[i].num_negatives;
    }
    const auto index = at::cat(flat).to(device);
    loc_sum = loc_losses.reshape(-1).index_select(0, index).sum();
    cls_sum = cls_losses.reshape(-1).index_select(0, index).sum();
  } else {
    loc_sum = loc_losses.sum();
    cls_sum = cls_losses.sum();
  }

  const auto num_matches = reg_weights.sum();
  auto normalizer = o.normalize_loss_by_num_matches ? num_matches.clamp_min(1.0) : at::ones({}, num_matches.options());
  const auto loc_normalizer = o.normalize_loc_loss_by_codesize ? normalizer * 4 : normalizer;
  if (stats) {
    stats->num_matches = static_cast<int64_t>(num_matches.item<float>());
    stats->mined_positives = mined_positives;
    stats->mined_negatives = mined_negatives;
  }
  return {{"localization_loss", loc_sum * o.localization_weight / loc_normalizer},
          {"classification_loss", cls_sum * o.classification_weight / normalizer}};
}

}  // namespace orchard::detect
