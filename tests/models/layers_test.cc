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
#include "orchard/layers/fake_quant.h"
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

// TensorFlow's FakeQuantWithMinMaxVars, worked by hand. [-1, 3] on 8 bits: scale 4 / 255, zero
// point 1 / scale = 63.75 rounded to 64, so the nudged range is [-64, 191] * 4 / 255 and 0 is on
// the grid.
TEST(FakeQuant, NudgedRangeAndGrid) {
  const auto r = nudge_range(-1.0f, 3.0f, 8, /*narrow_range=*/false);
  EXPECT_EQ(r.zero_point, 64);
  EXPECT_FLOAT_EQ(r.scale, 4.0f / 255.0f);
  EXPECT_FLOAT_EQ(r.min, -64.0f * 4.0f / 255.0f);
  EXPECT_FLOAT_EQ(r.max, 191.0f * 4.0f / 255.0f);
  // Weights (narrow range, grid 1..255): [-0.5, 1] has scale 1.5 / 254, zero point
  // 1 + 0.5 / scale = 85.67 -> 86, nudged range [(1 - 86), (255 - 86)] * scale.
  const auto w = nudge_range(-0.5f, 1.0f, 8, /*narrow_range=*/true);
  EXPECT_EQ(w.quant_min, 1);
  EXPECT_EQ(w.zero_point, 86);
  EXPECT_FLOAT_EQ(w.min, -85.0f * 1.5f / 254.0f);
  EXPECT_FLOAT_EQ(w.max, 169.0f * 1.5f / 254.0f);

  // Values clamp to the nudged range and snap to the grid (floor(v + 0.5)): -0.5 is 32.125 steps
  // above the minimum -> 32; 0.3 is 83.125 -> 83; 0 stays 0. The straight-through gradient is 1
  // inside the range and 0 outside.
  auto x = torch::tensor({-2.0f, -0.5f, 0.0f, 0.3f, 4.0f}).requires_grad_(true);
  const auto y = fake_quantize(x, r);
  const float step = 4.0f / 255.0f;
  const auto expected = torch::tensor({r.min, r.min + 32 * step, 0.0f, r.min + 83 * step, r.max});
  EXPECT_TRUE(torch::allclose(y, expected, 0, 1e-6)) << y;
  y.sum().backward();
  EXPECT_TRUE(x.grad().equal(torch::tensor({0.0f, 1.0f, 1.0f, 1.0f, 0.0f}))) << x.grad();
}

// Activations: zero-debiased moving averages of each batch's range (decay 0.999); the first
// batch's range is taken whole. Before `delay` training passes values through; evaluation
// always quantizes.
TEST(FakeQuant, MovingAverageRangeAndDelay) {
  auto control = std::make_shared<QuantizationControl>();
  FakeQuant q(control, /*weights=*/false);
  q->train();
  const auto first = torch::tensor({-2.0f, 0.5f, 4.0f});
  EXPECT_TRUE(q->forward(first).equal(first));     // not active yet: unchanged
  EXPECT_NEAR(q->min.item<float>(), -2.0f, 1e-4);  // float32's 1 - 0.999
  EXPECT_NEAR(q->max.item<float>(), 4.0f, 1e-4);
  control->active = true;
  q->forward(torch::tensor({-1.0f, 2.0f}));
  // biased = 0.999 * 0.001 * v1 + 0.001 * v2, divided by 1 - 0.999^2 (in float32, as TF's
  // variables: 1 - 0.999^2 keeps 4 digits).
  const double debias = 1 - 0.999 * 0.999;
  EXPECT_NEAR(q->min.item<double>(), (0.999 * 0.001 * -2 + 0.001 * -1) / debias, 3e-4);
  EXPECT_NEAR(q->max.item<double>(), (0.999 * 0.001 * 4 + 0.001 * 2) / debias, 3e-4);
  const auto range = q->range();
  q->eval();
  control->active = false;
  const auto y = q->forward(torch::tensor({0.3f, 10.0f}));
  EXPECT_NEAR(y[1].item<float>(), range.max, 1e-6);  // clamped
  EXPECT_NE(y[0].item<float>(), 0.3f);               // snapped
  EXPECT_NEAR(y[0].item<float>(), 0.3f, range.scale / 2 + 1e-6);
  EXPECT_NEAR(q->max.item<double>(), (0.999 * 0.001 * 4 + 0.001 * 2) / debias, 3e-4);  // evaluation keeps it
}

// ConvNormActivation under quantization, evaluated: the batch norm folded into the weights,
// the folded weights on their own (narrow) grid, the output on the activation grid.
TEST(FakeQuant, ConvNormActivationFoldsThenQuantizes) {
  torch::manual_seed(0);
  ConvNormActivation layer(ConvNormActivationOptions(3, 4, 3));
  {
    torch::NoGradGuard no_grad;
    layer->bn->weight.uniform_(0.5, 1.5);
    layer->bn->bias.uniform_(-0.2, 0.2);
    layer->bn->running_mean.uniform_(-0.1, 0.1);
    layer->bn->running_var.uniform_(0.5, 2.0);
  }
  auto control = std::make_shared<QuantizationControl>();
  layer->enable_quantization(control);
  ASSERT_TRUE(layer->weights_quant);
  const auto x = torch::randn({2, 3, 8, 8});
  layer->train();
  control->active = true;
  layer->forward(x);  // sets the activation range
  layer->eval();
  torch::NoGradGuard no_grad;
  const auto y = layer->forward(x);

  const auto& bn = *layer->bn;
  const auto s = bn.weight / torch::sqrt(bn.running_var + bn.options.eps());
  const auto folded = layer->conv->weight * s.view({-1, 1, 1, 1});
  const auto wr =
      nudge_range(std::min(0.0f, folded.min().item<float>()), std::max(0.0f, folded.max().item<float>()), 8, true);
  const auto qw = torch::floor((folded.clamp(wr.min, wr.max) - wr.min) / wr.scale + 0.5) * wr.scale + wr.min;
  auto expected = torch::nn::functional::conv2d(x, qw, torch::nn::functional::Conv2dFuncOptions().padding(1)) +
                  (bn.bias - bn.running_mean * s).view({1, -1, 1, 1});
  expected = torch::clamp(expected, 0, 6);  // ReLU6
  const auto ar = layer->act_quant->range();
  expected = torch::floor((expected.clamp(ar.min, ar.max) - ar.min) / ar.scale + 0.5) * ar.scale + ar.min;
  EXPECT_LE((y - expected).abs().max().item<double>(), 1e-5);
  // Every output on the activation grid.
  const auto steps = (y - ar.min) / ar.scale;
  EXPECT_LE((steps - steps.round()).abs().max().item<double>(), 1e-3);
}

}  // namespace
}  // namespace orchard::layers
