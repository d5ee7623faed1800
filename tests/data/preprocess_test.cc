#include "orchard/data/preprocess.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"

namespace orchard::data {
namespace {

// TF Models' _CHANNEL_MEANS (imagenet_preprocessing.py).
constexpr float kMeanR = 123.68f, kMeanG = 116.78f, kMeanB = 103.94f;

Image solid(int h, int w, uint8_t r, uint8_t g, uint8_t b) {
  Image im;
  im.height = h;
  im.width = w;
  im.pixels.resize(static_cast<size_t>(h) * w * 3);
  for (size_t i = 0; i < im.pixels.size(); i += 3) {
    im.pixels[i] = r;
    im.pixels[i + 1] = g;
    im.pixels[i + 2] = b;
  }
  return im;
}

void paint(Image& im, int y0, int x0, int h, int w, uint8_t r, uint8_t g, uint8_t b) {
  for (int y = y0; y < y0 + h; ++y)
    for (int x = x0; x < x0 + w; ++x) {
      uint8_t* p = im.pixels.data() + (static_cast<size_t>(y) * im.width + x) * 3;
      p[0] = r;
      p[1] = g;
      p[2] = b;
    }
}

Image noise(int h, int w, uint64_t seed) {
  Image im = solid(h, w, 0, 0, 0);
  const std::string r = test::random_bytes(im.pixels.size(), seed);
  std::copy(r.begin(), r.end(), im.pixels.begin());
  return im;
}

bool inside(const CropWindow& c, int h, int w) {
  return c.y >= 0 && c.x >= 0 && c.height > 0 && c.width > 0 && c.y + c.height <= h && c.x + c.width <= w;
}

bool is_whole(const CropWindow& c, int h, int w) { return c.y == 0 && c.x == 0 && c.height == h && c.width == w; }

// Fraction of `b` (normalised [ymin, xmin, ymax, xmax]) inside the crop, computed here.
double coverage(const CropWindow& c, const Box& b, int h, int w) {
  const double by0 = b.ymin * h, by1 = b.ymax * h, bx0 = b.xmin * w, bx1 = b.xmax * w;
  const double iy = std::min<double>(by1, c.y + c.height) - std::max<double>(by0, c.y);
  const double ix = std::min<double>(bx1, c.x + c.width) - std::max<double>(bx0, c.x);
  if (iy <= 0 || ix <= 0) return 0;
  return iy * ix / ((by1 - by0) * (bx1 - bx0));
}

TEST(SampleDistortedCrop, AreaAspectAndPlacementOverManyDraws) {
  const DistortedBoxOptions opt;  // area [0.05, 1], aspect [0.75, 1.33], 100 attempts
  for (auto [h, w] : {std::pair{480, 640}, std::pair{333, 500}, std::pair{224, 224}}) {
    SCOPED_TRACE(::testing::Message() << h << "x" << w);
    std::mt19937_64 rng(1234);
    int fallbacks = 0, small = 0, large = 0;
    std::vector<int> xs;
    for (int i = 0; i < 2000; ++i) {
      const CropWindow c = sample_distorted_crop(h, w, {}, opt, rng);
      ASSERT_TRUE(inside(c, h, w)) << "draw " << i;
      if (is_whole(c, h, w)) {
        ++fallbacks;
        continue;
      }
      const double area = static_cast<double>(c.height) * c.width / (static_cast<double>(h) * w);
      ASSERT_GE(area, 0.05 * (1 - 0.01)) << "draw " << i;
      ASSERT_LE(area, 1.0);
      // The width is the rounded height * aspect: allow one pixel either way.
      ASSERT_GE(c.width + 1, 0.75 * c.height) << "draw " << i << ": " << c.height << "x" << c.width;
      ASSERT_LE(c.width - 1, 1.33 * c.height) << "draw " << i << ": " << c.height << "x" << c.width;
      small += area < 0.3;
      large += area > 0.7;
      xs.push_back(c.x);
    }
    // Rarely the whole image, and spread over sizes and positions.
    EXPECT_LT(fallbacks, 100);
    EXPECT_GT(small, 200);
    EXPECT_GT(large, 50);
    std::sort(xs.begin(), xs.end());
    EXPECT_GT(std::unique(xs.begin(), xs.end()) - xs.begin(), 100);
  }
}

TEST(SampleDistortedCrop, ExtremeShapesStayInside) {
  const DistortedBoxOptions opt;
  std::mt19937_64 rng(5);
  for (auto [h, w] : {std::pair{32, 1000}, std::pair{1000, 32}, std::pair{8, 8}, std::pair{1, 1}, std::pair{3, 2}})
    for (int i = 0; i < 300; ++i) {
      const CropWindow c = sample_distorted_crop(h, w, {}, opt, rng);
      ASSERT_TRUE(inside(c, h, w)) << h << "x" << w << " draw " << i;
    }
}

TEST(SampleDistortedCrop, SameSeedSameCrops) {
  const DistortedBoxOptions opt;
  std::mt19937_64 a(77), b(77), c(78);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const CropWindow x = sample_distorted_crop(300, 400, {}, opt, a);
    const CropWindow y = sample_distorted_crop(300, 400, {}, opt, b);
    const CropWindow z = sample_distorted_crop(300, 400, {}, opt, c);
    EXPECT_TRUE(x.y == y.y && x.x == y.x && x.height == y.height && x.width == y.width);
    differ += !(x.y == z.y && x.x == z.x && x.height == z.height && x.width == z.width);
  }
  EXPECT_GT(differ, 90);
}

TEST(SampleDistortedCrop, ImpossibleConstraintsFallBackToTheWholeImage) {
  std::mt19937_64 rng(9);
  // Covering all of a whole-image box needs the whole image, but crops are <= 5% of it.
  DistortedBoxOptions opt;
  opt.min_object_covered = 1.0f;
  opt.min_area = 0.01f;
  opt.max_area = 0.05f;
  for (int i = 0; i < 50; ++i)
    EXPECT_TRUE(is_whole(sample_distorted_crop(200, 300, {Box{0, 0, 1, 1}}, opt, rng), 200, 300));

  // The whole area is required but no aspect ratio in [2, 3] fits a square.
  DistortedBoxOptions wide;
  wide.min_area = 1.0f;
  wide.min_aspect_ratio = 2.0f;
  wide.max_aspect_ratio = 3.0f;
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(is_whole(sample_distorted_crop(100, 100, {}, wide, rng), 100, 100));
}

TEST(SampleDistortedCrop, CropsCoverEnoughOfSomeBox) {
  const int h = 200, w = 300;
  const std::vector<Box> boxes = {{0.1f, 0.2f, 0.4f, 0.5f}, {0.6f, 0.7f, 0.95f, 0.9f}};
  for (float min_covered : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(::testing::Message() << "min_object_covered " << min_covered);
    DistortedBoxOptions opt;
    opt.min_object_covered = min_covered;
    std::mt19937_64 rng(42);
    int not_whole = 0, misses_box0 = 0;
    for (int i = 0; i < 2000; ++i) {
      const CropWindow c = sample_distorted_crop(h, w, boxes, opt, rng);
      ASSERT_TRUE(inside(c, h, w));
      if (is_whole(c, h, w)) continue;
      ++not_whole;
      const double best = std::max(coverage(c, boxes[0], h, w), coverage(c, boxes[1], h, w));
      ASSERT_GE(best, min_covered - 1e-4)
          << "draw " << i << " crop y=" << c.y << " x=" << c.x << " h=" << c.height << " w=" << c.width;
      misses_box0 += coverage(c, boxes[0], h, w) < min_covered;
    }
    EXPECT_GT(not_whole, 1000);
    EXPECT_GT(misses_box0, 0);  // some crops qualify through the second box only
  }
}

TEST(Preprocess, EvalResizeMin) {
  EXPECT_EQ(eval_resize_min(224), 256);
  EXPECT_EQ(eval_resize_min(112), 128);
  EXPECT_EQ(eval_resize_min(32), 37);  // 256 * 32 / 224 = 36.57
}

TEST(Preprocess, ResizeNormalizeSubtractsMeansFlipsAndLaysOut) {
  // 2x3 image with distinct pixels, no resize.
  Image im = solid(2, 3, 0, 0, 0);
  for (size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<uint8_t>(10 * i);
  std::vector<float> chw(18), hwc(18), flipped(18);
  resize_normalize(im, 2, 3, false, false, chw.data());
  resize_normalize(im, 2, 3, false, true, hwc.data());
  resize_normalize(im, 2, 3, true, false, flipped.data());
  const float means[3] = {kMeanR, kMeanG, kMeanB};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c) {
        const float v = static_cast<float>(10 * ((y * 3 + x) * 3 + c)) - means[c];
        EXPECT_FLOAT_EQ(chw[static_cast<size_t>((c * 2 + y) * 3 + x)], v);
        EXPECT_FLOAT_EQ(hwc[static_cast<size_t>((y * 3 + x) * 3 + c)], v);
        EXPECT_FLOAT_EQ(flipped[static_cast<size_t>((c * 2 + y) * 3 + (2 - x))], v);
      }
}

TEST(Preprocess, EvalIsDeterministicAndCentred) {
  // 300x400 black image with a 100x100 block centred on the image centre (150, 200).
  const int S = 224;
  Image im = solid(300, 400, 0, 0, 0);
  paint(im, 100, 150, 100, 100, 200, 50, 10);
  const std::string png = encode_png(im);
  PreprocessOptions opt;
  opt.image_size = S;
  std::vector<float> a(3 * S * S), b(3 * S * S);
  preprocess_eval(png, opt, a.data(), "eval");
  preprocess_eval(png, opt, b.data(), "eval");
  EXPECT_EQ(a, b);

  auto at = [&](int c, int y, int x) { return a[static_cast<size_t>((c * S + y) * S + x)]; };
  // Hand-worked geometry: short side 300 -> 256 (x 0.8533), 341 x 256 resized, crop at
  // top 16, left 58. The block maps to rows ~69..155 and columns ~70..155 of the output.
  EXPECT_NEAR(at(0, 112, 112), 200 - kMeanR, 1e-4);
  EXPECT_NEAR(at(1, 112, 112), 50 - kMeanG, 1e-4);
  EXPECT_NEAR(at(2, 112, 112), 10 - kMeanB, 1e-4);
  EXPECT_NEAR(at(0, 0, 0), -kMeanR, 1e-4);
  EXPECT_NEAR(at(2, S - 1, S - 1), -kMeanB, 1e-4);
  // The block is centred in the output: its extent along the middle row and column.
  int top = S, bottom = -1, left = S, right = -1;
  for (int i = 0; i < S; ++i) {
    if (at(0, i, 112) > 0) top = std::min(top, i), bottom = std::max(bottom, i);
    if (at(0, 112, i) > 0) left = std::min(left, i), right = std::max(right, i);
  }
  EXPECT_NEAR((top + bottom) / 2.0, (S - 1) / 2.0, 1.5);
  EXPECT_NEAR((left + right) / 2.0, (S - 1) / 2.0, 1.5);
  EXPECT_NEAR(bottom - top + 1, 100 * 256.0 / 300, 2);  // block scaled by 0.8533
  EXPECT_NEAR(right - left + 1, 100 * 256.0 / 300, 2);

  // channels_last holds the same values.
  opt.channels_last = true;
  std::vector<float> hwc(3 * S * S);
  preprocess_eval(png, opt, hwc.data(), "eval");
  for (int y = 0; y < S; y += 7)
    for (int x = 0; x < S; x += 5)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(hwc[static_cast<size_t>((y * S + x) * 3 + c)], at(c, y, x));
}

TEST(Preprocess, EvalOfASmallJpegUsesTheWholeCentre) {
  // A JPEG smaller than the output is upscaled; a solid image stays solid.
  const std::string jpg = encode_jpeg(solid(20, 30, 90, 160, 230), 95);
  PreprocessOptions opt;
  opt.image_size = 32;
  std::vector<float> out(3 * 32 * 32);
  preprocess_eval(jpg, opt, out.data(), "eval");
  for (int i = 0; i < 32 * 32; ++i) {
    ASSERT_NEAR(out[static_cast<size_t>(i)], 90 - kMeanR, 2.5);
    ASSERT_NEAR(out[static_cast<size_t>(32 * 32 + i)], 160 - kMeanG, 2.5);
    ASSERT_NEAR(out[static_cast<size_t>(2 * 32 * 32 + i)], 230 - kMeanB, 2.5);
  }
}

TEST(Preprocess, TrainOutputIsMeanSubtractedAndInRange) {
  const std::string jpg = encode_jpeg(noise(64, 48, 1), 90);
  PreprocessOptions opt;
  opt.image_size = 32;
  std::vector<float> first, out(3 * 32 * 32);
  bool varies = false;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 rng(seed);
    preprocess_train(jpg, {}, opt, rng, out.data(), "train");
    for (float v : out) {
      ASSERT_GE(v, -kMeanR - 1e-3f);       // 0 - largest mean
      ASSERT_LE(v, 255 - kMeanB + 1e-3f);  // 255 - smallest mean
    }
    if (first.empty()) first = out;
    else varies = varies || out != first;
  }
  EXPECT_TRUE(varies) << "different seeds gave the same crop";

