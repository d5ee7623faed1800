// orchard/layers: TF 'SAME' padding, depth multipliers, the shared modules' names and the
// batch-norm override. Expected values are worked by hand from TF's padding rule
// (out = ceil(in / stride), total = max((out - 1) * stride + k - in, 0), the odd pixel
// bottom/right) and from TF-Slim's _make_divisible / depth / _scale_filters.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "orchard/layers/activation.h"
#include "orchard/layers/batch_norm.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/depth.h"
#include "orchard/layers/squeeze_excite.h"
#include "orchard/layers/tf_same.h"

namespace orchard::layers {
namespace {

std::vector<std::string> names(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.key());
  for (const auto& b : m.named_buffers()) out.push_back(b.key());
  return out;
}

// A 3x3 convolution of ones (no bias): each output counts the input pixels under its window.
torch::nn::Conv2d ones_conv(int64_t stride) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(1, 1, 3).stride(stride).bias(false));
  torch::NoGradGuard no_grad;
  conv->weight.fill_(1);
  return conv;
}

TEST(TfSame, ConvEvenInputPadsOnlyBottomRight) {
  // 6 -> 3 with stride 2: total padding (3 - 1) * 2 + 3 - 6 = 1, all of it bottom/right.
  auto conv = ones_conv(2);
  const auto y = conv2d_tf_same(*conv, torch::ones({1, 1, 6, 6}));
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(y[0][0][0][0].item<float>(), 9);  // rows/cols 0..2, no padding
  EXPECT_FLOAT_EQ(y[0][0][0][2].item<float>(), 6);  // cols 4, 5 and the padding
  EXPECT_FLOAT_EQ(y[0][0][2][2].item<float>(), 4);  // 2 x 2 inside
}

TEST(TfSame, ConvOddInputPadsBothSides) {
  // 5 -> 3 with stride 2: total padding 2, one pixel on each side.
  auto conv = ones_conv(2);
  const auto y = conv2d_tf_same(*conv, torch::ones({1, 1, 5, 5}));
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(y[0][0][0][0].item<float>(), 4);
  EXPECT_FLOAT_EQ(y[0][0][1][1].item<float>(), 9);
  EXPECT_FLOAT_EQ(y[0][0][2][2].item<float>(), 4);
}

TEST(TfSame, ConvStrideOneKeepsTheSize) {
  auto conv = ones_conv(1);
  const auto y = conv2d_tf_same(*conv, torch::ones({1, 1, 4, 7}));
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 1, 4, 7}));
  EXPECT_FLOAT_EQ(y[0][0][0][0].item<float>(), 4);
  EXPECT_FLOAT_EQ(y[0][0][1][1].item<float>(), 9);
}

TEST(TfSame, MaxPoolPaddingNeverWins) {
  // x[r][c] = -(4r + c + 1); 4 -> 2 with a 3x3 stride-2 pool pads one row/column bottom/right.
  const auto x = -torch::arange(1, 17, torch::kFloat).reshape({1, 1, 4, 4});
  const auto y = max_pool2d_tf_same(x, 3, 2);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_FLOAT_EQ(y[0][0][0][0].item<float>(), -1);   // x[0][0]
  EXPECT_FLOAT_EQ(y[0][0][0][1].item<float>(), -3);   // x[0][2]
  EXPECT_FLOAT_EQ(y[0][0][1][0].item<float>(), -9);   // x[2][0]
  EXPECT_FLOAT_EQ(y[0][0][1][1].item<float>(), -11);  // x[2][2], not the padding
  // Zero padding (for inputs known to be >= 0) does win on this negative input.
  EXPECT_FLOAT_EQ(max_pool2d_tf_same(x, 3, 2, 0.0)[0][0][1][1].item<float>(), 0);
}

TEST(TfSame, MaxPoolOddInput) {
  // 5 -> 3: one pixel of padding on each side; the corners see 2 x 2 pixels.
  const auto x = torch::arange(25, torch::kFloat).reshape({1, 1, 5, 5});
  const auto y = max_pool2d_tf_same(x, 3, 2);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(y[0][0][0][0].item<float>(), 6);   // x[1][1]
  EXPECT_FLOAT_EQ(y[0][0][2][2].item<float>(), 24);  // x[4][4]
  EXPECT_FLOAT_EQ(y[0][0][1][0].item<float>(), 16);  // x[3][1]
}

TEST(TfSame, AvgPoolLeavesThePaddingOut) {
  const auto x = torch::arange(16, torch::kFloat).reshape({1, 1, 4, 4});
  const auto y = avg_pool2d_tf_same(x, 3);
  ASSERT_EQ(y.sizes(), x.sizes());
  EXPECT_FLOAT_EQ(y[0][0][0][0].item<float>(), 2.5f);  // (0 + 1 + 4 + 5) / 4
  EXPECT_FLOAT_EQ(y[0][0][0][1].item<float>(), 3.0f);  // (0 + 1 + 2 + 4 + 5 + 6) / 6
  EXPECT_FLOAT_EQ(y[0][0][1][1].item<float>(), 5.0f);  // the full 3 x 3 mean
  EXPECT_THROW(avg_pool2d_tf_same(x, 2), c10::Error);
}

