// Instance masks through the detection data path: image/object/mask in records (the OD API's
// PNG_MASKS), the "masks" field of the input pipeline (flips, crops, nearest-neighbour resize),
// the shapes scenes' visible-pixel masks and COCO segmentations to masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/detection.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/data/shapes.h"
#include "orchard/detect/dataset_tools/coco.h"

namespace orchard::data {
namespace {

using test::expect_data_error;

// A single-channel [h, w] mask where f(y, x) holds, 0/1.
template <class F>
std::vector<uint8_t> mask_of(int h, int w, F f) {
  std::vector<uint8_t> m(static_cast<size_t>(h) * w);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) m[static_cast<size_t>(y) * w + x] = f(y, x) ? 1 : 0;
  return m;
}

std::string mask_png(const std::vector<uint8_t>& m, int h, int w) { return encode_gray_png(m.data(), h, w); }

// An h x w image whose pixel (y, x) is RGB (20 y + 5, 20 x + 5, 0): the preprocessed image says
// where each of its pixels came from.
Image coordinate_image(int h, int w) {
  Image img;
  img.height = h;
  img.width = w;
  img.pixels.assign(static_cast<size_t>(h) * w * 3, 0);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      img.pixels[(static_cast<size_t>(y) * w + x) * 3] = static_cast<uint8_t>(20 * y + 5);
      img.pixels[(static_cast<size_t>(y) * w + x) * 3 + 1] = static_cast<uint8_t>(20 * x + 5);
    }
  return img;
}

// A 40 x 60 record with two boxes and their masks (each mask its box's pixels).
DetectionExample example_with_masks() {
  Image img;
  img.height = 40;
  img.width = 60;
  img.pixels.assign(40 * 60 * 3, 90);
  DetectionExample d;
  d.encoded = encode_png(img);
  d.height = 40;
  d.width = 60;
  d.source_id = "m-1";
  d.boxes = {Box{0.1f, 0.5f, 0.6f, 1.0f}, Box{0.0f, 0.0f, 0.25f, 0.25f}};
  d.classes = {2, 1};
  d.masks = {mask_png(mask_of(40, 60, [](int y, int x) { return y >= 4 && y < 24 && x >= 30; }), 40, 60),
             mask_png(mask_of(40, 60, [](int y, int x) { return y < 10 && x < 15; }), 40, 60)};
  return d;
}

