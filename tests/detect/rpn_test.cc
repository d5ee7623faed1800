// Faster R-CNN's first stage, worked by hand: anchor pruning and clipping, the RPN loss of a
// one-box image (which anchors are positive, negative and ignored, the Huber and softmax terms
// and their normalisation) and the proposals (NMS at 0.7, clipping to the image).
#include "orchard/detect/heads/rpn.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "orchard/detect/ops/anchors.h"

namespace orchard::detect {
namespace {

// A 2x2 grid of 32-pixel squares, stride 16, centred at (0, 0), (0, 16), (16, 0), (16, 16).
at::Tensor four_anchors() {
  GridAnchorOptions o;
  o.base_height = o.base_width = 32;
  o.scales = {1.0f};
  o.aspect_ratios = {1.0f};
  return generate_grid_anchors(o, 2, 2);
}

TEST(Rpn, TrainingPrunesAnchorsInferenceClipsThem) {
  const auto anchors = four_anchors();
  const RpnOptions o;
  const auto pruned = rpn_anchors(anchors, 32, 32, /*training=*/true, o);
  // Only the last, [0, 0, 32, 32], lies inside a 32x32 input.
  EXPECT_EQ(pruned.index.sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(pruned.index[0].item<int64_t>(), 3);
  const auto clipped = rpn_anchors(anchors, 32, 32, /*training=*/false, o);
  ASSERT_EQ(clipped.boxes.size(0), 4);
  EXPECT_TRUE(clipped.boxes[1].equal(torch::tensor({0.f, 0.f, 16.f, 32.f})));
  RpnOptions clip = o;
  clip.clip_anchors_to_image = true;
  EXPECT_EQ(rpn_anchors(anchors, 32, 32, true, clip).boxes.size(0), 4);
}

TEST(Rpn, LossOfOneBoxByHand) {
  torch::manual_seed(0);
  // Anchors (clipped as at inference, so that all four take part): [0,0,16,16], [0,0,16,32],
  // [0,0,32,16], [0,0,32,32]. The box [0,0,32,32] has IoU 1 with the last (positive), 0.5 with
  // the two halves (ignored: between 0.3 and 0.7) and 0.25 with the quarter (negative).
  const auto anchors = rpn_anchors(four_anchors(), 32, 32, false, RpnOptions()).boxes;
  const std::vector<at::Tensor> gt = {torch::tensor({0.f, 0.f, 32.f, 32.f}).view({1, 4})};
  auto codes = torch::zeros({1, 4, 4});
  codes[0][3] = torch::tensor({0.5f, 0.f, 0.f, 2.f});  // Huber 0.125 + 1.5 against a zero target
  codes[0][0] = torch::tensor({9.f, 9.f, 9.f, 9.f});   // a negative: no localization loss
  auto logits = torch::zeros({1, 4, 2});
  logits[0][1] = torch::tensor({5.f, -5.f});  // ignored: no objectness loss
  RpnOptions o;
  o.localization_weight = 2.0f;
  const auto losses = rpn_loss(codes, logits, anchors, gt, o);
  // Two sampled anchors (the positive and the negative), each with log 2 at zero logits.
  EXPECT_NEAR(losses.at("RPNLoss/localization_loss").item<float>(), 2.0f * 1.625f / 2, 1e-5);
  EXPECT_NEAR(losses.at("RPNLoss/objectness_loss").item<float>(), 2 * std::log(2.0f) / 2, 1e-5);
  // A second image without boxes: all four anchors are negatives, log 2 each over 4; the losses
  // are the means over the two images.
  const std::vector<at::Tensor> two = {gt[0], torch::zeros({0, 4})};
  const auto both = rpn_loss(torch::cat({codes, torch::zeros({1, 4, 4})}),
                             torch::cat({logits, torch::zeros({1, 4, 2})}), anchors, two, o);
  EXPECT_NEAR(both.at("RPNLoss/objectness_loss").item<float>(), (std::log(2.0f) + std::log(2.0f)) / 2, 1e-5);
  EXPECT_NEAR(both.at("RPNLoss/localization_loss").item<float>(), 1.625f / 2, 1e-5);
  // The loss reaches the predictions.
  auto leaf = codes.clone().requires_grad_(true);
  rpn_loss(leaf, logits, anchors, gt, o).at("RPNLoss/localization_loss").backward();
  EXPECT_GT(leaf.grad()[0][3].abs().sum().item<float>(), 0.f);
  EXPECT_EQ(leaf.grad()[0][0].abs().sum().item<float>(), 0.f);
}

TEST(Rpn, ProposalsAreSuppressedAndClippedToTheImage) {
  // Three anchors: two overlapping by IoU 0.8 (the weaker is suppressed at 0.7), one reaching
  // past the image's 20-pixel width (clipped to it).
  const auto anchors = torch::tensor({0.f, 0.f, 10.f, 10.f, 0.f, 0.f, 10.f, 8.f, 0.f, 12.f, 10.f, 30.f}).view({3, 4});
  const auto codes = torch::zeros({1, 3, 4});
  const auto logits = torch::tensor({0.f, 2.f, 0.f, 1.f, 0.f, 3.f}).view({1, 3, 2});
  RpnOptions o;
  const auto p = rpn_proposals(codes, logits, anchors, {{16, 20}}, o);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].boxes.size(0), 2);
  EXPECT_TRUE(p[0].boxes[0].equal(torch::tensor({0.f, 12.f, 10.f, 20.f})));  // score sigmoid(3), clipped
  EXPECT_TRUE(p[0].boxes[1].equal(torch::tensor({0.f, 0.f, 10.f, 10.f})));
  EXPECT_NEAR(p[0].scores[0].item<float>(), 1.f / (1.f + std::exp(-3.f)), 1e-6);
  o.max_proposals = 1;
  EXPECT_EQ(rpn_proposals(codes, logits, anchors, {{16, 20}}, o)[0].boxes.size(0), 1);
}

}  // namespace
}  // namespace orchard::detect
