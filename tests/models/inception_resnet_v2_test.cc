#include "orchard/models/inception_resnet_v2.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "orchard/layers/batch_norm.h"

namespace orchard::models {
namespace {

using Sizes = std::vector<int64_t>;
using Part = InceptionResnetV2Part;

// The trainable variables of TF-Slim's inception_resnet_v2_base, from its layer table: every
// slim.conv2d under the arg scope has a kernel kh*kw*in*out and a batch-norm beta (out; no gamma,
// scale=False); each block's 'up' Conv2d_1x1 has a kernel and a bias (out), no batch norm.
//
// First stage (stem .. PreAuxLogits):
//   stem   Conv2d_1a_3x3  9*3*32     + 32  =       896
//          Conv2d_2a_3x3  9*32*32    + 32  =     9,248
//          Conv2d_2b_3x3  9*32*64    + 64  =    18,496
//          Conv2d_3b_1x1  64*80      + 80  =     5,200
//          Conv2d_4a_3x3  9*80*192   + 192 =   138,432                       stem   172,272
//   Mixed_5b (192 -> 96 + 64 + 96 + 64 = 320)
//          B0 1x1 96 18,528; B1 1x1 48 9,264, 5x5 64 76,864;
//          B2 1x1 64 12,352, 3x3 96 55,392, 3x3 96 83,040; B3 avg pool, 1x1 64 12,352   267,792
//   block35 (320): B0 1x1 32 10,272; B1 1x1 32 10,272, 3x3 32 9,248;
//          B2 1x1 32 10,272, 3x3 48 13,872, 3x3 64 27,712; up 128*320 + 320 = 41,280
//          = 122,928, x10                                                          1,229,280
//   Mixed_6a (320 -> 384 + 384 + 320 = 1088): B0 3x3 384 1,106,304;
//          B1 1x1 256 82,176, 3x3 256 590,080, 3x3 384 885,120; B2 max pool        2,663,680
//   block17 (1088): B0 1x1 192 209,088; B1 1x1 128 139,392, 1x7 160 143,520,
//          7x1 192 215,232; up 384*1088 + 1088 = 418,880 = 1,126,112, x20         22,522,240
//                                                                        total   26,855,264
// Second stage (Mixed_7a .. Conv2d_7b_1x1):
//   Mixed_7a (1088 -> 384 + 288 + 320 + 1088 = 2080): B0 1x1 256 278,784, 3x3 384 885,120;
//          B1 1x1 256 278,784, 3x3 288 663,840; B2 1x1 256 278,784, 3x3 288 663,840,
//          3x3 320 829,760; B3 max pool                                            3,878,912
//   block8 (2080): B0 1x1 192 399,552; B1 1x1 192 399,552, 1x3 224 129,248,
//          3x1 256 172,288; up 448*2080 + 2080 = 933,920 = 2,034,560, x10 (9 + Block8) 20,345,600
//   Conv2d_7b_1x1  2080*1536 + 1536                                                3,196,416
//                                                                        total   27,420,928
// inception_resnet_v2_base: 26,855,264 + 27,420,928 = 54,276,192 (the "54.3M"). With Logits
// (1536*1001 + 1001) 55,814,729; Keras' InceptionResNetV2 (1000 classes, the same layers, BN
// without gamma, biased up convolutions) reports 55,813,192 trainable = 54,276,192 + 1,537,000,
// and 60,544 non-trainable = 2 * 30,272 batch-norm channels = 2 * (18,048 + 12,224) below.
constexpr int64_t kFirstStageParameters = 26855264;
constexpr int64_t kSecondStageParameters = 27420928;
// Batch-norm channels (= betas): stem 400 + Mixed_5b 528 + 10 * 240 + Mixed_6a 1280 + 20 * 672;
// Mixed_7a 2048 + 10 * 864 + 1536.
constexpr int64_t kFirstStageBatchNormChannels = 18048;
constexpr int64_t kSecondStageBatchNormChannels = 12224;
// Up-projection biases: 10 * 320 + 20 * 1088; 10 * 2080.
constexpr int64_t kFirstStageUpBiases = 24960;
constexpr int64_t kSecondStageUpBiases = 20800;
// slim.conv2d + batch norm units: 5 + 7 + 10 * 6 + 4 + 20 * 4; 7 + 10 * 4 + 1. Up convs 30; 10.
constexpr int64_t kFirstStageUnits = 156, kFirstStageUps = 30;
constexpr int64_t kSecondStageUnits = 48, kSecondStageUps = 10;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

InceptionResnetV2Options options(Part part, int64_t output_stride = 16, bool align = true) {
  InceptionResnetV2Options o;
  o.part = part;
  o.output_stride = output_stride;
  o.align_feature_maps = align;
  return o;
}

// Each part built once for the read-only tests (about 27M parameters each).
InceptionResnetV2& first_stage() {
  static InceptionResnetV2 net(options(Part::kFirstStage));
  return net;
}
InceptionResnetV2& second_stage() {
  static InceptionResnetV2 net(options(Part::kSecondStage));
  return net;
}

int64_t count_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(InceptionResnetV2, ParameterCountsMatchSlimsLayerTable) {
  for (auto* net : {&first_stage(), &second_stage()}) {
    const bool first = (*net)->options().part == Part::kFirstStage;
    SCOPED_TRACE(first ? "first stage" : "second stage");
    int64_t betas = 0, biases = 0, kernels = 0, units = 0, ups = 0;
    for (const auto& p : (*net)->named_parameters()) {
      if (ends_with(p.key(), ".bn.bias")) {
        betas += p.value().numel();
        ++units;
      } else if (ends_with(p.key(), "Conv2d_1x1.bias")) {
        biases += p.value().numel();
        ++ups;
      } else {
        ASSERT_TRUE(ends_with(p.key(), ".weight")) << p.key();
        kernels += p.value().numel();
      }
    }
    EXPECT_EQ(count_parameters(**net), first ? kFirstStageParameters : kSecondStageParameters);
    EXPECT_EQ(betas, first ? kFirstStageBatchNormChannels : kSecondStageBatchNormChannels);
    EXPECT_EQ(biases, first ? kFirstStageUpBiases : kSecondStageUpBiases);
    EXPECT_EQ(kernels + betas + biases, count_parameters(**net));
    EXPECT_EQ(units, first ? kFirstStageUnits : kSecondStageUnits);
    EXPECT_EQ(ups, first ? kFirstStageUps : kSecondStageUps);
    EXPECT_EQ((*net)->output_channels(), first ? 1088 : 1536);
  }
  EXPECT_EQ(kFirstStageParameters + kSecondStageParameters, 54276192);
}

TEST(InceptionResnetV2, BatchNormsHaveBetaButNoGamma) {
  for (auto* net : {&first_stage(), &second_stage()}) {
    int64_t norms = 0;
    for (const auto& m : (*net)->modules(/*include_self=*/false)) {
      const auto* bn = m->as<torch::nn::BatchNorm2d>();
      if (!bn) continue;
      ++norms;
      const auto params = m->named_parameters(/*recurse=*/false);
      ASSERT_EQ(params.size(), 1u);
      EXPECT_EQ(params.begin()->key(), "bias");
      ASSERT_TRUE(bn->weight.defined());  // a constant buffer, for batch_norm()'s override
      EXPECT_FALSE(bn->weight.requires_grad());
      EXPECT_TRUE(torch::equal(bn->weight, torch::ones_like(bn->weight)));
      EXPECT_NEAR(bn->options.momentum().value(), 0.0003, 1e-12);  // decay 0.9997
      EXPECT_NEAR(bn->options.eps(), 0.001, 1e-12);
    }
    EXPECT_EQ(norms, (*net)->options().part == Part::kFirstStage ? kFirstStageUnits : kSecondStageUnits);
    for (const auto& p : (*net)->named_parameters()) EXPECT_FALSE(ends_with(p.key(), "bn.weight")) << p.key();
  }
}

// TF variables: 4 per unit (weights, beta, moving_mean, moving_variance), 2 per up conv.
TEST(InceptionResnetV2, EveryVariableHasAUniqueTfNameAndNoGamma) {
  for (auto* net : {&first_stage(), &second_stage()}) {
    const bool first = (*net)->options().part == Part::kFirstStage;
    for (bool classification : {false, true}) {
      std::set<std::string> names;
      int64_t trainable = 0;
      const auto check = [&](const std::string& name, bool parameter) {
        const auto n = (*net)->tf_name(name, "InceptionResnetV2", classification);
        if (!n) {
          EXPECT_FALSE(parameter) << name;
          EXPECT_TRUE(ends_with(name, ".bn.weight") || ends_with(name, ".bn.num_batches_tracked")) << name;
          return;
        }
        EXPECT_TRUE(names.insert(n->name).second) << "duplicate " << n->name << " from " << name;
        EXPECT_EQ(n->name.find("gamma"), std::string::npos) << n->name;
        EXPECT_EQ(n->name.rfind("InceptionResnetV2/", 0), 0u) << n->name;
        EXPECT_EQ(n->layout, ends_with(n->name, "/weights") ? TfLayout::kConv : TfLayout::kSame);
        trainable += parameter;
      };
      for (const auto& p : (*net)->named_parameters()) check(p.key(), true);
      for (const auto& b : (*net)->named_buffers()) check(b.key(), false);
      const int64_t units = first ? kFirstStageUnits : kSecondStageUnits,
                    ups = first ? kFirstStageUps : kSecondStageUps;
      EXPECT_EQ(static_cast<int64_t>(names.size()), 4 * units + 2 * ups);
      EXPECT_EQ(trainable, 2 * units + 2 * ups);
    }
  }
}

TEST(InceptionResnetV2, FirstStageTfNamesAndShapes) {
  auto& net = first_stage();
  const auto params = net->named_parameters();
  const auto buffers = net->named_buffers();
  const auto expect = [&](const std::string& name, const std::string& tf, const Sizes& shape) {
    const auto n = net->tf_name(name, "InceptionResnetV2");
    ASSERT_TRUE(n) << name;
    EXPECT_EQ(n->name, tf);
    const auto* t = params.find(name);
    if (!t) t = buffers.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->sizes().vec(), shape) << name;
  };
  expect("Conv2d_1a_3x3.conv.weight", "InceptionResnetV2/Conv2d_1a_3x3/weights", {32, 3, 3, 3});
  expect("Conv2d_4a_3x3.bn.running_mean", "InceptionResnetV2/Conv2d_4a_3x3/BatchNorm/moving_mean", {192});
  expect("Mixed_5b.Branch_1.Conv2d_0b_5x5.conv.weight", "InceptionResnetV2/Mixed_5b/Branch_1/Conv2d_0b_5x5/weights",
         {64, 48, 5, 5});
  expect("Mixed_5b.Branch_3.Conv2d_0b_1x1.conv.weight", "InceptionResnetV2/Mixed_5b/Branch_3/Conv2d_0b_1x1/weights",
         {64, 192, 1, 1});
  expect("Repeat.block35_1.Branch_2.Conv2d_0c_3x3.bn.bias",
         "InceptionResnetV2/Repeat/block35_1/Branch_2/Conv2d_0c_3x3/BatchNorm/beta", {64});
  expect("Repeat.block35_3.Branch_1.Conv2d_0b_3x3.conv.weight",
         "InceptionResnetV2/Repeat/block35_3/Branch_1/Conv2d_0b_3x3/weights", {32, 32, 3, 3});
  expect("Repeat.block35_10.Conv2d_1x1.weight", "InceptionResnetV2/Repeat/block35_10/Conv2d_1x1/weights",
         {320, 128, 1, 1});
  expect("Mixed_6a.Branch_0.Conv2d_1a_3x3.conv.weight", "InceptionResnetV2/Mixed_6a/Branch_0/Conv2d_1a_3x3/weights",
         {384, 320, 3, 3});
  expect("Mixed_6a.Branch_1.Conv2d_1a_3x3.bn.running_var",
         "InceptionResnetV2/Mixed_6a/Branch_1/Conv2d_1a_3x3/BatchNorm/moving_variance", {384});
  expect("Repeat_1.block17_1.Branch_1.Conv2d_0b_1x7.conv.weight",
         "InceptionResnetV2/Repeat_1/block17_1/Branch_1/Conv2d_0b_1x7/weights", {160, 128, 1, 7});
  expect("Repeat_1.block17_7.Branch_1.Conv2d_0c_7x1.conv.weight",
         "InceptionResnetV2/Repeat_1/block17_7/Branch_1/Conv2d_0c_7x1/weights", {192, 160, 7, 1});
  expect("Repeat_1.block17_20.Conv2d_1x1.bias", "InceptionResnetV2/Repeat_1/block17_20/Conv2d_1x1/biases", {1088});
  expect("Repeat_1.block17_20.Conv2d_1x1.weight", "InceptionResnetV2/Repeat_1/block17_20/Conv2d_1x1/weights",
         {1088, 384, 1, 1});
  EXPECT_FALSE(net->tf_name("Conv2d_1a_3x3.bn.weight", "InceptionResnetV2"));  // gamma: scale=False
  EXPECT_FALSE(net->tf_name("Conv2d_1a_3x3.bn.num_batches_tracked", "InceptionResnetV2"));
  // The max pools have no variables; names this part lacks throw.
  EXPECT_EQ(net->named_modules()["Mixed_6a.Branch_2"]->named_parameters().size(), 0u);
  for (const std::string bad : {"Repeat.block35_11.Conv2d_1x1.weight", "Repeat_1.block17_21.Conv2d_1x1.bias",
                                "Mixed_7a.Branch_0.Conv2d_0a_1x1.conv.weight", "Conv2d_1a_3x3.conv.bias",
                                "Conv2d_1a_3x3", "Conv2d_1a_3x3.bn.gamma", ""})
    EXPECT_THROW(net->tf_name(bad, "InceptionResnetV2"), std::invalid_argument) << bad;
}

TEST(InceptionResnetV2, SecondStageTfNamesAndShapes) {
  auto& net = second_stage();
  const auto params = net->named_parameters();
  const auto buffers = net->named_buffers();
  const auto expect = [&](const std::string& name, const std::string& tf, const Sizes& shape,
                          bool classification = false) {
    const auto n = net->tf_name(name, "InceptionResnetV2", classification);
    ASSERT_TRUE(n) << name;
    EXPECT_EQ(n->name, tf);
    const auto* t = params.find(name);
    if (!t) t = buffers.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->sizes().vec(), shape) << name;
  };
  expect("Mixed_7a.Branch_0.Conv2d_1a_3x3.conv.weight", "InceptionResnetV2/Mixed_7a/Branch_0/Conv2d_1a_3x3/weights",
         {384, 256, 3, 3});
  expect("Mixed_7a.Branch_1.Conv2d_1a_3x3.conv.weight", "InceptionResnetV2/Mixed_7a/Branch_1/Conv2d_1a_3x3/weights",
         {288, 256, 3, 3});
  expect("Mixed_7a.Branch_2.Conv2d_0b_3x3.bn.bias", "InceptionResnetV2/Mixed_7a/Branch_2/Conv2d_0b_3x3/BatchNorm/beta",
         {288});
  expect("Mixed_7a.Branch_2.Conv2d_1a_3x3.conv.weight", "InceptionResnetV2/Mixed_7a/Branch_2/Conv2d_1a_3x3/weights",
         {320, 288, 3, 3});
  expect("Repeat.block8_1.Branch_0.Conv2d_1x1.conv.weight",
         "InceptionResnetV2/Repeat/block8_1/Branch_0/Conv2d_1x1/weights", {192, 2080, 1, 1});
  expect("Repeat.block8_9.Branch_1.Conv2d_0b_1x3.conv.weight",
         "InceptionResnetV2/Repeat/block8_9/Branch_1/Conv2d_0b_1x3/weights", {224, 192, 1, 3});
  expect("Repeat.block8_9.Branch_1.Conv2d_0c_3x1.conv.weight",
         "InceptionResnetV2/Repeat/block8_9/Branch_1/Conv2d_0c_3x1/weights", {256, 224, 3, 1});
  expect("Block8.Conv2d_1x1.bias", "InceptionResnetV2/Block8/Conv2d_1x1/biases", {2080});
  expect("Block8.Branch_1.Conv2d_0a_1x1.bn.running_mean",
         "InceptionResnetV2/Block8/Branch_1/Conv2d_0a_1x1/BatchNorm/moving_mean", {192});
  expect("Conv2d_7b_1x1.conv.weight", "InceptionResnetV2/Conv2d_7b_1x1/weights", {1536, 2080, 1, 1});
  expect("Conv2d_7b_1x1.bn.running_var", "InceptionResnetV2/Conv2d_7b_1x1/BatchNorm/moving_variance", {1536});
  // slim's ImageNet checkpoint: the block8 repeat is Repeat_2 (after block35's and block17's).
  expect("Repeat.block8_1.Conv2d_1x1.weight", "InceptionResnetV2/Repeat_2/block8_1/Conv2d_1x1/weights",
         {2080, 448, 1, 1}, /*classification=*/true);
  expect("Mixed_7a.Branch_0.Conv2d_0a_1x1.bn.bias", "InceptionResnetV2/Mixed_7a/Branch_0/Conv2d_0a_1x1/BatchNorm/beta",
         {256}, /*classification=*/true);
  // Mixed_7a's Branch_3 is only the max pool: no variables.
  const auto modules = net->named_modules();
  ASSERT_TRUE(modules.contains("Mixed_7a.Branch_3"));
  EXPECT_EQ(modules["Mixed_7a.Branch_3"]->named_parameters().size(), 0u);
  EXPECT_EQ(modules["Mixed_7a.Branch_3"]->named_buffers().size(), 0u);
  for (const std::string bad :
       {"Repeat.block8_10.Conv2d_1x1.weight", "Mixed_6a.Branch_0.Conv2d_1a_3x3.conv.weight", "Conv2d_7b_1x1.conv.bias"})
    EXPECT_THROW(net->tf_name(bad, "InceptionResnetV2"), std::invalid_argument) << bad;
}