std::string parse_error(const std::string& record) {
  try {
    parse_detection_example(record, "f.tfrecord: record 7", 3);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

// The typed fields of one sample with masks [max_boxes, h, w], zeroed as the pipeline hands them.
struct MaskTargets {
  MaskTargets(int64_t max_boxes, int h, int w)
      : boxes(static_cast<size_t>(4 * max_boxes)),
        classes(static_cast<size_t>(max_boxes)),
        crowd(new bool[static_cast<size_t>(max_boxes)]()),
        masks(new bool[static_cast<size_t>(max_boxes) * h * w]()),
        max(max_boxes),
        height(h),
        width(w) {}
  DetectionTargets view() {
    DetectionTargets t;
    t.boxes = boxes.data();
    t.classes = classes.data();
    t.is_crowd = crowd.get();
    t.num_boxes = &num_boxes;
    t.image_id = &image_id;
    t.original_size = original_size;
    t.image_size = image_size;
    t.masks = masks.get();
    return t;
  }
  bool mask(int64_t i, int y, int x) const { return masks[(static_cast<size_t>(i) * height + y) * width + x]; }
  // Plane i as rows of '0'/'1', for exact comparisons.
  std::vector<std::string> plane(int64_t i) const {
    std::vector<std::string> rows;
    for (int y = 0; y < height; ++y) {
      rows.emplace_back();
      for (int x = 0; x < width; ++x) rows.back() += mask(i, y, x) ? '1' : '0';
    }
    return rows;
  }
  std::vector<float> boxes;
  std::vector<int64_t> classes;
  std::unique_ptr<bool[]> crowd, masks;
  int64_t max, num_boxes = 0, image_id = 0, original_size[2] = {0, 0}, image_size[2] = {0, 0};
  int height, width;
};

TEST(MaskRecords, RoundTripAsPngMasks) {
  const DetectionExample d = example_with_masks();
  const std::string rec = make_detection_example(d, "png");
  ExampleView view(rec, "t");
  ASSERT_EQ(view.bytes_list("image/object/mask").size(), 2u);
  const DetectionExample back = parse_detection_example(rec, "t", 3);
  EXPECT_EQ(back.masks, d.masks);
  // Single-channel 8-bit PNGs (IHDR: bit depth 8, colour type 0) holding 0 and 1.
  const std::string& png = back.masks[0];
  ASSERT_GT(png.size(), 26u);
  EXPECT_EQ(static_cast<int>(png[24]), 8);
  EXPECT_EQ(static_cast<int>(png[25]), 0);
  const Image decoded = decode_image(png, "t");
  EXPECT_EQ(decoded.pixels[(5 * 60 + 40) * 3], 1);
  EXPECT_EQ(decoded.pixels[(30 * 60 + 40) * 3], 0);
  // Not asked for: not read.
  EXPECT_TRUE(parse_detection_example(rec, "t", 3, /*read_masks=*/false).masks.empty());
  // A record without masks has none, and writes no feature.
  DetectionExample plain = d;
  plain.masks.clear();
  const std::string plain_rec = make_detection_example(plain, "png");
  EXPECT_FALSE(ExampleView(plain_rec, "t").has("image/object/mask"));
  EXPECT_TRUE(parse_detection_example(plain_rec, "t", 3).masks.empty());
}

TEST(MaskRecords, BadMasksNameTheRecordAndField) {
  DetectionExample d = example_with_masks();
  DetectionExample one = d;
  one.masks.pop_back();
  std::string m = parse_error(make_detection_example(one, "png"));
  EXPECT_NE(m.find("f.tfrecord: record 7"), std::string::npos) << m;
  EXPECT_NE(m.find("image/object/mask"), std::string::npos) << m;
  EXPECT_NE(m.find("1 masks for 2 boxes"), std::string::npos) << m;

  DetectionExample small = d;
  small.masks[1] = mask_png(mask_of(20, 30, [](int, int) { return true; }), 20, 30);
  m = parse_error(make_detection_example(small, "png"));
  EXPECT_NE(m.find("f.tfrecord: record 7"), std::string::npos) << m;
  EXPECT_NE(m.find("image/object/mask"), std::string::npos) << m;
  EXPECT_NE(m.find("mask 1 is 20x30 but the image is 40x60"), std::string::npos) << m;

  DetectionExample garbage = d;
  garbage.masks[0] = "not a png";
  m = parse_error(make_detection_example(garbage, "png"));
  EXPECT_NE(m.find("f.tfrecord: record 7: image/object/mask 0"), std::string::npos) << m;

  // NUMERICAL_MASKS (a float list) are refused with what to write instead.
  tensorflow::Example ex;
  ex.ParseFromString(make_detection_example(d, "png"));
  set_floats(ex.mutable_features(), "image/object/mask", std::vector<float>(2 * 40 * 60, 0.f));
  m = parse_error(ex.SerializeAsString());
  EXPECT_NE(m.find("image/object/mask"), std::string::npos) << m;
  EXPECT_NE(m.find("NUMERICAL_MASKS"), std::string::npos) << m;
  EXPECT_NE(m.find("PNG_MASKS"), std::string::npos) << m;
}

TEST(MaskFields, MasksComeLastWithLoadInstanceMasks) {
  DetectionInputOptions o;
  o.height = 24;
  o.width = 32;
  o.max_boxes = 5;
  const auto plain = detection_fields(o, 3);
  const auto before = detection_fields(5, 3);
  ASSERT_EQ(plain.size(), before.size());
  o.load_instance_masks = true;
  const auto fields = detection_fields(o, 3);
  ASSERT_EQ(fields.size(), before.size() + 1);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(fields[i].name, before[i].name);
    EXPECT_EQ(fields[i].shape, before[i].shape);
  }
  EXPECT_EQ(fields.back().name, "masks");
  EXPECT_EQ(fields.back().dtype, at::kBool);
  EXPECT_EQ(fields.back().shape, (std::vector<int64_t>{5, 24, 32}));
}

// Hand-worked: a 4 x 6 mask of an L in the top-left corner, resized to 2 x 3 by TF1's nearest
// neighbour (source rows floor(y * 2) = 0, 2, columns 0, 2, 4). Flipped first (as the OD API's
// augmentation precedes its resizer), the columns read are 5, 3, 1 of the original.
TEST(MaskPreprocess, FlipThenNearestResizeByHand) {
  DetectionExample d;
  d.encoded = encode_png(coordinate_image(4, 6));
  d.height = 4;
  d.width = 6;
  d.boxes = {Box{0.f, 0.f, 0.5f, 1.f / 3}};
  d.classes = {1};
  d.masks = {mask_png(mask_of(4, 6, [](int y, int x) { return (y == 0 && x < 2) || (y == 1 && x == 0); }), 4, 6)};
  DetectionInputOptions o;
  o.height = 2;
  o.width = 3;
  o.max_boxes = 2;
  o.load_instance_masks = true;
  o.augmentation.random_horizontal_flip = true;
  for (const float p : {0.f, 1.f}) {
    o.augmentation.flip_probability = p;
    MaskTargets t(2, 2, 3);
    const auto view = t.view();
    std::vector<float> image(3 * 2 * 3);
    std::mt19937_64 rng(4);
    ASSERT_EQ(preprocess_detection(d, o, true, rng, image.data(), &view, "t"), 1);
    if (p == 0.f) {
      EXPECT_EQ(t.plane(0), (std::vector<std::string>{"100", "000"}));
    } else {
      EXPECT_EQ(t.plane(0), (std::vector<std::string>{"001", "000"}));
      EXPECT_NEAR(t.boxes[1], 2.f / 3, 1e-6);  // the box flipped with it
    }
    EXPECT_EQ(t.plane(1), (std::vector<std::string>{"000", "000"}));  // a padded box
  }
}

// Hand-worked upscale: 3 x 3 -> 5 x 5 reads source rows and columns floor(y * 0.6) = 0, 0, 1, 1, 2.
TEST(MaskPreprocess, NearestNeighbourUpscaleByHand) {
  DetectionExample d;
  d.encoded = encode_png(coordinate_image(3, 3));
  d.height = d.width = 3;
  d.boxes = {Box{0.f, 0.f, 1.f, 1.f}};
  d.classes = {1};
  d.masks = {mask_png(mask_of(3, 3, [](int y, int x) { return y == x && y > 0; }), 3, 3)};
  DetectionInputOptions o;
  o.height = o.width = 5;
  o.max_boxes = 1;
  o.load_instance_masks = true;
  MaskTargets t(1, 5, 5);
  const auto view = t.view();
  std::vector<float> image(3 * 5 * 5);
  std::mt19937_64 rng(1);
  preprocess_detection(d, o, false, rng, image.data(), &view, "t");
  EXPECT_EQ(t.plane(0), (std::vector<std::string>{"00000", "00000", "00110", "00110", "00001"}));
}

// keep_aspect_ratio_resizer: the mask lies top-left in the buffer like the image; the padding is
// false.
TEST(MaskPreprocess, TopLeftInTheBufferWithKeepAspectRatio) {
  DetectionExample d;
  d.encoded = encode_png(coordinate_image(4, 6));
  d.height = 4;
  d.width = 6;
  d.boxes = {Box{0.f, 0.f, 1.f, 1.f}};
  d.classes = {1};
  d.masks = {mask_png(mask_of(4, 6, [](int, int) { return true; }), 4, 6)};
  DetectionInputOptions o;
  o.keep_aspect_ratio = KeepAspectRatioResize{2, 3, false, {0.f, 0.f, 0.f}};
  o.height = o.width = 3;
  o.max_boxes = 1;
  o.load_instance_masks = true;
  MaskTargets t(1, 3, 3);
  const auto view = t.view();
  std::vector<float> image(3 * 3 * 3);
  std::mt19937_64 rng(1);
  preprocess_detection(d, o, false, rng, image.data(), &view, "t");
  EXPECT_EQ(t.image_size[0], 2);
  EXPECT_EQ(t.image_size[1], 3);
  EXPECT_EQ(t.plane(0), (std::vector<std::string>{"111", "111", "000"}));
}

// Through random flips, ssd_random_crop (every crop a 4 x 4 window of the 8 x 8 image, or with
// random_crop_to_aspect_ratio then a 4 x 2 one, or random_crop_image after it a 2 x 2 one) and an
// identity resize (the output is the crop's size), each mask follows the image pixel for pixel:
// the output mask at (y, x) is the record's mask at the pixel the output image took from there
// (coordinate_image). Masks stay with their boxes (classes name the record's boxes); the masks of
// dropped boxes and of boxes past max_boxes are not written.
TEST(MaskPreprocess, MasksFollowTheImageThroughFlipsAndCrops) {
  DetectionExample d;
  d.encoded = encode_png(coordinate_image(8, 8));
  d.height = d.width = 8;
  d.boxes = {Box{0.25f, 0.25f, 0.5f, 0.5f}, Box{0.625f, 0.f, 1.f, 0.375f}, Box{0.f, 0.625f, 0.25f, 1.f}};
  d.classes = {1, 2, 3};
  std::vector<std::vector<uint8_t>> masks;
  for (int k = 0; k < 3; ++k) {
    masks.push_back(mask_of(8, 8, [k](int y, int x) { return (y * 3 + x * 5 + k) % 7 < 3; }));
    d.masks.push_back(mask_png(masks.back(), 8, 8));
  }
  struct Case {
    int out_h, out_w;
    float to_aspect;
    bool crop_image;
    int64_t max_boxes;
  };
  int full = 0, shifted = 0;
  for (const Case& c :
       {Case{4, 4, 0.f, false, 2}, Case{4, 4, 0.f, false, 1}, Case{4, 2, 0.5f, false, 2}, Case{2, 2, 0.f, true, 2}}) {
    DetectionInputOptions o;
    o.height = c.out_h;
    o.width = c.out_w;
    o.max_boxes = c.max_boxes;
    o.load_instance_masks = true;
    o.augmentation.random_horizontal_flip = true;
    o.augmentation.ssd_random_crop = default_ssd_random_crop();
    for (auto& op : o.augmentation.ssd_random_crop) {
      op.min_area = op.max_area = 0.25f;
      op.min_aspect_ratio = op.max_aspect_ratio = 1.f;
      op.random_coef = 0.f;
    }
    o.augmentation.crop_to_aspect_ratio = c.to_aspect;
    if (c.crop_image) {
      SsdRandomCropOperation op;
      op.min_object_covered = 0.f;
      op.min_area = op.max_area = 0.25f;
      op.min_aspect_ratio = op.max_aspect_ratio = 1.f;
      op.overlap_thresh = 0.3f;
      op.random_coef = 0.f;
      o.augmentation.random_crop_image = {op};
    }
    int checked = 0, flipped = 0;
    for (uint64_t seed = 0; seed < 60; ++seed) {
      MaskTargets t(c.max_boxes, c.out_h, c.out_w);
      const auto view = t.view();
      std::vector<float> image(static_cast<size_t>(3 * c.out_h * c.out_w));
      std::mt19937_64 rng(seed);
      const int64_t n = preprocess_detection(d, o, true, rng, image.data(), &view, "t");
      const size_t plane = static_cast<size_t>(c.out_h) * c.out_w;
      auto source = [&](int ch, int y, int x) {  // the coordinate an output pixel came from
        const float v = image[ch * plane + static_cast<size_t>(y) * c.out_w + x];
        const float value = (v + 1.f) * 127.5f;
        const int level = static_cast<int>(std::lround(value));
        return std::abs(value - level) < 0.01f && (level - 5) % 20 == 0 ? (level - 5) / 20 : -1;
      };
      if (source(0, 0, 0) < 0 || source(1, 0, 0) < 0) continue;  // a fallback crop, resized bilinearly
      ++checked;
      flipped += c.out_w > 1 && source(1, 0, 1) < source(1, 0, 0);
      full += n == c.max_boxes;  // with max_boxes 1 often fewer than the boxes kept
      for (int64_t i = 0; i < n; ++i) shifted += t.classes[static_cast<size_t>(i)] != i + 1;  // a box before it dropped
      for (int64_t i = 0; i < c.max_boxes; ++i) {
        const auto k = static_cast<size_t>(i < n ? t.classes[static_cast<size_t>(i)] - 1 : 0);
        for (int y = 0; y < c.out_h; ++y)
          for (int x = 0; x < c.out_w; ++x) {
            const int sy = source(0, y, x), sx = source(1, y, x);
            ASSERT_GE(sy, 0);
            ASSERT_GE(sx, 0);
            const bool want = i < n && masks[k][static_cast<size_t>(sy) * 8 + sx] != 0;
            ASSERT_EQ(t.mask(i, y, x), want) << "seed " << seed << " mask " << i << " at " << y << ", " << x;
          }
      }
    }
    EXPECT_GT(checked, 40) << c.out_h << "x" << c.out_w;
    EXPECT_GT(flipped, 5) << c.out_h << "x" << c.out_w;
  }
  EXPECT_GT(full, 0);
  EXPECT_GT(shifted, 0);
}

TEST(MaskPreprocess, MissingOrBrokenMasksAreDataErrors) {
  DetectionInputOptions o;
  o.height = o.width = 8;
  o.max_boxes = 2;
  o.load_instance_masks = true;
  std::vector<float> image(3 * 8 * 8);
  std::mt19937_64 rng(1);
  DetectionExample d = example_with_masks();
  DetectionExample none = d;
  none.masks.clear();
  {
    MaskTargets t(2, 8, 8);
    const auto view = t.view();
    expect_data_error([&] { preprocess_detection(none, o, false, rng, image.data(), &view, "f: record 3"); },
                      {"f: record 3", "image/object/mask", "load_instance_masks is set but the record has no masks",
                       "--include_masks"});
    // Without masks to fill (predict's image-only path) nothing is asked of the record.
    EXPECT_EQ(preprocess_detection(none, o, false, rng, image.data(), nullptr, "f: record 3"), 2);
    // Nor without load_instance_masks.
    DetectionInputOptions plain = o;
    plain.load_instance_masks = false;
    EXPECT_EQ(preprocess_detection(none, plain, false, rng, image.data(), &view, "f: record 3"), 2);
  }
  DetectionExample broken = d;
  broken.masks[1] = broken.masks[1].substr(0, 40);  // a truncated PNG
  {
    MaskTargets t(2, 8, 8);
    const auto view = t.view();
    expect_data_error([&] { preprocess_detection(broken, o, false, rng, image.data(), &view, "f: record 4"); },
                      {"f: record 4: image/object/mask 1"});
  }
  DetectionExample wrong_size = d;  // built without parse_detection_example's header check
  wrong_size.masks[0] = mask_png(mask_of(4, 6, [](int, int) { return true; }), 4, 6);
  {
    MaskTargets t(2, 8, 8);
    const auto view = t.view();
    expect_data_error([&] { preprocess_detection(wrong_size, o, false, rng, image.data(), &view, "f: record 5"); },
                      {"f: record 5: image/object/mask 0", "the mask is 4x6 but the image is 40x60"});
  }
}

// The pixel box of a shapes object (its box normalised by the image sides, exact in pixels).
struct PixelBox {
  int y0, x0, y1, x1;
};
PixelBox pixel_box(const ShapeObject& o, const Scene& s) {
  auto p = [](float v, int side) { return static_cast<int>(std::lround(v * side)); };
  return {p(o.ymin, s.height), p(o.xmin, s.width), p(o.ymax, s.height), p(o.xmax, s.width)};
}

// Each object's mask is its visible pixels: inside its box, disjoint from the others', drawn in
// its colour; the whole shape touches all four sides of its (tight) box, so on each side the mask
// does too, unless an object drawn later covers that side there (then the mask may not reach it:
// COCO-style visible masks under the boxes of whole shapes).
TEST(ShapesMasks, VisiblePixelsInsideTightBoxesAndDisjoint) {
  ShapesOptions o;
  o.task = "detection";
  o.image_size = 64;
  o.image_width = 80;
  o.min_objects = 3;
  o.max_objects = 6;
  int objects = 0, unoccluded = 0, occluded_sides = 0;
  for (int64_t index = 0; index < 40; ++index) {
    const Scene s = shapes_scene(o, "train", index);
    ASSERT_EQ(s.object_index.size(), static_cast<size_t>(s.height) * s.width);
    std::vector<int> owners(s.object_index.size(), 0);
    for (size_t i = 0; i < s.objects.size(); ++i) {
      ++objects;
      const auto mask = shapes_object_mask(s, i);
      const PixelBox b = pixel_box(s.objects[i], s);
      auto at = [&](int y, int x) { return mask[static_cast<size_t>(y) * s.width + x] != 0; };
      auto later = [&](int y, int x) { return s.object_index[static_cast<size_t>(y) * s.width + x] > i + 1; };
      int area = 0;
      for (int y = 0; y < s.height; ++y)
        for (int x = 0; x < s.width; ++x) {
          if (!at(y, x)) continue;
          ++area;
          ++owners[static_cast<size_t>(y) * s.width + x];
          ASSERT_TRUE(y >= b.y0 && y < b.y1 && x >= b.x0 && x < b.x1) << index << " object " << i;
          const uint8_t* p = s.image.pixels.data() + (static_cast<size_t>(y) * s.width + x) * 3;
          const int colour = s.objects[i].colour;
          for (int ch = 0; ch < 3; ++ch)
            if (ch != colour) {
              ASSERT_GT(p[colour], p[ch] + 60) << index << " object " << i << " at " << y << ", " << x;
            }
        }
      EXPECT_GT(area, 0);
      // Each side: a visible pixel on it, or one a later object covers.
      bool covered = false;
      for (int side = 0; side < 4; ++side) {
        bool touches = false, hidden = false;
        const bool horizontal = side < 2;
        const int line = side == 0 ? b.y0 : side == 1 ? b.y1 - 1 : side == 2 ? b.x0 : b.x1 - 1;
        const int from = horizontal ? b.x0 : b.y0, to = horizontal ? b.x1 : b.y1;
        for (int t = from; t < to; ++t) {
          const int y = horizontal ? line : t, x = horizontal ? t : line;
          touches = touches || at(y, x);
          hidden = hidden || later(y, x);
        }
        EXPECT_TRUE(touches || hidden) << index << " object " << i << " side " << side;
        if (!touches) ++occluded_sides;
        covered = covered || hidden;
      }
      unoccluded += !covered;
    }
    for (int n : owners) ASSERT_LE(n, 1);  // disjoint
  }
  EXPECT_GT(objects, 100);
  EXPECT_GT(unoccluded, 50);     // these touch all four sides
  EXPECT_GT(occluded_sides, 0);  // the scenes do hide parts of objects
}

TEST(ShapesMasks, DetectionRecordsCarryTheMasks) {
  test::TempDir dir;
  ShapesOptions o;
  o.out_dir = dir.str();
  o.task = "detection";
  o.num_train = 2;
  o.num_validation = 3;
  o.image_size = 48;
  o.format = "png";
  o.include_masks = true;
  write_shapes_dataset(o);
  const auto records = test::read_records((dir.path() / "validation-00000-of-00001").string());
  ASSERT_EQ(records.size(), 3u);
  for (size_t r = 0; r < records.size(); ++r) {
    const Scene scene = shapes_scene(o, "validation", static_cast<int64_t>(r));
    const DetectionExample d = parse_detection_example(records[r], "v", 3);
    ASSERT_EQ(d.masks.size(), d.boxes.size());
    ASSERT_EQ(d.masks.size(), scene.objects.size());
    // The pixels are the scene's, as without masks.
    EXPECT_EQ(decode_image(d.encoded, "v").pixels, scene.image.pixels);
    for (size_t i = 0; i < d.masks.size(); ++i) {
      EXPECT_EQ(static_cast<int>(d.masks[i][25]), 0);  // colour type 0: grey
      const Image m = decode_image(d.masks[i], "v");
      const auto want = shapes_object_mask(scene, i);
      ASSERT_EQ(m.pixels.size(), want.size() * 3);
      for (size_t p = 0; p < want.size(); ++p) ASSERT_EQ(m.pixels[p * 3], want[p]) << r << " " << i << " " << p;
    }
  }
  // Without the flag the records hold no masks; masks are for detection records only.
  o.include_masks = false;
  o.out_dir = dir.file("plain");
  write_shapes_dataset(o);
  const auto plain = test::read_records(dir.file("plain/validation-00000-of-00001"));
  EXPECT_FALSE(ExampleView(plain[0], "v").has("image/object/mask"));
  o.include_masks = true;
  o.task = "multilabel";
  try {
    write_shapes_dataset(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--include_masks"), std::string::npos) << e.what();
  }
}

// A tiny instances json by hand (images 6 high, 8 wide): two polygons of one object merged, a
// compressed RLE and an uncompressed crowd RLE, a box written as a 4-number polygon. The pixels
// are worked out from pycocotools' rules: a polygon pixel is set when its centre lies inside
// (rleFrPoly: the rectangle (1, 1)-(5, 4) sets rows 1-3, columns 1-4), run lengths count down the
// columns.
class CocoMasks : public ::testing::Test {
 protected:
  void SetUp() override {
    images_ = dir_.path() / "images";
    std::filesystem::create_directories(images_);
    Image img;
    img.height = 6;
    img.width = 8;
    img.pixels.assign(6 * 8 * 3, 100);
    atomic_write_file((images_ / "a.png").string(), encode_png(img));
    options_.annotations = dir_.file("instances.json");
    options_.image_dir = images_.string();
    options_.out_dir = dir_.file("out");
    options_.num_shards = 1;
    options_.include_masks = true;
  }
  void write_json(const std::string& annotations) {
    atomic_write_file(options_.annotations, R"({"images": [{"id": 1, "file_name": "a.png", "height": 6, "width": 8}],
      "categories": [{"id": 1, "name": "thing"}, {"id": 2, "name": "crowd"}], "annotations": [)" +
                                                annotations + "]}");
  }
  test::TempDir dir_;
  std::filesystem::path images_;
  CocoConvertOptions options_;
};

TEST_F(CocoMasks, PolygonsCompressedAndUncompressedRles) {
  write_json(R"(
    {"id": 11, "image_id": 1, "category_id": 1, "bbox": [1, 1, 7, 5], "iscrowd": 0,
     "segmentation": [[1, 1, 5, 1, 5, 4, 1, 4], [6, 4, 8, 4, 8, 6, 6, 6]]},
    {"id": 12, "image_id": 1, "category_id": 1, "bbox": [6, 2, 1, 3], "iscrowd": 0,
     "segmentation": {"size": [6, 8], "counts": "V137"}},
    {"id": 13, "image_id": 1, "category_id": 2, "bbox": [2, 0, 2, 6], "iscrowd": 1,
     "segmentation": {"size": [6, 8], "counts": [12, 12, 24]}},
    {"id": 14, "image_id": 1, "category_id": 1, "bbox": [0, 0, 0, 3], "iscrowd": 0,
     "segmentation": [[0, 0, 2, 2]]},
    {"id": 15, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "iscrowd": 0,
     "segmentation": [[0, 0, 2, 2]]})");
  const auto r = convert_coco_detection(options_);
  EXPECT_EQ(r.boxes, 4);
  EXPECT_EQ(r.skipped_boxes, 1);  // id 14: zero width, and its mask with it
  const auto records = test::read_records(dir_.file("out/train-00000-of-00001"));
  ASSERT_EQ(records.size(), 1u);
  const DetectionExample d = parse_detection_example(records[0], "t", 2);
  ASSERT_EQ(d.masks.size(), 4u);
  auto rows = [](const std::string& png) {
    const Image m = decode_image(png, "t");
    std::vector<std::string> out;
    for (int y = 0; y < m.height; ++y) {
      out.emplace_back();
      for (int x = 0; x < m.width; ++x) {
        const uint8_t v = m.pixels[(static_cast<size_t>(y) * m.width + x) * 3];
        EXPECT_LE(v, 1);  // 0/1 values, as create_coco_tf_record.py writes them
        out.back() += v ? '1' : '0';
      }
    }
    return out;
  };
  // Polygon rows 1-3 x columns 1-4, merged with the second polygon's rows 4-5 x columns 6-7.
  EXPECT_EQ(rows(d.masks[0]),
            (std::vector<std::string>{"00000000", "01111000", "01111000", "01111000", "00000011", "00000011"}));
  // "V137": runs 38, 3, 7 down the columns: column 6, rows 2-4.
  EXPECT_EQ(rows(d.masks[1]),
            (std::vector<std::string>{"00000000", "00000000", "00000010", "00000010", "00000010", "00000000"}));
  // Runs 12, 12, 24: columns 2 and 3 whole.
  EXPECT_EQ(rows(d.masks[2]),
            (std::vector<std::string>{"00110000", "00110000", "00110000", "00110000", "00110000", "00110000"}));
  EXPECT_EQ(d.crowd, (std::vector<bool>{false, false, true, false}));
  // A first polygon of 4 numbers is a box [x, y, w, h] (frPyObjects' frBbox): rows 0-1, columns 0-1.
  EXPECT_EQ(rows(d.masks[3]),
            (std::vector<std::string>{"11000000", "11000000", "00000000", "00000000", "00000000", "00000000"}));
  // Without --include_masks the same json gives no masks.
  options_.include_masks = false;
  convert_coco_detection(options_);
  EXPECT_TRUE(
      parse_detection_example(test::read_records(dir_.file("out/train-00000-of-00001"))[0], "t", 2).masks.empty());
}

TEST_F(CocoMasks, BadSegmentationsNameTheAnnotation) {
  const std::string head = R"({"id": 21, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "iscrowd": 1, )";
  write_json(head + R"("segmentation": {"size": [6, 7], "counts": [42]}})");
  expect_data_error([&] { convert_coco_detection(options_); },
                    {"instances.json: annotation 21", "the RLE is 6x7 but the image is 6x8"});
  write_json(head + R"("segmentation": {"size": [6, 8], "counts": [40, 3]}})");  // 43 of 48 pixels
  expect_data_error([&] { convert_coco_detection(options_); }, {"instances.json: annotation 21"});
  write_json(head + R"("segmentation": {"size": [6, 8], "counts": [-1, 49]}})");
  expect_data_error([&] { convert_coco_detection(options_); }, {"instances.json: annotation 21", "non-negative"});
  write_json(R"({"id": 22, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "iscrowd": 0})");
  expect_data_error([&] { convert_coco_detection(options_); }, {"annotation 22 has no 'segmentation'"});
  write_json(R"({"id": 23, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "iscrowd": 0,
                 "segmentation": [[0, 0, 2, 0, 2, 2, "x", 1]]})");
  expect_data_error([&] { convert_coco_detection(options_); }, {"annotation 23", "polygon"});
  write_json(R"({"id": 24, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "iscrowd": 0,
                 "segmentation": [[0, 0, 2, 0, 2, 2, 1]]})");  // odd: rle_from_polygon refuses it
  expect_data_error([&] { convert_coco_detection(options_); }, {"annotation 24"});
}

}  // namespace
}  // namespace orchard::data