TEST(Depth, MakeDivisible) {
  EXPECT_EQ(make_divisible(32, 8, 8), 32);
  EXPECT_EQ(make_divisible(12, 8, 8), 16);    // halves round up
  EXPECT_EQ(make_divisible(11.2, 8, 8), 16);  // 8 would lose over 10% of 11.2
  EXPECT_EQ(make_divisible(33.6, 8, 8), 32);  // 32 keeps over 90%
  EXPECT_EQ(make_divisible(8, 8, 16), 16);    // min_value
  EXPECT_EQ(make_divisible(3, 8, 8), 8);
  EXPECT_EQ(make_divisible(54, 1, 1), 54);
}

TEST(Depth, ScaleDepthTruncates) {
  EXPECT_EQ(scale_depth(32, 0.75, 8), 24);
  EXPECT_EQ(scale_depth(100, 0.35, 8), 35);  // int(35.0), no rounding to 8
  EXPECT_EQ(scale_depth(10, 0.5, 8), 8);     // min_depth
}

TEST(Depth, ScaleFiltersRoundsToEights) {
  EXPECT_EQ(scale_filters(72, 0.25), 16);   // int(2.25 + 0.5) * 8
  EXPECT_EQ(scale_filters(144, 0.25), 40);  // int(4.5 + 0.5) * 8
  EXPECT_EQ(scale_filters(16, 0.25), 8);    // int(0.5 + 0.5) * 8
  EXPECT_EQ(scale_filters(8, 0.25), 8);     // at least 8
}

TEST(Activation, Values) {
  const auto x = torch::tensor({-4.0f, 0.0f, 1.0f, 7.0f});
  EXPECT_TRUE(torch::allclose(activate(Activation::kNone, x), x));
  EXPECT_TRUE(torch::allclose(activate(Activation::kRelu, x), torch::tensor({0.0f, 0.0f, 1.0f, 7.0f})));
  EXPECT_TRUE(torch::allclose(activate(Activation::kRelu6, x), torch::tensor({0.0f, 0.0f, 1.0f, 6.0f})));
  // x * relu6(x + 3) / 6: 0, 0, 4/6, 7.
  EXPECT_TRUE(torch::allclose(activate(Activation::kHardSwish, x), torch::tensor({0.0f, 0.0f, 4.0f / 6.0f, 7.0f})));
  // relu6(x + 3) * 0.16667 (TF-Slim's rounded 1/6): 0, 0.50001, 0.66668, 1.00002.
  EXPECT_TRUE(torch::allclose(activate(Activation::kHardSigmoid, x),
                              torch::tensor({0.0f, 0.50001f, 0.66668f, 1.00002f}), 1e-6, 1e-6));
}

TEST(ConvNormActivation, NamesAndShapes) {
  ConvNormActivation m(ConvNormActivationOptions(4, 8, 3).stride(2).tf_same_padding(true));
  EXPECT_EQ(names(*m), (std::vector<std::string>{"0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                                 "1.num_batches_tracked"}));
  EXPECT_EQ(m->forward(torch::randn({2, 4, 7, 6})).sizes(), (std::vector<int64_t>{2, 8, 4, 3}));
  ConvNormActivation symmetric(ConvNormActivationOptions(4, 8, 3).stride(2));  // (k - 1) / 2 each side
  EXPECT_EQ(symmetric->forward(torch::randn({2, 4, 6, 6})).sizes(), (std::vector<int64_t>{2, 8, 3, 3}));
}

TEST(ConvNormActivation, ActivationOption) {
  ConvNormActivation relu6(ConvNormActivationOptions(2, 2, 1));
  ConvNormActivation linear(ConvNormActivationOptions(2, 2, 1).activation(Activation::kNone));
  relu6->eval();
  linear->eval();
  {
    torch::NoGradGuard no_grad;
    for (auto* m : {relu6.get(), linear.get()}) m->conv->weight.copy_(torch::eye(2).reshape({2, 2, 1, 1}) * 10);
  }
  const auto x = torch::tensor({1.0f, -1.0f}).reshape({1, 2, 1, 1});
  EXPECT_NEAR(relu6->forward(x)[0][0][0][0].item<float>(), 6.0, 1e-6);  // 10 / sqrt(1 + eps), clamped
  EXPECT_NEAR(relu6->forward(x)[0][1][0][0].item<float>(), 0.0, 1e-6);
  EXPECT_NEAR(linear->forward(x)[0][1][0][0].item<float>(), -10.0, 1e-3);
}

TEST(SqueezeExcite, NamesAndGate) {
  SqueezeExcite se(SqueezeExciteOptions(8, 2).inner(Activation::kRelu).gate(Activation::kHardSigmoid));
  EXPECT_EQ(names(*se), (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  {
    torch::NoGradGuard no_grad;
    se->fc2->weight.zero_();
    se->fc2->bias.zero_();
  }
  // fc2 outputs 0, so the gate is relu6(3) * 0.16667 everywhere.
  const auto x = torch::randn({1, 8, 3, 3});
  EXPECT_TRUE(torch::allclose(se->forward(x), x * 0.50001, 1e-6, 1e-6));
}

TEST(BatchNorm, OverrideRunsOnlyInTraining) {
  torch::nn::BatchNorm2d bn(3);
  int calls = 0;
  set_batch_norm_override([&calls](torch::nn::BatchNorm2dImpl& b, const torch::Tensor& x) {
    ++calls;
    return b.forward(x);
  });
  const auto x = torch::randn({2, 3, 4, 4});
  batch_norm(*bn, x);
  bn->eval();
  batch_norm(*bn, x);
  set_batch_norm_override({});
  bn->train();
  batch_norm(*bn, x);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace orchard::layers
