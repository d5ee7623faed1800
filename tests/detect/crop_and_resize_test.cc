// tf.image.crop_and_resize: hand-worked samples of a 3x3 image (values 10 y + x), extrapolation,
// flipped and degenerate boxes, several images, and agreement with TF's per-sample loop (written
// out below from the kernel's formulas) on random boxes, with gradients to the image.
#include "orchard/detect/ops/crop_and_resize.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace orchard::detect {
namespace {

// [1, 1, 3, 3]: 0 1 2 / 10 11 12 / 20 21 22.
at::Tensor grid3() { return torch::tensor({0.f, 1.f, 2.f, 10.f, 11.f, 12.f, 20.f, 21.f, 22.f}).view({1, 1, 3, 3}); }

at::Tensor crop(const at::Tensor& image, std::vector<float> box, int64_t h, int64_t w, float extrapolation = 0.f) {
  return crop_and_resize(image, torch::tensor(box).view({1, 4}), torch::zeros({1}, torch::kLong), h, w,
                         extrapolation)[0][0];
}

void expect_values(const at::Tensor& t, const std::vector<float>& want) {
  const auto flat = t.contiguous().view(-1);
  ASSERT_EQ(flat.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(flat[static_cast<int64_t>(i)].item<float>(), want[i], 1e-4f) << i;
}

TEST(CropAndResize, SamplesAsTensorFlow) {
  const auto image = grid3();
  // The whole image at its own size is the image; the top-left quarter at 2x2 samples rows and
  // columns 0 and 1 (y = 0 + i * 0.5 * 2 / 1).
  expect_values(crop(image, {0, 0, 1, 1}, 3, 3), {0, 1, 2, 10, 11, 12, 20, 21, 22});
  expect_values(crop(image, {0, 0, 0.5f, 0.5f}, 2, 2), {0, 1, 10, 11});
  // Between pixels: y = 0.25 * 2 = 0.5 and 1.5, x = 0.5 and 1.5.
  expect_values(crop(image, {0.25f, 0.25f, 0.75f, 0.75f}, 2, 2), {5.5f, 6.5f, 15.5f, 16.5f});
  // One sample: the box's centre (y = x = 1).
  expect_values(crop(image, {0.25f, 0.25f, 0.75f, 0.75f}, 1, 1), {11});
  // A flat box: every row at y = 0.5.
  expect_values(crop(image, {0.25f, 0, 0.25f, 1}, 2, 3), {5, 6, 7, 5, 6, 7});
  // y1 > y2 flips the rows.
  expect_values(crop(image, {1, 0, 0, 1}, 3, 3), {20, 21, 22, 10, 11, 12, 0, 1, 2});
  // Samples outside [0, 2] are the extrapolation value, whole rows and columns of them.
  expect_values(crop(image, {-0.5f, 0, 0.5f, 1}, 3, 3, -7.f), {-7, -7, -7, 0, 1, 2, 10, 11, 12});
  expect_values(crop(image, {0, 0.5f, 1, 1.5f}, 3, 3, -7.f), {1, 2, -7, 11, 12, -7, 21, 22, -7});
  // Just inside the last pixel centre is still bilinear.
  expect_values(crop(image, {1, 1, 1, 1}, 1, 1, -7.f), {22});
}

TEST(CropAndResize, BoxesOfSeveralImagesAndChannels) {
  auto image = torch::stack({grid3()[0], grid3()[0] + 100});  // [2, 1, 3, 3]
  image = torch::cat({image, -image}, 1);                     // [2, 2, 3, 3]
  const auto boxes = torch::tensor({0.f, 0.f, 0.5f, 0.5f, 0.f, 0.f, 0.5f, 0.5f, 0.5f, 0.5f, 1.f, 1.f}).view({3, 4});
  const auto out = crop_and_resize(image, boxes, torch::tensor({1, 0, 1}, torch::kLong), 2, 2);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 2, 2, 2}));
  expect_values(out[0][0], {100, 101, 110, 111});
  expect_values(out[0][1], {-100, -101, -110, -111});
  expect_values(out[1][0], {0, 1, 10, 11});
  expect_values(out[2][0], {111, 112, 121, 122});
  EXPECT_EQ(crop_and_resize(image, torch::zeros({0, 4}), torch::zeros({0}, torch::kLong), 2, 2).sizes(),
            (std::vector<int64_t>{0, 2, 2, 2}));
}

