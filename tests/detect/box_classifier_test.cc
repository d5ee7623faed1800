// Faster R-CNN's second stage around its network, worked by hand: which proposals become
// positives and how many are sampled, the loss's per-image normalisation, and the final
// detections with class-specific boxes clipped to the image and normalised to it.
#include "orchard/detect/heads/box_classifier.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace orchard::detect {
namespace {

TEST(BoxClassifier, SampleProposalsMatchesAtHalfAndBalances) {
  torch::manual_seed(0);
  // A 10x10 box of class 2; proposals: itself (IoU 1), shifted by 2 (IoU 80/120 = 0.67), shifted
  // by 5 (IoU 50/150 = 0.33: background), three far away (background).
  const auto gt = torch::tensor({0.f, 0.f, 10.f, 10.f}).view({1, 4});
  const auto classes = torch::tensor({2}, torch::kLong);
  const auto proposals = torch::tensor({0.f,  0.f,  10.f, 10.f, 0.f,  2.f,  10.f, 12.f, 0.f,  5.f,  10.f, 15.f,
                                        50.f, 50.f, 60.f, 60.f, 70.f, 70.f, 80.f, 80.f, 90.f, 90.f, 99.f, 99.f})
                             .view({6, 4});
  BoxClassifierOptions o;
  o.batch_size = 4;
  o.balance_fraction = 0.5f;  // two positives at most: both
  auto t = sample_proposals(proposals, gt, classes, o);
  ASSERT_EQ(t.classes.size(0), 4);
  EXPECT_EQ(t.classes[0].item<int64_t>(), 2);  // the proposals' order is kept
  EXPECT_EQ(t.classes[1].item<int64_t>(), 2);
  EXPECT_EQ(t.classes[2].item<int64_t>(), 0);
  EXPECT_EQ(t.classes[3].item<int64_t>(), 0);
  EXPECT_TRUE(t.boxes[0].equal(proposals[0]));
  EXPECT_NEAR(t.reg_targets[0].abs().sum().item<float>(), 0.f, 1e-5);  // the box itself
  // tx = 10 * (5 - 7) / 10 = -2 for the shifted one.
  EXPECT_NEAR(t.reg_targets[1][1].item<float>(), -2.f, 1e-5);
  EXPECT_NEAR(t.reg_targets[1][0].item<float>(), 0.f, 1e-5);
  o.balance_fraction = 0.25f;  // one positive at most
  t = sample_proposals(proposals, gt, classes, o);
  EXPECT_EQ((t.classes > 0).sum().item<int64_t>(), 1);
  EXPECT_EQ(t.classes.size(0), 4);
  // No boxes: every proposal is background.
  t = sample_proposals(proposals, torch::zeros({0, 4}), torch::zeros({0}, torch::kLong), o);
  EXPECT_EQ(t.classes.size(0), 4);
  EXPECT_EQ((t.classes > 0).sum().item<int64_t>(), 0);
}

TEST(BoxClassifier, LossIsTheMeanOverImagesOfTheMeanOverProposals) {
  // Image A: a positive of class 2 (target [0.5, 0, 0, 2]) and a background proposal; image B: a
  // positive of class 1 (target 0). K = 2, logits 0: log 3 each.
  std::vector<ProposalTargets> targets(2);
  targets[0].classes = torch::tensor({2, 0}, torch::kLong);
  targets[0].reg_targets = torch::tensor({0.5f, 0.f, 0.f, 2.f, 0.f, 0.f, 0.f, 0.f}).view({2, 4});
  targets[1].classes = torch::tensor({1}, torch::kLong);
  targets[1].reg_targets = torch::zeros({1, 4});
  auto encodings = torch::zeros({3, 2, 4});
  encodings[1][1] = torch::tensor({5.f, 5.f, 5.f, 5.f});  // background: no localization loss
  encodings[2][0] = torch::tensor({2.f, 0.f, 0.f, 0.f});  // B's class-1 box: Huber 1.5
  encodings[2][1] = torch::tensor({9.f, 9.f, 9.f, 9.f});  // not its class
  const auto logits = torch::zeros({3, 3});
  BoxClassifierOptions o;
  o.localization_weight = 2.0f;
  const auto losses = box_classifier_loss(encodings, logits, targets, o);
  // A: 1.625 / (2 proposals x 2 images); B: 1.5 / (1 x 2).
  EXPECT_NEAR(losses.at("BoxClassifierLoss/localization_loss").item<float>(), 2.0f * (1.625f / 4 + 1.5f / 2), 1e-5);
  // A: 2 log 3 / 4; B: log 3 / 2.
  EXPECT_NEAR(losses.at("BoxClassifierLoss/classification_loss").item<float>(), std::log(3.0f), 1e-5);
  EXPECT_THROW(box_classifier_loss(encodings.narrow(0, 0, 2), logits.narrow(0, 0, 2), targets, o), std::exception);
}

// second_stage_classification_loss: weighted_sigmoid sums the sigmoid cross entropies of the
// K + 1 columns (background included) against one-hot or k-hot targets; weighted_softmax divides
// the logits by logit_scale. One proposal, K = 2, logits (0, 1, -1).
TEST(BoxClassifier, SigmoidLossOnKHotTargetsAndSoftmaxLogitScale) {
  const auto softplus = [](double x) { return std::log1p(std::exp(x)); };
  std::vector<ProposalTargets> targets(1);
  targets[0].classes = torch::tensor({1}, torch::kLong);
  targets[0].reg_targets = torch::zeros({1, 4});
  const auto encodings = torch::zeros({1, 2, 4});
  const auto logits = torch::tensor({0.f, 1.f, -1.f}).view({1, 3});
  BoxClassifierOptions o;
  o.sigmoid = true;
  o.classification_weight = 2.0f;
  // One-hot class 1: -log(1 - s(0)) - log s(1) - log(1 - s(-1)) = sp(0) + sp(-1) + sp(-1).
  auto loss = box_classifier_loss(encodings, logits, targets, o).at("BoxClassifierLoss/classification_loss");
  EXPECT_NEAR(loss.item<double>(), 2.0 * (softplus(0) + 2 * softplus(-1)), 1e-5);
  // Labels 1 and 2 of one merged box: sp(0) + sp(-1) + sp(1).
  targets[0].class_targets = torch::tensor({0.f, 1.f, 1.f}).view({1, 3});
  loss = box_classifier_loss(encodings, logits, targets, o).at("BoxClassifierLoss/classification_loss");
  EXPECT_NEAR(loss.item<double>(), 2.0 * (softplus(0) + softplus(-1) + softplus(1)), 1e-5);
  // Softmax over the k-hot targets: -(log p1 + log p2); logit_scale 2 halves the logits.
  o.sigmoid = false;
  o.logit_scale = 2.0f;
  const double lse = std::log(1 + std::exp(0.5) + std::exp(-0.5));
  loss = box_classifier_loss(encodings, logits, targets, o).at("BoxClassifierLoss/classification_loss");
  EXPECT_NEAR(loss.item<double>(), 2.0 * ((lse - 0.5) + (lse + 0.5)), 1e-5);
  targets[0].class_targets = at::Tensor();
  loss = box_classifier_loss(encodings, logits, targets, o).at("BoxClassifierLoss/classification_loss");
  EXPECT_NEAR(loss.item<double>(), 2.0 * (lse - 0.5), 1e-5);
}

// merge_boxes_with_multiple_labels: boxes equal after quantising to int64(v * 9999) are one (0.5
// and 0.50004 both give 4999), the first of them, in first-occurrence order, with every label
// k-hot and the lowest as its class.
TEST(BoxClassifier, MergeBoxesWithMultipleLabels) {
  const auto boxes = torch::tensor({0.f,  0.f,  0.5f, 0.5f, 0.1f,     0.1f, 0.2f, 0.2f, 0.f,  0.f,
                                    0.5f, 0.5f, 0.f,  0.f,  0.50004f, 0.5f, 0.1f, 0.1f, 0.2f, 0.3f})
                         .view({5, 4});
  const auto classes = torch::tensor({3, 2, 1, 3, 2}, torch::kLong);
  const auto m = merge_boxes_with_multiple_labels(boxes, classes, 4);
  ASSERT_EQ(m.boxes.size(0), 3);
  EXPECT_TRUE(torch::equal(m.boxes, boxes.index_select(0, torch::tensor({0, 1, 4}, torch::kLong))));
  EXPECT_TRUE(
      torch::equal(m.labels, torch::tensor({1.f, 0.f, 1.f, 0.f, 0.f, 1.f, 0.f, 0.f, 0.f, 1.f, 0.f, 0.f}).view({3, 4})));
  EXPECT_TRUE(torch::equal(m.classes, torch::tensor({1, 2, 2}, torch::kLong)));
  EXPECT_EQ(merge_boxes_with_multiple_labels(torch::zeros({0, 4}), torch::zeros({0}, torch::kLong), 4).boxes.size(0),
            0);
  EXPECT_THROW(merge_boxes_with_multiple_labels(boxes, torch::tensor({3, 2, 1, 5, 2}, torch::kLong), 4),
               std::exception);
}

// hard_example_miner in the second stage: proposals A = (0, 0, 10, 10) and B = (0, 0, 10, 11)
// overlap at IoU 100 / 110 = 0.91, C = (20, 20, 30, 30) is the ground truth (class 1). A and B are
// background with logits (0, 5) and (0, 4): cross entropies log(1 + e^5) = 5.0067 and
// log(1 + e^4) = 4.0181; C's logits (0, 0): log 2, and its box code (0.5, 0, 0, 0) a Huber loss of
// 0.125. Each term is divided by the 3 proposals. NMS at 0.7 by classification loss keeps A, drops
// B (A covers it) and keeps C: the loss is A's + C's; with one hard example, A's alone.
TEST(BoxClassifier, HardExampleMinerKeepsTheWorstProposalsAfterNms) {
  const auto proposals =
      torch::tensor({0.f, 0.f, 10.f, 10.f, 0.f, 0.f, 10.f, 11.f, 20.f, 20.f, 30.f, 30.f}).view({3, 4});
  const auto gt = torch::tensor({20.f, 20.f, 30.f, 30.f}).view({1, 4});
  const auto targets = assign_proposals(proposals, gt, torch::tensor({int64_t{1}}));
  ASSERT_EQ(targets.classes.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(targets.classes[2].item<int64_t>(), 1);
  const auto logits = torch::tensor({0.f, 5.f, 0.f, 4.f, 0.f, 0.f}).view({3, 2});
  auto refined = torch::zeros({3, 1, 4});
  refined[2][0][0] = 0.5f;
  const double a = std::log1p(std::exp(5.0)), b = std::log1p(std::exp(4.0)), c = std::log(2.0);
  BoxClassifierOptions o;
  auto loss = box_classifier_loss(refined, logits, {targets}, o);
  EXPECT_NEAR(loss["BoxClassifierLoss/classification_loss"].item<double>(), (a + b + c) / 3, 1e-5);
  o.miner.enabled = true;
  o.miner.num_hard_examples = 2;
  o.miner.iou_threshold = 0.7f;
  o.miner.loss_type = MinerLossType::kClassification;
  loss = box_classifier_loss(refined, logits, {targets}, o);
  EXPECT_NEAR(loss["BoxClassifierLoss/classification_loss"].item<double>(), (a + c) / 3, 1e-5);
  EXPECT_NEAR(loss["BoxClassifierLoss/localization_loss"].item<double>(), 0.125 / 3, 1e-6);
  o.miner.num_hard_examples = 1;
  loss = box_classifier_loss(refined, logits, {targets}, o);
  EXPECT_NEAR(loss["BoxClassifierLoss/classification_loss"].item<double>(), a / 3, 1e-5);
  EXPECT_NEAR(loss["BoxClassifierLoss/localization_loss"].item<double>(), 0.0, 1e-9);
  // LOCALIZATION ranks C first (the only nonzero box term), then A (ties at 0 by index).
  o.miner.loss_type = MinerLossType::kLocalization;
  loss = box_classifier_loss(refined, logits, {targets}, o);
  EXPECT_NEAR(loss["BoxClassifierLoss/classification_loss"].item<double>(), c / 3, 1e-5);
}

TEST(BoxClassifier, DetectionsUseEachClassesBoxClippedAndNormalisedToTheImage) {
  // Two proposals in a 10 x 20 image (inside a larger padded input); class 1 for the first with
  // its class-1 box moved down a pixel (ty = 10 * 1 / 10), class 2 for the second.
  const auto proposals = torch::tensor({0.f, 0.f, 10.f, 10.f, 0.f, 10.f, 10.f, 20.f}).view({2, 4});
  auto codes = torch::zeros({2, 2, 4});
  codes[0][0] = torch::tensor({1.f, 0.f, 0.f, 0.f});
  const auto logits = torch::tensor({0.f, 5.f, 0.f, 0.f, 0.f, 5.f}).view({2, 3});
  BatchNmsOptions nms;
  nms.score_threshold = 0.1f;
  nms.iou_threshold = 0.6f;
  const auto d = box_classifier_detections(codes, logits, proposals, 10, 20, nms);
  ASSERT_EQ(d.boxes.size(0), 2);
  const float top = std::exp(5.f) / (std::exp(5.f) + 2.f);
  EXPECT_NEAR(d.scores[0].item<float>(), top, 1e-6);
  EXPECT_EQ(d.classes[0].item<int64_t>(), 1);
  EXPECT_EQ(d.classes[1].item<int64_t>(), 2);
  // [1, 0, 11, 10] clipped to [1, 0, 10, 10], over 10 x 20.
  const std::vector<float> first = {0.1f, 0.f, 1.f, 0.5f}, second = {0.f, 0.5f, 1.f, 1.f};
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(d.boxes[0][j].item<float>(), first[static_cast<size_t>(j)], 1e-5) << j;
    EXPECT_NEAR(d.boxes[1][j].item<float>(), second[static_cast<size_t>(j)], 1e-5) << j;
  }
}

// Mask targets: the matched mask cropped at the proposal as tf.image.crop_and_resize samples it.
// A 4x4 mask of ones in its two left columns; the proposal (0, 0, 4, 4) px is (0, 0, 1, 1)
// normalised, its 2x2 crop samples columns 0 and 3: [1, 0]. The proposal (0, 0, 2, 2) is
// (0, 0, .5, .5): columns 0 and 1.5, where the ones end halfway: [1, .5]. Background: zeros.
TEST(MaskTargets, CropTheMatchedMaskAtTheProposal) {
  auto gt = torch::zeros({2, 4, 4}, torch::kBool);
  gt[1].narrow(1, 0, 2).fill_(true);
  const auto proposals = torch::tensor({{0.f, 0.f, 4.f, 4.f}, {0.f, 0.f, 2.f, 2.f}, {0.f, 0.f, 4.f, 4.f}});
  const auto match = torch::tensor({int64_t{1}, int64_t{1}, int64_t{-1}});
  const auto t = mask_targets(gt, proposals, match, 2, 2);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_TRUE(torch::allclose(t[0], torch::tensor({{1.f, 0.f}, {1.f, 0.f}})));
  EXPECT_TRUE(torch::allclose(t[1], torch::tensor({{1.f, .5f}, {1.f, .5f}})));
  EXPECT_EQ(t[2].abs().sum().item<float>(), 0.f);
  // The other ground truth (all zeros) when matched to it.
  EXPECT_EQ(
      mask_targets(gt, proposals, torch::tensor({int64_t{0}, int64_t{-1}, int64_t{-1}}), 2, 2).sum().item<float>(),
      0.f);
}

// Mask loss: logit 0 costs ln 2 per pixel whatever the target; only positives count and the sum is
// divided by their pixels: one positive of 2x2 pixels -> 4 ln 2 / 4, times the weight 4.
TEST(MaskLoss, MeanPerPixelOfThePositivesTimesTheWeight) {
  const auto logits = torch::zeros({2, 2, 2});
  const auto targets = torch::tensor({{{1.f, 0.f}, {0.f, 1.f}}, {{1.f, 1.f}, {1.f, 1.f}}});
  EXPECT_NEAR(mask_loss(logits, targets, torch::tensor({1.f, 0.f}), 4.f).item<float>(), 4 * std::log(2.0), 1e-6);
  EXPECT_NEAR(mask_loss(logits, targets, torch::tensor({1.f, 1.f}), 1.f).item<float>(), std::log(2.0), 1e-6);
  EXPECT_EQ(mask_loss(logits, targets, torch::tensor({0.f, 0.f}), 1.f).item<float>(), 0.f);  // max(0, 1)
  // A confident right answer costs little, a confident wrong one a lot.
  const auto right = (targets * 2 - 1) * 10;
  EXPECT_LT(mask_loss(right, targets, torch::tensor({1.f, 1.f}), 1.f).item<float>(), 1e-4);
  EXPECT_GT(mask_loss(-right, targets, torch::tensor({1.f, 1.f}), 1.f).item<float>(), 9.f);
}

// reframe_box_masks_to_image_masks: a 2x2 box mask of ones in the box (.25, .25, .75, .75) of a
// 4x4 image. The inverse box is (-.5, -.5, 1.5, 1.5): rows sample y = -.5 + i * 2 / 3 of the box
// mask (-.5, .17, .83, 1.5); the outer two fall outside it (0), the inner two inside (1).
TEST(PasteBoxMasks, InverseCropIntoTheImage) {
  const auto pasted = paste_box_masks(torch::ones({1, 2, 2}), torch::tensor({{.25f, .25f, .75f, .75f}}), 4, 4);
  ASSERT_EQ(pasted.sizes(), (std::vector<int64_t>{1, 4, 4}));
  const auto expected =
      torch::tensor({{0.f, 0.f, 0.f, 0.f}, {0.f, 1.f, 1.f, 0.f}, {0.f, 1.f, 1.f, 0.f}, {0.f, 0.f, 0.f, 0.f}});
  EXPECT_TRUE(torch::allclose(pasted[0], expected)) << pasted;
  // A left-right ramp in a box covering the whole image comes back as itself.
  const auto ramp = torch::tensor({{{0.f, 1.f, 2.f}, {0.f, 1.f, 2.f}, {0.f, 1.f, 2.f}}});
  EXPECT_TRUE(torch::allclose(paste_box_masks(ramp, torch::tensor({{0.f, 0.f, 1.f, 1.f}}), 3, 3), ramp));
}

}  // namespace
}  // namespace orchard::detect