// 'SAME' everywhere: ceil(in / 2) at Conv2d_1a, MaxPool_3a, MaxPool_5a and (output stride 16)
// Mixed_6a: 99 -> 50 -> 25 -> 13 -> 7 and 131 -> 66 -> 33 -> 17 -> 9.
TEST(InceptionResnetV2, FirstStageOutputShapesAtStride16And8) {
  torch::NoGradGuard no_grad;
  const auto x = torch::rand({2, 3, 99, 131}) * 2 - 1;
  auto& net16 = first_stage();
  net16->eval();
  const auto y16 = net16->forward(x);
  EXPECT_EQ(y16.sizes().vec(), (Sizes{2, 1088, 7, 9}));
  EXPECT_TRUE(torch::isfinite(y16).all().item<bool>());

  InceptionResnetV2 net8(options(Part::kFirstStage, 8));  // Mixed_6a at stride 1, block17 at rate 2
  EXPECT_EQ(count_parameters(*net8), kFirstStageParameters);
  net8->eval();
  const auto y8 = net8->forward(x);
  EXPECT_EQ(y8.sizes().vec(), (Sizes{2, 1088, 13, 17}));
  EXPECT_TRUE(torch::isfinite(y8).all().item<bool>());
  for (const auto& m : net8->named_modules()) {
    const auto* c = m.value()->as<torch::nn::Conv2d>();
    if (!c) continue;
    const bool in_block17 = m.key().rfind("Repeat_1.", 0) == 0;
    const int64_t rate = (*c->options.dilation())[0];
    // TF applies rate 2 to every block17 convolution; at 1x1 it changes nothing, and the up
    // projections (block17_N.Conv2d_1x1) keep 1.
    EXPECT_EQ(rate, in_block17 && !ends_with(m.key(), ".Conv2d_1x1") ? 2 : 1) << m.key();
  }
}

