#include "orchard/data/detection.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/data/shapes.h"
#include "orchard/detect/dataset_tools/coco.h"

namespace orchard::data {
namespace {

// A 40 x 60 image: left half black, right half white.
DetectionExample two_tone() {
  Image img;
  img.height = 40;
  img.width = 60;
  img.pixels.assign(40 * 60 * 3, 0);
  for (int y = 0; y < 40; ++y)
    for (int x = 30; x < 60; ++x)
      for (int c = 0; c < 3; ++c) img.pixels[(y * 60 + x) * 3 + c] = 255;
  DetectionExample d;
  d.encoded = encode_png(img);
  d.height = 40;
  d.width = 60;
  d.source_id = "img-1";
  d.boxes = {Box{0.1f, 0.5f, 0.6f, 1.0f}, Box{0.0f, 0.0f, 0.25f, 0.25f}};
  d.classes = {2, 1};
  d.texts = {"square", "circle"};
  return d;
}

std::string with_feature(const std::string& record, const std::string& key, const std::vector<float>& values) {
  tensorflow::Example ex;
  ex.ParseFromString(record);
  set_floats(ex.mutable_features(), key, values);
  return ex.SerializeAsString();
}

TEST(DetectionExample, RoundTripsTheOdApiSchema) {
  const std::string rec = make_detection_example(two_tone(), "png");
  ExampleView view(rec, "t");
  EXPECT_EQ(view.bytes("image/format"), "png");
  EXPECT_EQ(view.floats("image/object/bbox/xmin"), (std::vector<float>{0.5f, 0.0f}));
  const DetectionExample d = parse_detection_example(rec, "t: record 0", 3);
  EXPECT_EQ(d.height, 40);
  EXPECT_EQ(d.width, 60);
  EXPECT_EQ(d.source_id, "img-1");
  ASSERT_EQ(d.boxes.size(), 2u);
  EXPECT_FLOAT_EQ(d.boxes[0].ymax, 0.6f);
  EXPECT_EQ(d.classes, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(d.texts[1], "circle");
}

TEST(DetectionExample, BadRecordsNameTheField) {
  const std::string rec = make_detection_example(two_tone(), "png");
  auto message = [](const std::string& r, int64_t num_classes) {
    try {
      parse_detection_example(r, "f.tfrecord: record 7", num_classes);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message(rec, 1);  // label 2 > num_classes 1
  EXPECT_NE(m.find("f.tfrecord: record 7"), std::string::npos) << m;
  EXPECT_NE(m.find("image/object/class/label"), std::string::npos) << m;
  EXPECT_NE(m.find("0 is reserved for the background"), std::string::npos) << m;
  m = message(with_feature(rec, "image/object/bbox/ymin", {0.1f}), 3);
  EXPECT_NE(m.find("image/object/bbox/*"), std::string::npos) << m;
  m = message(with_feature(rec, "image/object/bbox/xmax", {120.0f, 15.0f}), 3);  // pixels, not normalised
  EXPECT_NE(m.find("not a normalised"), std::string::npos) << m;
  m = message(with_feature(rec, "image/object/bbox/ymax", {0.05f, 0.25f}), 3);  // ymax < ymin
  EXPECT_NE(m.find("box 0"), std::string::npos) << m;
}

// The typed fields of one sample, zeroed as the pipeline hands them to a parser.
struct Targets {
  explicit Targets(int64_t max_boxes, int64_t num_classes = 3)
      : boxes(static_cast<size_t>(4 * max_boxes)),
        classes(static_cast<size_t>(max_boxes)),
        crowd(new bool[static_cast<size_t>(max_boxes)]()),
        difficult(new bool[static_cast<size_t>(max_boxes)]()),
        group_of(new bool[static_cast<size_t>(max_boxes)]()),
        image_labels(new bool[static_cast<size_t>(num_classes + 1)]()),
        max(max_boxes),
        num_classes(num_classes) {}
  DetectionTargets view() {
    return {boxes.data(),    classes.data(), crowd.get(),        &num_boxes, &image_id,  original_size,
            difficult.get(), group_of.get(), image_labels.get(), image_size, num_classes};
  }
  std::vector<float> boxes;
  std::vector<int64_t> classes;
  std::unique_ptr<bool[]> crowd, difficult, group_of, image_labels;
  int64_t max, num_classes, num_boxes = 0, image_id = 0, original_size[2] = {0, 0}, image_size[2] = {0, 0};
};

// image/object/difficult, image/object/group_of, image/class/label survive the record and follow
// their boxes through the training crops (here class k marks the flag each box carries).
TEST(DetectionPreprocess, BoxFlagsFollowTheirBoxesThroughCrops) {
  DetectionExample d = two_tone();
  d.boxes = {Box{0.1f, 0.1f, 0.3f, 0.3f}, Box{0.5f, 0.5f, 0.9f, 0.9f}, Box{0.2f, 0.6f, 0.5f, 0.95f},
             Box{0.6f, 0.05f, 0.95f, 0.4f}};
  d.classes = {1, 2, 3, 1};
  d.texts.clear();
  d.crowd = {false, false, true, false};
  d.difficult = {true, false, false, true};
  d.group_of = {false, true, false, false};
  d.image_labels = {2, 7};  // 7 is outside the model's classes: not flagged
  const DetectionExample back = parse_detection_example(make_detection_example(d, "png"), "t", 3);
  EXPECT_EQ(back.difficult, d.difficult);
  EXPECT_EQ(back.group_of, d.group_of);
  EXPECT_EQ(back.image_labels, d.image_labels);
  DetectionInputOptions o;
  o.height = o.width = 16;
  o.max_boxes = 4;
  o.augmentation.random_horizontal_flip = true;
  o.augmentation.ssd_random_crop = default_ssd_random_crop();
  std::vector<float> image(3 * 16 * 16);
  int dropped = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Targets t(4);
    const auto view = t.view();
    std::mt19937_64 rng(seed);
    const int64_t n = preprocess_detection(back, o, true, rng, image.data(), &view, "t");
    dropped += static_cast<int>(4 - n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(t.difficult[i], t.classes[i] == 1) << seed << " " << i;
      EXPECT_EQ(t.group_of[i], t.classes[i] == 2) << seed << " " << i;
      EXPECT_EQ(t.crowd[i], t.classes[i] == 3) << seed << " " << i;
    }
    EXPECT_EQ(std::vector<bool>(t.image_labels.get(), t.image_labels.get() + 4),
              (std::vector<bool>{false, false, true, false}));
  }
  EXPECT_GT(dropped, 0);  // the crops did drop boxes
  // A flag list of the wrong length is an error naming the field.
  DetectionExample wrong = d;
  wrong.group_of = {true};
  try {
    parse_detection_example(make_detection_example(wrong, "png"), "f.tfrecord: record 2", 3);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("image/object/group_of"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("record 2"), std::string::npos) << e.what();
  }
}

TEST(DetectionPreprocess, EvalResizesAndScalesToPlusMinusOne) {
  const DetectionExample d = two_tone();
  DetectionInputOptions o;
  o.height = 20;
  o.width = 30;
  o.max_boxes = 3;
  std::vector<float> image(3 * 20 * 30);
  Targets t(3);
  const auto view = t.view();
  std::mt19937_64 rng(1);
  EXPECT_EQ(preprocess_detection(d, o, false, rng, image.data(), &view, "t"), 2);
  EXPECT_EQ(t.num_boxes, 2);
  EXPECT_FLOAT_EQ(image[0], -1.0f);             // black, channel 0, top-left
  EXPECT_FLOAT_EQ(image[29], 1.0f);             // white, top-right
  EXPECT_FLOAT_EQ(image[2 * 600 + 599], 1.0f);  // channel 2, bottom-right
  EXPECT_EQ(t.original_size[0], 40);
  EXPECT_EQ(t.original_size[1], 60);
  const uint64_t key = detection_image_key(d);
  EXPECT_EQ(static_cast<uint64_t>(t.image_id), key);
  EXPECT_LT(key, 1ull << 48);
  EXPECT_NE(key, detection_image_key(DetectionExample{}));
  const std::vector<float> first(t.boxes.begin(), t.boxes.begin() + 4);
  EXPECT_EQ(first, (std::vector<float>{0.1f, 0.5f, 0.6f, 1.0f}));
  EXPECT_EQ(t.classes[0], 2);
  for (size_t i = 8; i < t.boxes.size(); ++i) EXPECT_EQ(t.boxes[i], 0.f);  // padding
  EXPECT_EQ(t.classes[2], 0);
}

TEST(DetectionPreprocess, FlipMirrorsImageAndBoxes) {
  const DetectionExample d = two_tone();
  DetectionInputOptions o;
  o.height = 40;
  o.width = 60;
  o.channels_last = true;
  o.max_boxes = 2;
  o.augmentation.random_horizontal_flip = true;
  o.augmentation.flip_probability = 1.0f;
  std::vector<float> image(3 * 40 * 60);
  Targets t(2);
  const auto view = t.view();
  std::mt19937_64 rng(1);
  preprocess_detection(d, o, true, rng, image.data(), &view, "t");
  EXPECT_FLOAT_EQ(image[0], 1.0f);         // the white half is now on the left
  EXPECT_FLOAT_EQ(t.boxes[1], 0.0f);       // xmin = 1 - 1.0
  EXPECT_FLOAT_EQ(t.boxes[3], 0.5f);       // xmax = 1 - 0.5
  EXPECT_FLOAT_EQ(t.boxes[4 + 1], 0.75f);  // second box: 1 - 0.25
}

// random_crop_image (the FPN configs' augmentation): a crop of exactly a quarter of the area
// (half of each side, aspect 1 in normalised units) that must contain the first box entirely
// (min_object_covered 1): the box's width in the crop's frame doubles, and a box the crop cuts
// to under overlap_thresh of its area is dropped.
TEST(DetectionPreprocess, RandomCropImageCropsAndPrunes) {
  DetectionExample d = two_tone();
  d.boxes = {Box{0.4f, 0.4f, 0.6f, 0.6f}, Box{0.0f, 0.0f, 0.02f, 0.02f}};
  DetectionInputOptions o;
  o.height = 40;
  o.width = 60;
  o.max_boxes = 2;
  SsdRandomCropOperation op;
  op.min_object_covered = 1.0f;
  op.min_aspect_ratio = op.max_aspect_ratio = 1.5f;  // width / height in pixels: 30 x 20 of 60 x 40
  op.min_area = op.max_area = 0.25f;
  op.overlap_thresh = 0.3f;
  op.random_coef = 0.0f;
  o.augmentation.random_crop_image = {op};
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    std::vector<float> image(3 * 40 * 60);
    Targets t(2);
    const auto view = t.view();
    std::mt19937_64 rng(seed);
    preprocess_detection(d, o, true, rng, image.data(), &view, "t");
    // The crop holds the centre box; the 1x1-pixel corner box cannot be in a window around it.
    ASSERT_EQ(t.num_boxes, 1) << seed;
    EXPECT_NEAR(t.boxes[3] - t.boxes[1], 0.4f, 1e-5) << seed;  // 0.2 of the image, 0.4 of the crop
    EXPECT_NEAR(t.boxes[2] - t.boxes[0], 0.4f, 1e-5) << seed;
  }
}

// keep_aspect_ratio_resizer's resize_to_range: the shorter side to min_dimension unless the
// longer would pass max_dimension; float32 products rounded half to even as tf.round.
TEST(KeepAspectRatioResize, SizesAsResizeToRange) {
  DetectionInputOptions o;
  o.keep_aspect_ratio = KeepAspectRatioResize{320, 640, false, {0.f, 0.f, 0.f}};
  o.height = o.width = 640;
  using Size = std::pair<int, int>;
  EXPECT_EQ(resized_image_size(480, 640, o), Size(320, 427));  // 640 * 2/3 = 426.67
  EXPECT_EQ(resized_image_size(640, 480, o), Size(427, 320));
  EXPECT_EQ(resized_image_size(64, 64, o), Size(320, 320));
  EXPECT_EQ(resized_image_size(100, 1000, o), Size(64, 640));  // 3200 > 640: the longer side to 640
  EXPECT_EQ(resized_image_size(300, 700, o), Size(274, 640));  // 746.67 > 640; 300 * 640/700 = 274.29
  o.keep_aspect_ratio->min_dimension = 2;
  o.keep_aspect_ratio->max_dimension = 100;
  EXPECT_EQ(resized_image_size(4, 5, o), Size(2, 2));  // 2.5 rounds to 2 (half to even), not 3
  EXPECT_EQ(resized_image_size(4, 7, o), Size(2, 4));  // 3.5 rounds to 4
  o.keep_aspect_ratio.reset();
  EXPECT_EQ(resized_image_size(480, 640, o), Size(640, 640));  // fixed_shape_resizer: the buffer's
}

// The resized image lies top-left in the max_dimension square; the rest holds the pad value
// (per_channel_pad_value, scaled as the pixels); image_size says the image's size and the boxes
// stay normalised to it.
TEST(KeepAspectRatioResize, ImageTopLeftThenPadValue) {
  const DetectionExample d = two_tone();  // 40 x 60, left half black
  for (const bool channels_last : {false, true}) {
    DetectionInputOptions o;
    o.keep_aspect_ratio = KeepAspectRatioResize{20, 40, false, {255.f, 0.f, 127.5f}};
    o.height = o.width = 40;
    o.channels_last = channels_last;
    o.max_boxes = 2;
    std::vector<float> image(3 * 40 * 40, 7.f);
    Targets t(2);
    const auto view = t.view();
    std::mt19937_64 rng(1);
    preprocess_detection(d, o, false, rng, image.data(), &view, "t");
    EXPECT_EQ(t.image_size[0], 20);
    EXPECT_EQ(t.image_size[1], 30);
    auto at = [&](int c, int y, int x) {
      return image[channels_last ? static_cast<size_t>((y * 40 + x) * 3 + c)
                                 : static_cast<size_t>((c * 40 + y) * 40 + x)];
    };
    for (int c = 0; c < 3; ++c) {
      EXPECT_FLOAT_EQ(at(c, 0, 0), -1.f) << c;   // black
      EXPECT_FLOAT_EQ(at(c, 19, 29), 1.f) << c;  // white, the image's bottom-right pixel
      const float pad = std::array<float, 3>{1.f, -1.f, 0.f}[static_cast<size_t>(c)];
      EXPECT_FLOAT_EQ(at(c, 0, 30), pad) << c;  // right of the image
      EXPECT_FLOAT_EQ(at(c, 20, 0), pad) << c;  // below it
      EXPECT_FLOAT_EQ(at(c, 39, 39), pad) << c;
    }
    EXPECT_EQ(std::vector<float>(t.boxes.begin(), t.boxes.begin() + 4), (std::vector<float>{0.1f, 0.5f, 0.6f, 1.0f}));
  }
}

// random_crop_to_aspect_ratio: the largest crop of the ratio (here the full height of a 40 x 60
// image, 40 wide, at a random x); boxes under 0.3 visible are dropped, the rest clipped in the
// crop's frame.
TEST(RandomCropToAspectRatio, LargestCropOfTheRatioPrunesAndClips) {
  std::set<int> offsets;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::vector<Box> boxes = {Box{0.f, 0.f, 1.f, 0.25f},       // x 0..15: gone when x0 >= 12 (under 30% left)
                              Box{0.25f, 0.4f, 0.75f, 0.6f}};  // x 24..36: always inside
    std::vector<int64_t> index = {0, 1};
    std::mt19937_64 rng(seed);
    const CropWindow c = random_crop_to_aspect_ratio(40, 60, 1.0f, &boxes, &index, rng);
    EXPECT_EQ(c.height, 40);
    EXPECT_EQ(c.width, 40);
    EXPECT_EQ(c.y, 0);
    ASSERT_GE(c.x, 0);
    ASSERT_LE(c.x, 20);
    offsets.insert(c.x);
    const bool first_kept = (15.f - static_cast<float>(c.x)) / 15.f >= 0.3f;
    ASSERT_EQ(index.size(), first_kept ? 2u : 1u) << c.x;
    const Box& centre = boxes.back();
    EXPECT_EQ(index.back(), 1);
    EXPECT_NEAR(centre.xmin, (24.f - c.x) / 40.f, 1e-6f);
    EXPECT_NEAR(centre.xmax, (36.f - c.x) / 40.f, 1e-6f);
    EXPECT_NEAR(centre.ymin, 0.25f, 1e-6f);
    if (first_kept) {
      EXPECT_EQ(boxes[0].xmin, 0.f);  // clipped
      EXPECT_NEAR(boxes[0].xmax, (15.f - c.x) / 40.f, 1e-6f);
    }
  }
  EXPECT_GT(offsets.size(), 5u);  // a random offset
  // A tall image loses rows instead; an image of the ratio is kept whole.
  std::vector<Box> none;
  std::vector<int64_t> no_index;
  std::mt19937_64 rng(3);
  const CropWindow tall = random_crop_to_aspect_ratio(90, 30, 1.0f, &none, &no_index, rng);
  EXPECT_EQ(tall.height, 30);
  EXPECT_EQ(tall.width, 30);
  const CropWindow same = random_crop_to_aspect_ratio(30, 45, 1.5f, &none, &no_index, rng);
  EXPECT_EQ(same.height, 30);
  EXPECT_EQ(same.width, 45);
}

// ssd_random_crop_fixed_aspect_ratio is ssd_random_crop with the ratio fixed, then
// random_crop_to_aspect_ratio: with keep_aspect_ratio_resizer every training image comes out
// square (the fullyconv config trains at 320x320), even when random_coef keeps the whole image.
TEST(KeepAspectRatioResize, FixedAspectRatioCropsComeOutSquare) {
  DetectionExample d = two_tone();  // 40 x 60
  DetectionInputOptions o;
  o.keep_aspect_ratio = KeepAspectRatioResize{16, 32, false, {0.f, 0.f, 0.f}};
  o.height = o.width = 32;
  o.max_boxes = 2;
  o.augmentation.ssd_random_crop = default_ssd_random_crop();
  for (auto& op : o.augmentation.ssd_random_crop) op.min_aspect_ratio = op.max_aspect_ratio = 1.0f;
  o.augmentation.crop_to_aspect_ratio = 1.0f;
  std::vector<float> image(3 * 32 * 32);
  for (uint64_t seed = 0; seed < 30; ++seed) {
    Targets t(2);
    const auto view = t.view();
    std::mt19937_64 rng(seed);
    preprocess_detection(d, o, true, rng, image.data(), &view, "t");
    EXPECT_EQ(t.image_size[0], 16) << seed;
    EXPECT_EQ(t.image_size[1], 16) << seed;
  }
}

TEST(SsdRandomCrop, KeptBoxesAreVisibleEnoughAndInTheCropFrame) {
  std::mt19937_64 rng(5);
  int cropped = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<Box> boxes = {Box{0.1f, 0.1f, 0.4f, 0.3f}, Box{0.5f, 0.5f, 0.9f, 0.95f}};
    std::vector<int64_t> classes = {1, 2};
    SsdRandomCropOperation op;
    op.min_object_covered = 0.5f;
    op.overlap_thresh = 0.5f;
    op.random_coef = 0.0f;
    const CropWindow c = ssd_random_crop(100, 200, {op}, &boxes, &classes, rng);
    if (c.height != 100 || c.width != 200) ++cropped;
    // The crop covers at least half of one of the boxes (it was sampled that way), so at
    // least one box survives the 0.5 visibility threshold.
    ASSERT_GE(boxes.size(), 1u);
    ASSERT_EQ(boxes.size(), classes.size());
    const float area = static_cast<float>(c.height) * c.width / (100.f * 200.f);
    EXPECT_GE(area, 0.1f - 1e-3f);
    for (const Box& b : boxes) {
      EXPECT_GE(b.ymin, 0.f);
      EXPECT_LE(b.ymax, 1.f);
      EXPECT_GE(b.xmin, 0.f);
      EXPECT_LE(b.xmax, 1.f);
      EXPECT_LT(b.ymin, b.ymax);
    }
  }
  EXPECT_GT(cropped, 250);
}

TEST(SsdRandomCrop, BoxFrameChangeIsExact) {
  // With overlap 0 and min area 1 the crop is the whole image; with a forced window we check
  // the coordinate change through a fully-contained box.
  std::mt19937_64 rng(3);
  SsdRandomCropOperation op;
  op.random_coef = 0.0f;
  op.min_area = 0.25f;
  op.max_area = 0.25f;
  op.min_aspect_ratio = op.max_aspect_ratio = 1.0f;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<Box> boxes = {Box{0.0f, 0.0f, 1.0f, 1.0f}};
    std::vector<int64_t> classes = {3};
    const CropWindow c = ssd_random_crop(100, 100, {op}, &boxes, &classes, rng);
    ASSERT_EQ(c.height, 50);
    ASSERT_EQ(c.width, 50);
    ASSERT_EQ(boxes.size(), 1u);  // overlap 0: kept, clipped to the crop
    EXPECT_FLOAT_EQ(boxes[0].ymin, 0.f);
    EXPECT_FLOAT_EQ(boxes[0].xmax, 1.f);
  }
  // random_coef 1: never crops.
  op.random_coef = 1.0f;
  std::vector<Box> boxes = {Box{0.2f, 0.2f, 0.3f, 0.3f}};
  std::vector<int64_t> classes = {1};
  const CropWindow c = ssd_random_crop(100, 100, {op}, &boxes, &classes, rng);
  EXPECT_EQ(c.height, 100);
  EXPECT_FLOAT_EQ(boxes[0].ymin, 0.2f);
}