// TF's CropAndResize kernel, sample by sample.
float tf_sample(const at::Tensor& image, int64_t b, int64_t c, const float* box, int64_t i, int64_t j, int64_t ch,
                int64_t cw, float extrapolation) {
  const int64_t H = image.size(2), W = image.size(3);
  const float hs = ch > 1 ? (box[2] - box[0]) * (H - 1) / (ch - 1) : 0.f;
  const float ws = cw > 1 ? (box[3] - box[1]) * (W - 1) / (cw - 1) : 0.f;
  const float y = ch > 1 ? box[0] * (H - 1) + i * hs : 0.5f * (box[0] + box[2]) * (H - 1);
  const float x = cw > 1 ? box[1] * (W - 1) + j * ws : 0.5f * (box[1] + box[3]) * (W - 1);
  if (y < 0 || y > H - 1 || x < 0 || x > W - 1) return extrapolation;
  const auto top = static_cast<int64_t>(std::floor(y)), bottom = static_cast<int64_t>(std::ceil(y));
  const auto left = static_cast<int64_t>(std::floor(x)), right = static_cast<int64_t>(std::ceil(x));
  const float yl = y - top, xl = x - left;
  auto v = [&](int64_t yy, int64_t xx) { return image[b][c][yy][xx].item<float>(); };
  const float t = v(top, left) + (v(top, right) - v(top, left)) * xl;
  const float d = v(bottom, left) + (v(bottom, right) - v(bottom, left)) * xl;
  return t + (d - t) * yl;
}

TEST(CropAndResize, AgreesWithTheKernelOnRandomBoxesAndPassesGradients) {
  torch::manual_seed(3);
  const auto image = torch::randn({2, 3, 7, 9});
  const auto boxes = torch::rand({12, 4}) * 1.4 - 0.2;  // some partly outside, some flipped
  const auto indices = torch::randint(0, 2, {12}, torch::kLong);
  const int64_t ch = 4, cw = 5;
  const auto out = crop_and_resize(image, boxes, indices, ch, cw, 0.5f);
  for (int64_t n = 0; n < 12; ++n) {
    const auto box = boxes[n].contiguous();
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < ch; ++i)
        for (int64_t j = 0; j < cw; ++j)
          EXPECT_NEAR(out[n][c][i][j].item<float>(),
                      tf_sample(image, indices[n].item<int64_t>(), c, box.data_ptr<float>(), i, j, ch, cw, 0.5f), 1e-4f)
              << n << " " << c << " " << i << " " << j;
  }
  // d(sum of crops)/d(image): each sample adds its bilinear weights to its four pixels.
  const auto leaf = image.clone().requires_grad_(true);
  crop_and_resize(leaf, boxes, indices, ch, cw).sum().backward();
  const auto grad = leaf.grad();
  EXPECT_TRUE(grad.defined());
  double total = 0;
  for (int64_t n = 0; n < 12; ++n) {
    const auto box = boxes[n].contiguous();
    for (int64_t i = 0; i < ch; ++i)
      for (int64_t j = 0; j < cw; ++j)
        total += tf_sample(torch::ones({2, 1, 7, 9}), 0, 0, box.data_ptr<float>(), i, j, ch, cw, 0.f);
  }
  EXPECT_NEAR(grad.sum().item<double>(), 3 * total, 1e-3);  // three channels
  // Weighted sums in double: the analytic gradient equals central differences.
  const auto dbl = torch::randn({1, 2, 5, 6}, torch::kDouble);
  const auto db = torch::tensor({0.1, 0.2, 0.8, 0.7, 0.9, 0.0, 0.3, 0.6}, torch::kDouble).view({2, 4});
  const auto weights = torch::randn({2, 2, 3, 4}, torch::kDouble);
  auto f = [&](const at::Tensor& img) {
    return (crop_and_resize(img, db, torch::zeros({2}, torch::kLong), 3, 4) * weights).sum();
  };
  const auto x = dbl.clone().requires_grad_(true);
  f(x).backward();
  for (int64_t k = 0; k < dbl.numel(); k += 7) {
    auto plus = dbl.clone(), minus = dbl.clone();
    plus.view(-1)[k] += 1e-6;
    minus.view(-1)[k] -= 1e-6;
    const double numeric = (f(plus).item<double>() - f(minus).item<double>()) / 2e-6;
    EXPECT_NEAR(x.grad().view(-1)[k].item<double>(), numeric, 1e-6) << k;
  }
}