// slim's classification layout ('VALID'): 99 -> 49 -> 47 (2a) -> 23 (3a) -> 21 (4a) -> 10 (5a)
// -> 4 (6a); 131 -> 65 -> 63 -> 31 -> 29 -> 14 -> 6.
TEST(InceptionResnetV2, FirstStageWithoutAlignedFeatureMapsUsesValidPadding) {
  torch::NoGradGuard no_grad;
  InceptionResnetV2 net(options(Part::kFirstStage, 16, /*align=*/false));
  net->eval();
  EXPECT_EQ(net->forward(torch::zeros({1, 3, 99, 131})).sizes().vec(), (Sizes{1, 1088, 4, 6}));
}

// Mixed_7a's 'VALID' stride-2 layers: 17 -> 8, then 1x1 and 'SAME' layers.
TEST(InceptionResnetV2, SecondStageMaps17x17CropsTo8x8x1536) {
  torch::NoGradGuard no_grad;
  auto& net = second_stage();
  net->eval();
  const auto y = net->forward(torch::randn({2, 1088, 17, 17}));
  EXPECT_EQ(y.sizes().vec(), (Sizes{2, 1536, 8, 8}));
  EXPECT_GE(y.min().item<float>(), 0.0f);  // Conv2d_7b_1x1 ends in ReLU
  EXPECT_THROW(net->forward(torch::zeros({1, 3, 17, 17})), c10::Error);
}