  // A solid colour gives exactly colour - mean whatever the crop and flip.
  const std::string png = encode_png(solid(50, 70, 10, 20, 30));
  for (uint64_t seed = 0; seed < 5; ++seed) {
    std::mt19937_64 rng(seed);
    preprocess_train(png, {}, opt, rng, out.data(), "train");
    for (int i = 0; i < 32 * 32; ++i) {
      ASSERT_NEAR(out[static_cast<size_t>(i)], 10 - kMeanR, 1e-4);
      ASSERT_NEAR(out[static_cast<size_t>(32 * 32 + i)], 20 - kMeanG, 1e-4);
      ASSERT_NEAR(out[static_cast<size_t>(2 * 32 * 32 + i)], 30 - kMeanB, 1e-4);
    }
  }
}

// Inception-v3's scaling, pixel * 2/255 - 1, on both paths (the ResNets' means otherwise).
TEST(Preprocess, InceptionScalingMapsPixelsToMinusOneToOne) {
  PreprocessOptions opt;
  opt.image_size = 16;
  opt.scale = kInceptionScale;
  opt.offset = kInceptionOffset;
  const std::string png = encode_png(solid(40, 30, 0, 255, 51));
  std::vector<float> out(3 * 16 * 16);
  std::mt19937_64 rng(3);
  for (bool train : {true, false}) {
    if (train) preprocess_train(png, {}, opt, rng, out.data(), "train");
    else preprocess_eval(png, opt, out.data(), "eval");
    for (int i = 0; i < 16 * 16; ++i) {
      ASSERT_NEAR(out[static_cast<size_t>(i)], -1.0f, 1e-5) << train;
      ASSERT_NEAR(out[static_cast<size_t>(16 * 16 + i)], 1.0f, 1e-5) << train;
      ASSERT_NEAR(out[static_cast<size_t>(2 * 16 * 16 + i)], -0.6f, 1e-5) << train;
    }
  }
}

