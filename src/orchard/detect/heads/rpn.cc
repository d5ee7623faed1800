#include "orchard/detect/heads/rpn.h"

#include <torch/torch.h>

#include "orchard/core/error.h"
#include "orchard/detect/losses/ssd_loss.h"
#include "orchard/detect/ops/box_ops.h"
#include "orchard/detect/ops/sampler.h"

namespace orchard::detect {
namespace {

// create_target_assigner('FasterRCNN', 'proposal').
ArgMaxMatcherOptions proposal_matcher() {
  ArgMaxMatcherOptions m;
  m.matched_threshold = 0.7f;
  m.unmatched_threshold = 0.3f;
  m.force_match_for_each_row = true;
  m.negatives_lower_than_unmatched = true;
  return m;
}

}  // namespace

RpnAnchors rpn_anchors(const at::Tensor& anchors, int64_t height, int64_t width, bool training,
                       const RpnOptions& options) {
  const auto h = static_cast<double>(height), w = static_cast<double>(width);
  RpnAnchors out;
  if (training && !options.clip_anchors_to_image) {
    const auto inside = (anchors.select(1, 0) >= 0) & (anchors.select(1, 1) >= 0) & (anchors.select(1, 2) <= h) &
                        (anchors.select(1, 3) <= w);
    out.index = inside.nonzero().view(-1);
    out.boxes = anchors.index_select(0, out.index);
    return out;
  }
  out.index = torch::arange(anchors.size(0), anchors.options().dtype(torch::kLong));
  out.boxes = torch::stack({anchors.select(1, 0).clamp(0, h), anchors.select(1, 1).clamp(0, w),
                            anchors.select(1, 2).clamp(0, h), anchors.select(1, 3).clamp(0, w)},
                           1);
  return out;
}

std::map<std::string, at::Tensor> rpn_loss(const at::Tensor& box_encodings, const at::Tensor& objectness_logits,
                                           const at::Tensor& anchors, const std::vector<at::Tensor>& gt_boxes,
                                           const RpnOptions& options) {
  const int64_t batch = box_encodings.size(0);
  if (static_cast<int64_t>(gt_boxes.size()) != batch) throw Error("rpn_loss: one groundtruth list per image");
  const FasterRcnnBoxCoderOptions coder;  // 10, 10, 5, 5
  auto localization = torch::zeros({}, box_encodings.options());
  auto objectness = torch::zeros({}, box_encodings.options());
  for (int64_t b = 0; b < batch; ++b) {
    const auto& gt = gt_boxes[static_cast<size_t>(b)];
    const auto classes = torch::ones({gt.size(0)}, gt.options().dtype(torch::kLong));
    const SsdTargets t = assign_targets(anchors, gt, classes, proposal_matcher(), coder);
    const auto sampled =
        balanced_sample(t.cls_weights > 0, t.matched, options.minibatch_size, options.positive_fraction)
            .to(box_encodings.scalar_type());
    const auto count = sampled.sum().clamp_min(1.0);
    // tf.losses.huber_loss (delta 1) summed over the four coordinates.
    const auto diff = (box_encodings[b] - t.reg_targets).abs();
    const auto huber = torch::where(diff <= 1.0, 0.5 * diff * diff, diff - 0.5).sum(1);
    localization = localization + (huber * sampled * t.reg_weights).sum() / count;
    const auto ce =
        torch::nn::functional::cross_entropy(objectness_logits[b], t.matched.to(torch::kLong),
                                             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    objectness = objectness + (ce * sampled).sum() / count;
  }
  const double per_image = 1.0 / static_cast<double>(std::max<int64_t>(batch, 1));
  return {{"RPNLoss/localization_loss", localization * (per_image * options.localization_weight)},
          {"RPNLoss/objectness_loss", objectness * (per_image * options.objectness_weight)}};
}

std::vector<Proposals> rpn_proposals(const at::Tensor& box_encodings, const at::Tensor& objectness_logits,
                                     const at::Tensor& anchors,
                                     const std::vector<std::pair<int64_t, int64_t>>& image_sizes,
                                     const RpnOptions& options) {
  torch::NoGradGuard no_grad;
  const int64_t batch = box_encodings.size(0);
  if (static_cast<int64_t>(image_sizes.size()) != batch) throw Error("rpn_proposals: one image size per image");
  const FasterRcnnBoxCoderOptions coder;
  const auto codes = box_encodings.detach().to(torch::kCPU, torch::kFloat);
  const auto probabilities = objectness_logits.detach().to(torch::kCPU, torch::kFloat).softmax(2).select(2, 1);
  const auto decoded = decode_boxes(codes, anchors.detach().to(torch::kCPU, torch::kFloat), coder);
  std::vector<Proposals> out;
  for (int64_t b = 0; b < batch; ++b) {
    BatchNmsOptions nms;
    nms.score_threshold = options.nms_score_threshold;
    nms.iou_threshold = options.nms_iou_threshold;
    nms.max_detections_per_class = options.max_proposals;
    nms.max_total_detections = options.max_proposals;
    nms.clip = true;
    const auto [h, w] = image_sizes[static_cast<size_t>(b)];
    nms.clip_window = {0.0f, 0.0f, static_cast<float>(h), static_cast<float>(w)};
    const Detections d = multiclass_nms(decoded[b].contiguous(), probabilities[b].unsqueeze(1).contiguous(), nms);
    out.push_back({d.boxes, d.scores});
  }
  return out;
}

}  // namespace orchard::detect