// Every kernel zero and every up bias 1: the stem and branches output relu(BN(0)) = 0 and each
// block adds its scale. Block35 x10 adds 10 * 0.17 = 1.7 to Mixed_5b's 0; Mixed_6a concatenates
// two zero conv branches (384 + 384) and the max pool of 1.7 (320); block17 x20 adds 2.0.
TEST(InceptionResnetV2, FirstStageResidualScalesByHand) {
  torch::NoGradGuard no_grad;
  for (int64_t stride : {16, 8}) {
    InceptionResnetV2 net(options(Part::kFirstStage, stride));
    for (auto& p : net->named_parameters()) p.value().fill_(ends_with(p.key(), "Conv2d_1x1.bias") ? 1.0 : 0.0);
    net->eval();
    const auto y = net->forward(torch::rand({1, 3, 40, 40}) * 2 - 1);
    EXPECT_TRUE(torch::allclose(y.slice(1, 0, 768), torch::full_like(y.slice(1, 0, 768), 2.0), 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(y.slice(1, 768), torch::full_like(y.slice(1, 768), 3.7), 1e-5, 1e-5));
  }
}

// Kernels zero except Conv2d_7b_1x1 = -identity on the first 1536 channels; up biases 1, Block8's
// -5. For x >= 0 Mixed_7a gives 0 on its 992 conv channels and maxpool(x) (>= 0) after them;
// block8 x9 adds 9 * 0.2 = 1.8; Block8 (scale 1, no ReLU) adds -5, leaving m - 3.2 < 0;
// Conv2d_7b_1x1 -> relu((3.2 - m) / sqrt(1 + 0.001)). With a ReLU in Block8 it would be 0.
TEST(InceptionResnetV2, SecondStageBlockScalesAndLinearLastBlockByHand) {
  torch::NoGradGuard no_grad;
  InceptionResnetV2 net(options(Part::kSecondStage));
  for (auto& p : net->named_parameters()) {
    const std::string& n = p.key();
    p.value().fill_(n == "Block8.Conv2d_1x1.bias" ? -5.0 : ends_with(n, "Conv2d_1x1.bias") ? 1.0 : 0.0);
  }
  auto w = net->named_parameters()["Conv2d_7b_1x1.conv.weight"];
  w.view({1536, 2080}).slice(1, 0, 1536).copy_(-torch::eye(1536));
  net->eval();
  const auto x = torch::rand({1, 1088, 9, 9});
  const auto y = net->forward(x);
  ASSERT_EQ(y.sizes().vec(), (Sizes{1, 1536, 4, 4}));
  const double s = std::sqrt(1.001);
  const auto pooled = torch::max_pool2d(x, {3, 3}, {2, 2}).slice(1, 0, 1536 - 992);
  EXPECT_TRUE(torch::allclose(y.slice(1, 0, 992), torch::full_like(y.slice(1, 0, 992), 3.2 / s), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(y.slice(1, 992), (3.2 - pooled) / s, 1e-5, 1e-5));
}

// slim.conv2d's default xavier_initializer: U(-a, a), a = sqrt(6 / (fan_in + fan_out)); zero
// biases; beta 0, moving mean 0, moving variance 1.
TEST(InceptionResnetV2, SlimDefaultInitialisation) {
  auto& net = first_stage();
  const auto params = net->named_parameters();
  const auto w = params["Conv2d_4a_3x3.conv.weight"];  // fan_in 9 * 80, fan_out 9 * 192
  const double a = std::sqrt(6.0 / (9 * 80 + 9 * 192));
  EXPECT_LE(w.abs().max().item<double>(), a);
  EXPECT_NEAR(w.std().item<double>(), a / std::sqrt(3.0), 0.02 * a);
  const auto up = params["Repeat_1.block17_5.Conv2d_1x1.weight"];  // fan_in 384, fan_out 1088
  EXPECT_NEAR(up.std().item<double>(), std::sqrt(6.0 / (384 + 1088)) / std::sqrt(3.0), 0.02 * std::sqrt(6.0 / 1472));
  EXPECT_EQ(params["Repeat_1.block17_5.Conv2d_1x1.bias"].abs().sum().item<double>(), 0.0);
  for (const auto& b : net->named_buffers()) {
    if (ends_with(b.key(), "running_mean")) {
      EXPECT_EQ(b.value().abs().sum().item<double>(), 0.0) << b.key();
    }
    if (ends_with(b.key(), "running_var")) {
      EXPECT_TRUE(torch::equal(b.value(), torch::ones_like(b.value()))) << b.key();
    }
  }
  for (const auto& p : params)
    if (ends_with(p.key(), "bn.bias")) {
      EXPECT_EQ(p.value().abs().sum().item<double>(), 0.0) << p.key();
    }
}

// Every batch norm runs through batch_norm(), so a synchronized override covers them, and sees
// the constant gamma as bn.weight.
TEST(InceptionResnetV2, EveryBatchNormThroughTheOverride) {
  torch::NoGradGuard no_grad;
  auto& net = second_stage();
  net->train();
  int calls = 0;
  layers::set_batch_norm_override([&](torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) {
    ++calls;
    EXPECT_TRUE(bn.weight.defined());
    return torch::batch_norm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, true, 0.0, bn.options.eps(),
                             false);
  });
  const auto y = net->forward(torch::randn({2, 1088, 5, 5}));
  layers::set_batch_norm_override({});
  net->eval();
  EXPECT_EQ(y.sizes().vec(), (Sizes{2, 1536, 2, 2}));
  EXPECT_EQ(calls, kSecondStageUnits);
}

TEST(InceptionResnetV2, RejectsOtherOutputStrides) {
  EXPECT_THROW(InceptionResnetV2(options(Part::kFirstStage, 32)), c10::Error);
}

}  // namespace
}  // namespace orchard::models