TEST(Preprocess, TrainIsAPureFunctionOfTheRngAndLayoutOnlyPermutes) {
  const std::string jpg = encode_jpeg(noise(80, 60, 2), 90);
  const int S = 24;
  PreprocessOptions chw_opt;
  chw_opt.image_size = S;
  PreprocessOptions hwc_opt = chw_opt;
  hwc_opt.channels_last = true;
  for (uint64_t seed : {3u, 4u, 5u}) {
    std::vector<float> chw(3 * S * S), chw2(3 * S * S), hwc(3 * S * S);
    std::mt19937_64 r1(seed), r2(seed), r3(seed);
    preprocess_train(jpg, {}, chw_opt, r1, chw.data(), "train");
    preprocess_train(jpg, {}, chw_opt, r2, chw2.data(), "train");
    preprocess_train(jpg, {}, hwc_opt, r3, hwc.data(), "train");
    EXPECT_EQ(chw, chw2);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < S; ++y)
        for (int x = 0; x < S; ++x)
          ASSERT_EQ(chw[static_cast<size_t>((c * S + y) * S + x)], hwc[static_cast<size_t>((y * S + x) * 3 + c)]);
  }
}

TEST(Preprocess, PadCropIsATranslatedPossiblyMirroredCopyAndEvalIsTheImage) {
  // CIFAR-10 recipe: pad 4 black pixels, random 16x16 window, random flip; eval: the image as is.
  const int S = 16, P = 4;
  const Image im = noise(S, S, 7);
  const std::string png = encode_png(im);
  PreprocessOptions opt;
  opt.image_size = S;
  opt.augmentation = Augmentation::kPadCrop;
  opt.pad = P;
  auto pixel = [&](int y, int x, int c) -> float {  // padded, mean-subtracted source
    if (y < 0 || x < 0 || y >= S || x >= S) return -kChannelMeans[static_cast<size_t>(c)];
    return im.pixels[static_cast<size_t>((y * S + x) * 3 + c)] - kChannelMeans[static_cast<size_t>(c)];
  };
  std::vector<float> out(3 * S * S);
  preprocess_eval(png, opt, out.data(), "eval");
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x) ASSERT_EQ(out[static_cast<size_t>((c * S + y) * S + x)], pixel(y, x, c));

  std::set<std::tuple<int, int, bool>> seen;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    preprocess_train(png, {}, opt, rng, out.data(), "train");
    int found = 0;
    for (int dy = -P; dy <= P; ++dy)
      for (int dx = -P; dx <= P; ++dx)
        for (bool flip : {false, true}) {
          bool same = true;
          for (int c = 0; c < 3 && same; ++c)
            for (int y = 0; y < S && same; ++y)
              for (int x = 0; x < S && same; ++x)
                same = out[static_cast<size_t>((c * S + y) * S + x)] == pixel(y + dy, (flip ? S - 1 - x : x) + dx, c);
          if (same) ++found, seen.insert({dy, dx, flip});
        }
    ASSERT_EQ(found, 1) << "seed " << seed << ": not exactly one shift/flip of the padded image";
  }
  EXPECT_GT(seen.size(), 100u);  // of the 9 x 9 x 2 = 162 windows

  // Another size is resized to S x S first; a bad image is a DataError.
  const std::string big = encode_png(solid(40, 30, 10, 20, 30));
  preprocess_eval(big, opt, out.data(), "eval");
  EXPECT_NEAR(out[0], 10 - kMeanR, 1e-4);
  EXPECT_THROW(preprocess_eval("not an image", opt, out.data(), "x"), DataError);
  EXPECT_EQ(parse_augmentation("pad_crop"), Augmentation::kPadCrop);
  EXPECT_THROW(parse_augmentation("cutout"), Error);
}