// The CPU kernel and the grid_sample path (the one other devices take) give the same crops and
// the same image gradient: several images, boxes partly outside and flipped, 1 and 150 channels
// (the kernel works in blocks of 64), an input and an output gradient with channels-last strides.
TEST(CropAndResize, KernelEqualsTheGridSamplePath) {
  torch::manual_seed(5);
  for (const int64_t channels : {int64_t{1}, int64_t{150}}) {
    for (const bool channels_last : {false, true}) {
      auto image = torch::randn({3, channels, 11, 8});
      if (channels_last) image = image.contiguous(at::MemoryFormat::ChannelsLast);
      const auto boxes = torch::rand({17, 4}) * 1.4 - 0.2;
      const auto indices = torch::randint(0, 3, {17}, torch::kLong);
      auto weights = torch::randn({17, channels, 5, 3});
      if (channels_last) weights = weights.contiguous(at::MemoryFormat::ChannelsLast);
      const auto a = image.clone().requires_grad_(true), b = image.clone().requires_grad_(true);
      const auto kernel = crop_and_resize(a, boxes, indices, 5, 3, -1.5f);
      const auto reference = crop_and_resize_grid_sample(b, boxes, indices, 5, 3, -1.5f);
      EXPECT_LT((kernel - reference).abs().max().item<float>(), 1e-5f) << channels << " " << channels_last;
      (kernel * weights).sum().backward();
      (reference * weights).sum().backward();
      EXPECT_LT((a.grad() - b.grad()).abs().max().item<float>(), 1e-4f) << channels << " " << channels_last;
      EXPECT_GT(a.grad().abs().sum().item<float>(), 1.f);
    }
  }
}

// R-FCN's position-sensitive crops, hand-worked. A 3x3 map, 3x3 bins, crop 3x3 (one sample per
// bin, at the bin's centre: y = (by + .5) / 3 * (H - 1)). Only group 4 (the centre bin) is
// nonzero, 9 at pixel (1, 1): the box (0, 0, 1, 1) puts the centre bin's sample exactly there, so
// the output is 9 / 9 bins = 1; a box whose centre bin falls elsewhere reads 0 from it.
TEST(PositionSensitiveCropRegions, EachBinReadsItsOwnChannels) {
  auto features = torch::zeros({1, 9, 3, 3});
  features[0][4][1][1] = 9;
  const auto one = position_sensitive_crop_regions(features, torch::tensor({{0.f, 0.f, 1.f, 1.f}}),
                                                   torch::tensor({int64_t{0}}), 3, 3, 3, 3);
  ASSERT_EQ(one.sizes(), (std::vector<int64_t>{1, 1}));
  EXPECT_NEAR(one.item<float>(), 1.f, 1e-6);
  // In group 0 the corner bin (0, 0) reads it instead: its box (0, 0, 1/3, 1/3) is sampled at its
  // centre, pixel (1/3, 1/3), where pixel (1, 1) weighs 1/3 x 1/3.
  auto corner = torch::zeros({1, 9, 3, 3});
  corner[0][0][1][1] = 9;
  const auto c = position_sensitive_crop_regions(corner, torch::tensor({{0.f, 0.f, 1.f, 1.f}}),
                                                 torch::tensor({int64_t{0}}), 3, 3, 3, 3);
  EXPECT_NEAR(c.item<float>(), 9.f * (1.f / 3) * (1.f / 3) / 9.f, 1e-5);
  // Constant groups: group g holds g + 1 everywhere; each output channel is the mean over bins.
  auto constant = torch::arange(1, 10, torch::kFloat).view({1, 9, 1, 1}).repeat({2, 2, 5, 4});  // C' = 2
  const auto out =
      position_sensitive_crop_regions(constant, torch::tensor({{.1f, .2f, .8f, .9f}, {0.f, 0.f, .5f, .5f}}),
                                      torch::tensor({int64_t{1}, int64_t{0}}), 6, 6, 3, 3);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 2}));
  // repeat({2, 2, ...}) lays the 9 groups out twice along the channels: groups of 2 channels are
  // (1, 2), (3, 4), ..., (17, 18) with values 1..9 then 1..9: means (1+3+5+7+9+2+4+6+8)/9, ...
  const auto expected = torch::arange(1, 10, torch::kFloat).repeat({2}).view({9, 2}).mean(0);
  EXPECT_TRUE(torch::allclose(out[0], expected)) << out;
  EXPECT_TRUE(torch::allclose(out[1], expected)) << out;
  EXPECT_THROW(position_sensitive_crop_regions(features, torch::tensor({{0.f, 0.f, 1.f, 1.f}}),
                                               torch::tensor({int64_t{0}}), 4, 4, 3, 3),
               c10::Error);
}

}  // namespace
}  // namespace orchard::detect