TEST(ShapesDetection, WritesOdApiRecordsAndALabelMap) {
  test::TempDir dir;
  ShapesOptions o;
  o.out_dir = dir.path().string();
  o.task = "detection";
  o.num_train = 6;
  o.num_validation = 2;
  o.train_shards = 2;
  o.image_size = 48;
  write_shapes_dataset(o);
  const std::string label_map = read_file((dir.path() / "label_map.pbtxt").string());
  EXPECT_NE(label_map.find("id: 3\n  name: \"triangle\""), std::string::npos) << label_map;
  const auto records = test::read_records((dir.path() / "validation-00000-of-00001").string());
  ASSERT_EQ(records.size(), 2u);
  const Scene scene = shapes_scene(o, "validation", 1);
  const DetectionExample d = parse_detection_example(records[1], "v", 3);
  ASSERT_EQ(d.boxes.size(), scene.objects.size());
  for (size_t i = 0; i < d.boxes.size(); ++i) {
    EXPECT_EQ(d.classes[i], scene.objects[i].kind + 1);
    EXPECT_FLOAT_EQ(d.boxes[i].xmin, scene.objects[i].xmin);
  }
  EXPECT_EQ(d.source_id, "shapes-validation-000001");
}

TEST(CocoConvert, WritesNormalisedBoxesCrowdFlagsAndALabelMap) {
  test::TempDir dir;
  const auto images = dir.path() / "images";
  std::filesystem::create_directories(images);
  Image img;
  img.height = 100;
  img.width = 200;
  img.pixels.assign(100 * 200 * 3, 128);
  atomic_write_file((images / "a.png").string(), encode_png(img));
  atomic_write_file((images / "b.jpg").string(), encode_jpeg(img, 90));
  const std::string json = R"({
    "images": [{"id": 7, "file_name": "a.png", "height": 100, "width": 200},
               {"id": 9, "file_name": "b.jpg", "height": 100, "width": 200}],
    "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}],
    "annotations": [
      {"id": 1, "image_id": 7, "category_id": 18, "bbox": [20, 10, 40, 30], "iscrowd": 0, "area": 1000},
      {"id": 2, "image_id": 7, "category_id": 1, "bbox": [0, 0, 200, 100], "iscrowd": 1, "area": 5000},
      {"id": 3, "image_id": 7, "category_id": 1, "bbox": [5, 5, 0, 10], "iscrowd": 0, "area": 0}]})";
  const std::string ann = (dir.path() / "instances.json").string();
  atomic_write_file(ann, json);
  CocoConvertOptions o;
  o.annotations = ann;
  o.image_dir = images.string();
  o.out_dir = (dir.path() / "out").string();
  o.num_shards = 2;
  const auto r = convert_coco_detection(o);
  EXPECT_EQ(r.images, 2);
  EXPECT_EQ(r.boxes, 2);
  EXPECT_EQ(r.crowd, 1);
  EXPECT_EQ(r.skipped_boxes, 1);  // zero width
  EXPECT_EQ(r.max_category_id, 18);
  const auto first = test::read_records((dir.path() / "out" / "train-00000-of-00002").string());
  ASSERT_EQ(first.size(), 1u);
  const DetectionExample d = parse_detection_example(first[0], "t", 90);
  EXPECT_EQ(d.source_id, "7");
  ASSERT_EQ(d.boxes.size(), 2u);
  EXPECT_FLOAT_EQ(d.boxes[0].ymin, 0.1f);
  EXPECT_FLOAT_EQ(d.boxes[0].xmin, 0.1f);
  EXPECT_FLOAT_EQ(d.boxes[0].ymax, 0.4f);
  EXPECT_FLOAT_EQ(d.boxes[0].xmax, 0.3f);
  EXPECT_EQ(d.classes, (std::vector<int64_t>{18, 1}));
  EXPECT_EQ(d.crowd, (std::vector<bool>{false, true}));
  EXPECT_EQ(d.texts[0], "dog");
  // The crowd region is flagged in the targets.
  DetectionInputOptions in;
  in.height = in.width = 32;
  in.max_boxes = 4;
  std::vector<float> image(3 * 32 * 32);
  Targets t(4);
  const auto view = t.view();
  std::mt19937_64 rng(0);
  preprocess_detection(d, in, false, rng, image.data(), &view, "t");
  EXPECT_EQ(t.classes[0], 18);
  EXPECT_FALSE(t.crowd[0]);
  EXPECT_EQ(t.classes[1], 1);
  EXPECT_TRUE(t.crowd[1]);
  const std::string label_map = read_file((dir.path() / "out" / "label_map.pbtxt").string());
  EXPECT_NE(label_map.find("id: 18\n  name: \"dog\""), std::string::npos) << label_map;

  // An annotation with a category the json does not declare (into another out_dir: this one's
  // label map has other classes).
  o.out_dir = (dir.path() / "out2").string();
  atomic_write_file(ann, R"({"images": [{"id": 1, "file_name": "a.png"}], "categories": [{"id": 1, "name": "x"}],
                             "annotations": [{"id": 5, "image_id": 1, "category_id": 3, "bbox": [0, 0, 5, 5]}]})");
  try {
    convert_coco_detection(o);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("annotation 5 has category_id 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace orchard::data