TEST(Preprocess, RandomErasingZeroesOneRectangleInTorchvisionsRangesAtItsRate) {
  const int S = 28;
  const std::string png = encode_png(solid(S, S, 200, 180, 160));  // no pixel is the mean
  PreprocessOptions plain;
  plain.image_size = S;
  plain.augmentation = Augmentation::kPadCrop;
  plain.pad = 0;  // the train output is the image (possibly flipped): all pixels non-zero
  PreprocessOptions erasing = plain;
  erasing.random_erasing = 0.5f;
  std::vector<float> a(3 * S * S), b(3 * S * S);
  int erased = 0;
  const int trials = 2000;
  for (uint64_t seed = 0; seed < trials; ++seed) {
    std::mt19937_64 r1(seed), r2(seed);
    preprocess_train(png, {}, plain, r1, a.data(), "train");
    preprocess_train(png, {}, erasing, r2, b.data(), "train");
    // The erased pixels form one rectangle, equal in all channels; the rest is untouched.
    int y0 = S, x0 = S, y1 = -1, x1 = -1, zeros = 0;
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x) {
        const size_t i = static_cast<size_t>(y * S + x);
        const bool z = b[i] == 0;
        for (int c = 1; c < 3; ++c) ASSERT_EQ(b[c * S * S + i] == 0, z);
        for (int c = 0; c < 3 && !z; ++c) ASSERT_EQ(b[c * S * S + i], a[c * S * S + i]);
        if (z) ++zeros, y0 = std::min(y0, y), x0 = std::min(x0, x), y1 = std::max(y1, y), x1 = std::max(x1, x);
      }
    if (zeros == 0) continue;
    ++erased;
    const int h = y1 - y0 + 1, w = x1 - x0 + 1;
    ASSERT_EQ(zeros, h * w) << "seed " << seed << ": not a rectangle";
    EXPECT_GE(h * w, 0.02 * S * S - S) << seed;  // area 2-33% (rounded sides)
    EXPECT_LE(h * w, 0.33 * S * S + S) << seed;
    EXPECT_GE(static_cast<double>(h) / w, 0.3 * 0.8) << seed;  // ratio 0.3-3.3
    EXPECT_LE(static_cast<double>(h) / w, 3.3 / 0.8) << seed;
  }
  EXPECT_NEAR(erased / static_cast<double>(trials), 0.5, 0.05);

  // Channels-last erases the same rectangle; probability 0 draws nothing (outputs equal the plain path's).
  std::mt19937_64 r1(11), r2(11);
  const Rect r = random_erase(1, S, true, r1, b.data());
  EXPECT_GT(r.height * r.width, 0);
  for (int y = r.y; y < r.y + r.height; ++y)
    for (int x = r.x; x < r.x + r.width; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(b[static_cast<size_t>((y * S + x) * 3 + c)], 0);
  EXPECT_EQ(random_erase(0, S, true, r2, b.data()).height, 0);
  EXPECT_EQ(r2(), std::mt19937_64(11)());
}

TEST(Preprocess, BadImageIsADataErrorNamingTheRecord) {
  PreprocessOptions opt;
  opt.image_size = 8;
  std::vector<float> out(3 * 8 * 8);
  std::mt19937_64 rng(0);
  try {
    preprocess_train("not an image", {}, opt, rng, out.data(), "train-00001: record 4");
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("train-00001: record 4"), std::string::npos);
  }
  EXPECT_THROW(preprocess_eval("not an image", opt, out.data(), "x"), DataError);
}

}  // namespace
}  // namespace orchard::data
