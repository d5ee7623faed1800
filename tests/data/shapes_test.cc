#include "orchard/data/shapes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/core/tfrecord.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"

namespace orchard::data {
namespace {

using test::read_records;

using test::TempDir;

const uint8_t* px(const Image& im, int y, int x) {
  return im.pixels.data() + (static_cast<size_t>(y) * im.width + x) * 3;
}

// Shapes are one strong channel over two weak ones; the background is grey plus noise.
// The margins leave room for the generator's colour jitter, noise and JPEG's chroma loss.
bool has_colour(const uint8_t* p, int colour, int margin = 60) {
  for (int c = 0; c < 3; ++c)
    if (c != colour && p[colour] < p[c] + margin) return false;
  return true;
}
bool is_grey(const uint8_t* p) { return *std::max_element(p, p + 3) - *std::min_element(p, p + 3) <= 30; }

// The object's box in pixels: rows [y0, y1), columns [x0, x1).
struct Px {
  int y0, x0, y1, x1;
};
Px pixel_box(const ShapeObject& o, int side) {
  auto p = [side](float v) { return static_cast<int>(std::lround(v * side)); };
  return {p(o.ymin), p(o.xmin), p(o.ymax), p(o.xmax)};
}

bool in_box(const Px& b, int y, int x) { return y >= b.y0 && y < b.y1 && x >= b.x0 && x < b.x1; }

// Whether (y, x) lies in the box of any object other than `self` (`later_only`: drawn after it).
bool in_other_box(const Scene& s, size_t self, int y, int x, bool later_only) {
  for (size_t k = later_only ? self + 1 : 0; k < s.objects.size(); ++k)
    if (k != self && in_box(pixel_box(s.objects[k], s.width), y, x)) return true;
  return false;
}

// Where a shape is certainly filled: the box centre, or a triangle's centroid.
void inner_point(const ShapeObject& o, int side, int* y, int* x) {
  const float cy = o.kind == 2 ? o.ymin + (o.ymax - o.ymin) * 2 / 3 : (o.ymin + o.ymax) / 2;
  *y = static_cast<int>(cy * side);
  *x = static_cast<int>((o.xmin + o.xmax) / 2 * side);
}

std::vector<float> decode_le_floats(const std::string& bytes) {
  std::vector<float> out;
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    uint32_t bits = 0;
    for (int k = 0; k < 4; ++k) bits |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + k])) << (8 * k);
    float v;
    std::memcpy(&v, &bits, 4);
    out.push_back(v);
  }
  return out;
}

TEST(ShapesScene, CountsSizesAndBoxes) {
  SceneOptions o;  // 64 px, 1..4 objects, sides 0.2..0.45
  std::set<size_t> counts;
  std::set<int> kinds, colours;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    const Scene s = make_scene(rng, o);
    ASSERT_EQ(s.height, 64);
    ASSERT_EQ(s.width, 64);
    ASSERT_EQ(s.image.height, 64);
    ASSERT_EQ(s.image.width, 64);
    ASSERT_EQ(s.image.pixels.size(), 64u * 64 * 3);
    ASSERT_GE(s.objects.size(), 1u);
    ASSERT_LE(s.objects.size(), 4u);
    counts.insert(s.objects.size());
    for (const auto& obj : s.objects) {
      kinds.insert(obj.kind);
      colours.insert(obj.colour);
      EXPECT_GE(obj.ymin, 0.0f);
      EXPECT_GE(obj.xmin, 0.0f);
      EXPECT_LE(obj.ymax, 1.0f);
      EXPECT_LE(obj.xmax, 1.0f);
      // Sides of 0.2 and 0.45 of 64 px round to 13 and 29 px; the drawn extent of a circle
      // or triangle may be a pixel less.
      const float h = obj.ymax - obj.ymin, w = obj.xmax - obj.xmin;
      EXPECT_NEAR(h, w, 1 / 64.0f + 1e-6f);
      EXPECT_GE(std::min(h, w), 12 / 64.0f - 1e-6f);
      EXPECT_LE(std::max(h, w), 29 / 64.0f + 1e-6f);
      // Whole pixels.
      EXPECT_NEAR(obj.xmin * 64, std::round(obj.xmin * 64), 1e-4f);
      EXPECT_NEAR(obj.ymax * 64, std::round(obj.ymax * 64), 1e-4f);
    }
  }
  EXPECT_EQ(counts, (std::set<size_t>{1, 2, 3, 4}));
  EXPECT_EQ(kinds, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(colours, (std::set<int>{0, 1, 2}));
}

// Reads the drawn pixels back: each shape has its colour where it must be filled, its
// box is tight (grey just outside it), and circles, squares and triangles differ where
// they should (box corners, triangle apex).
// --image_width: image_size high, image_width wide; boxes normalised by each side, objects
// sized by the shorter one, and each box's pixels hold its colour.
TEST(ShapesScene, WideImagesNormaliseBoxesBySide) {
  SceneOptions o;
  o.image_size = 64;
  o.image_width = 96;
  bool right_third = false;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 rng(seed);
    const Scene s = make_scene(rng, o);
    ASSERT_EQ(s.height, 64);
    ASSERT_EQ(s.width, 96);
    ASSERT_EQ(s.image.pixels.size(), 64u * 96 * 3);
    for (const auto& obj : s.objects) {
      const float h = (obj.ymax - obj.ymin) * 64, w = (obj.xmax - obj.xmin) * 96;  // pixels
      EXPECT_NEAR(h, w, 1.0f + 1e-4f);
      EXPECT_LE(std::max(h, w), 29.0f + 1e-4f);
      EXPECT_NEAR(obj.xmax * 96, std::round(obj.xmax * 96), 1e-3f);
      right_third = right_third || obj.xmin * 96 >= 64;
    }
    if (!s.objects.empty()) {  // the last object drawn is whole: its box centre has its colour
      const auto& obj = s.objects.back();
      const int y = static_cast<int>((obj.ymin + obj.ymax) / 2 * 64),
                x = static_cast<int>((obj.xmin + obj.xmax) / 2 * 96);
      const uint8_t* p = &s.image.pixels[static_cast<size_t>((y * 96 + x) * 3)];
      EXPECT_GT(p[obj.colour], 150) << seed;
    }
  }
  EXPECT_TRUE(right_third);  // objects are placed across the whole width
  o.image_width = 8;
  std::mt19937_64 rng(0);
  EXPECT_THROW(make_scene(rng, o), Error);
}

TEST(ShapesScene, PixelsMatchObjects) {
  SceneOptions o;
  int checked_inner = 0, checked_outside = 0;
  std::set<int> kinds_checked;
  for (uint64_t seed = 0; seed < 150; ++seed) {
    std::mt19937_64 rng(seed);
    const Scene s = make_scene(rng, o);
    const int n = s.width;
    for (size_t i = 0; i < s.objects.size(); ++i) {
      const ShapeObject& obj = s.objects[i];
      const Px b = pixel_box(obj, n);
      // A pixel that no later object can have painted over is this object's colour.
      auto expect_filled = [&](int y, int x, const char* where) {
        if (in_other_box(s, i, y, x, /*later_only=*/true)) return;
        EXPECT_TRUE(has_colour(px(s.image, y, x), obj.colour))
            << "seed " << seed << " object " << i << " kind " << obj.kind << " " << where << " (" << y << "," << x
            << ")";
      };
      // A pixel outside every other object's box that this shape must not cover is background.
      auto expect_background = [&](int y, int x, const char* where) {
        if (y < 0 || x < 0 || y >= n || x >= n || in_other_box(s, i, y, x, /*later_only=*/false)) return;
        ++checked_outside;
        EXPECT_TRUE(is_grey(px(s.image, y, x))) << "seed " << seed << " object " << i << " kind " << obj.kind << " "
                                                << where << " (" << y << "," << x << ")";
      };
      int cy, cx;
      inner_point(obj, n, &cy, &cx);
      if (!in_other_box(s, i, cy, cx, true)) ++checked_inner;
      expect_filled(cy, cx, "centre");
      kinds_checked.insert(obj.kind);

      const int mid_y = (b.y0 + b.y1 - 1) / 2, mid_x = (b.x0 + b.x1 - 1) / 2;
      // Just outside each edge of the box.
      expect_background(b.y0 - 1, mid_x, "above");
      expect_background(b.y1, mid_x, "below");
      expect_background(cy, b.x0 - 1, "left");
      expect_background(cy, b.x1, "right");
      if (obj.kind == 0) {  // circle: reaches all four box edges, not the corners
        expect_filled(mid_y, b.x0, "left extreme");
        expect_filled(mid_y, b.x1 - 1, "right extreme");
        expect_filled(b.y0, mid_x, "top extreme");
        expect_filled(b.y1 - 1, mid_x, "bottom extreme");
        expect_background(b.y0, b.x0, "top-left corner");
        expect_background(b.y1 - 1, b.x1 - 1, "bottom-right corner");
      } else if (obj.kind == 1) {  // square: fills its corners
        expect_filled(b.y0, b.x0, "top-left corner");
        expect_filled(b.y0, b.x1 - 1, "top-right corner");
        expect_filled(b.y1 - 1, b.x0, "bottom-left corner");
        expect_filled(b.y1 - 1, b.x1 - 1, "bottom-right corner");
      } else {  // triangle pointing up: base corners and apex filled, top corners empty
        expect_filled(b.y1 - 1, b.x0, "bottom-left corner");
        expect_filled(b.y1 - 1, b.x1 - 1, "bottom-right corner");
        // The apex may round to either side of a half-pixel centre.
        const bool apex = has_colour(px(s.image, b.y0, mid_x), obj.colour) ||
                          has_colour(px(s.image, b.y0, std::min(mid_x + 1, n - 1)), obj.colour);
        if (!in_other_box(s, i, b.y0, mid_x, true)) {
          EXPECT_TRUE(apex) << "seed " << seed << " object " << i;
        }
        expect_background(b.y0, b.x0, "top-left corner");
        expect_background(b.y0, b.x1 - 1, "top-right corner");
      }
    }
  }
  EXPECT_GT(checked_inner, 200);
  EXPECT_GT(checked_outside, 500);
  EXPECT_EQ(kinds_checked, (std::set<int>{0, 1, 2}));
}

TEST(ShapesScene, LaterObjectsCoverAtMostHalfOfEarlierBoxes) {
  SceneOptions o;
  o.min_objects = 4;
  o.max_objects = 6;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    std::mt19937_64 rng(seed);
    const Scene s = make_scene(rng, o);
    for (size_t j = 0; j < s.objects.size(); ++j) {
      const Px b = pixel_box(s.objects[j], s.width);
      int covered = 0;
      for (int y = b.y0; y < b.y1; ++y)
        for (int x = b.x0; x < b.x1; ++x) covered += in_other_box(s, j, y, x, /*later_only=*/true);
      EXPECT_LE(2 * covered, (b.y1 - b.y0) * (b.x1 - b.x0)) << "seed " << seed << " object " << j;
    }
  }
}

TEST(ShapesScene, DeterministicInRngAndOptionsChecked) {
  SceneOptions o;
  std::mt19937_64 a(7), b(7), c(8);
  const Scene sa = make_scene(a, o), sb = make_scene(b, o), sc = make_scene(c, o);
  EXPECT_EQ(sa.image.pixels, sb.image.pixels);
  ASSERT_EQ(sa.objects.size(), sb.objects.size());
  for (size_t i = 0; i < sa.objects.size(); ++i) {
    EXPECT_EQ(sa.objects[i].kind, sb.objects[i].kind);
    EXPECT_EQ(sa.objects[i].xmin, sb.objects[i].xmin);
  }
  EXPECT_NE(sa.image.pixels, sc.image.pixels);

  o.image_size = 100;
  std::mt19937_64 d(1);
  const Scene big = make_scene(d, o);
  EXPECT_EQ(big.image.height, 100);
  EXPECT_EQ(big.image.pixels.size(), 100u * 100 * 3);

  auto bad = [](auto change) {
    SceneOptions opt;
    change(opt);
    std::mt19937_64 rng(0);
    return make_scene(rng, opt);
  };
  EXPECT_THROW(bad([](SceneOptions& x) { x.image_size = 8; }), Error);
  EXPECT_THROW(bad([](SceneOptions& x) { x.min_objects = 3, x.max_objects = 2; }), Error);
  EXPECT_THROW(bad([](SceneOptions& x) { x.min_size = 0.5f, x.max_size = 0.4f; }), Error);
  EXPECT_THROW(bad([](SceneOptions& x) { x.max_size = 1.5f; }), Error);
  // Forty objects of 0.45 of the side cannot each stay half visible.
  EXPECT_THROW(bad([](SceneOptions& x) { x.min_objects = x.max_objects = 40, x.min_size = 0.45f; }), Error);
}

TEST(ShapesMultilabel, ClassesAndMultiHot) {
  EXPECT_EQ(shapes_multilabel_classes(),
            (std::vector<std::string>{"circle", "square", "triangle", "red", "green", "blue"}));
  Scene s;
  EXPECT_EQ(shapes_multilabel(s), std::vector<float>(6, 0.0f));
  ShapeObject blue_circle, blue_triangle;
  blue_circle.kind = 0;
  blue_circle.colour = 2;
  blue_triangle.kind = 2;
  blue_triangle.colour = 2;
  s.objects = {blue_circle, blue_triangle, blue_circle};
  EXPECT_EQ(shapes_multilabel(s), (std::vector<float>{1, 0, 1, 0, 0, 1}));
}

ShapesOptions small_options(const std::string& out_dir) {
  ShapesOptions o;
  o.out_dir = out_dir;
  o.num_train = 30;
  o.num_validation = 7;
  o.train_shards = 2;
  o.validation_shards = 1;
  o.seed = 5;
  return o;
}

// Reads every record back and checks it against the scene regenerated from the same seed.
void check_split(const ShapesOptions& o, const std::string& split, const std::vector<std::string>& files,
                 int64_t expected) {
  int64_t index = 0;
  for (const auto& file : files) {
    for (const auto& rec : read_records(file)) {
      const std::string where = file + " record " + std::to_string(index);
      const ExampleView ex(rec, where);
      std::set<std::string> keys;
      for (const auto& kv : ex.features().feature()) keys.insert(kv.first);
      EXPECT_EQ(keys, (std::set<std::string>{"width", "height", "image", "label", "name"})) << where;
      EXPECT_EQ(ex.int64("width"), o.image_size) << where;
      EXPECT_EQ(ex.int64("height"), o.image_size) << where;
      char name[64];
      std::snprintf(name, sizeof name, "shapes-%s-%06lld", split.c_str(), static_cast<long long>(index));
      EXPECT_EQ(ex.bytes("name"), name);

      const Scene scene = shapes_scene(o, split, index);
      const std::string& label_bytes = ex.bytes("label");
      ASSERT_EQ(label_bytes.size(), 4u * 6) << where;
      const std::vector<float> label = decode_le_floats(label_bytes);
      std::vector<float> expected_label(6, 0.0f);
      for (const auto& obj : scene.objects) expected_label[obj.kind] = expected_label[3 + obj.colour] = 1.0f;
      EXPECT_EQ(label, expected_label) << where;

      const std::string& encoded = ex.bytes("image");
      EXPECT_EQ(sniff_format(encoded), o.format == "png" ? ImageFormat::kPng : ImageFormat::kJpeg) << where;
      const Image im = decode_image(encoded, where);
      ASSERT_EQ(im.height, o.image_size) << where;
      ASSERT_EQ(im.width, o.image_size) << where;
      if (o.format == "png") {
        EXPECT_EQ(im.pixels, scene.image.pixels) << where;
      } else {
        double diff = 0;
        for (size_t i = 0; i < im.pixels.size(); ++i) diff += std::abs(im.pixels[i] - scene.image.pixels[i]);
        // JPEG keeps the scene but not its per-pixel noise (mean |noise| is 6) nor full
        // chroma at shape edges; another scene's image differs by tens of levels.
        EXPECT_LT(diff / static_cast<double>(im.pixels.size()), 12.0) << where;
      }
      // Every labelled colour is visible in the stored image at an uncovered object's centre.
      for (size_t i = 0; i < scene.objects.size(); ++i) {
        int y, x;
        inner_point(scene.objects[i], im.width, &y, &x);
        if (in_other_box(scene, i, y, x, /*later_only=*/true)) continue;
        EXPECT_TRUE(has_colour(px(im, y, x), scene.objects[i].colour, 40)) << where << " object " << i;
      }
      ++index;
    }
  }
  EXPECT_EQ(index, expected);
}

TEST(ShapesDataset, WritesMultilabelRecords) {
  TempDir dir;
  const ShapesOptions o = small_options(dir.file("shapes"));
  const auto [train, validation] = write_shapes_dataset(o);
  EXPECT_EQ(train, 30);
  EXPECT_EQ(validation, 7);
  EXPECT_EQ(test::list_dir(o.out_dir), (std::vector<std::string>{"labels.txt", "train-00000-of-00002",
                                                                 "train-00001-of-00002", "validation-00000-of-00001"}));
  EXPECT_EQ(test::read_bytes(o.out_dir + "/labels.txt"), "circle\nsquare\ntriangle\nred\ngreen\nblue\n");
  EXPECT_EQ(read_records(o.out_dir + "/train-00000-of-00002").size(), 15u);
  check_split(o, "train", {o.out_dir + "/train-00000-of-00002", o.out_dir + "/train-00001-of-00002"}, 30);
  check_split(o, "validation", {o.out_dir + "/validation-00000-of-00001"}, 7);
}

TEST(ShapesDataset, PngRecordsHoldTheExactScene) {
  TempDir dir;
  ShapesOptions o = small_options(dir.file("png"));
  o.format = "png";
  o.image_size = 40;
  o.num_train = 6;
  o.num_validation = 3;
  o.train_shards = 1;
  write_shapes_dataset(o);
  check_split(o, "train", {o.out_dir + "/train-00000-of-00001"}, 6);
  check_split(o, "validation", {o.out_dir + "/validation-00000-of-00001"}, 3);
}

TEST(ShapesDataset, SameSeedSameBytes) {
  TempDir dir;
  ShapesOptions a = small_options(dir.file("a")), b = small_options(dir.file("b")), c = small_options(dir.file("c"));
  c.seed = 6;
  write_shapes_dataset(a);
  write_shapes_dataset(b);
  write_shapes_dataset(c);
  for (const auto& name : test::list_dir(a.out_dir))
    EXPECT_EQ(test::read_bytes(a.out_dir + "/" + name), test::read_bytes(b.out_dir + "/" + name)) << name;
  EXPECT_NE(test::read_bytes(a.out_dir + "/train-00000-of-00002"),
            test::read_bytes(c.out_dir + "/train-00000-of-00002"));
  EXPECT_NE(test::read_bytes(a.out_dir + "/validation-00000-of-00001"),
            test::read_bytes(c.out_dir + "/validation-00000-of-00001"));
  // Train and validation images come from different streams.
  EXPECT_NE(shapes_scene(a, "train", 0).image.pixels, shapes_scene(a, "validation", 0).image.pixels);
}

TEST(ShapesDataset, ObjectCountsFollowTheOptions) {
  ShapesOptions o = small_options("");
  for (int64_t i = 0; i < 20; ++i) {  // defaults: multilabel 1-4, captioning exactly 2
    const size_t n = shapes_scene(o, "train", i).objects.size();
    EXPECT_TRUE(n >= 1 && n <= 4) << n;
  }
  o.task = "captioning";
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(shapes_scene(o, "train", i).objects.size(), 2u);
  o.min_objects = 1;
  std::set<size_t> seen;
  for (int64_t i = 0; i < 40; ++i) seen.insert(shapes_scene(o, "train", i).objects.size());
  EXPECT_EQ(seen, (std::set<size_t>{1, 2}));
  o.max_objects = 1;
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(shapes_scene(o, "validation", i).objects.size(), 1u);
  o.task = "multilabel";
  o.min_objects = o.max_objects = 3;
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(shapes_scene(o, "train", i).objects.size(), 3u);
}

TEST(ShapesDataset, RejectsBadOptions) {
  TempDir dir;
  auto expect_error = [&](ShapesOptions o, const std::string& part) {
    try {
      write_shapes_dataset(o);
      ADD_FAILURE() << "no Error for " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.out_dir)) << "wrote output despite: " << part;
  };
  ShapesOptions o = small_options(dir.file("out"));
  o.task = "segmentation";
  expect_error(o, "--task must be multilabel, detection or captioning");
  o = small_options(dir.file("out"));
  o.format = "gif";
  expect_error(o, "--format");
  o = small_options(dir.file("out"));
  o.image_size = 4;
  expect_error(o, "image_size");
  o = small_options(dir.file("out"));
  o.num_train = -1;
  expect_error(o, "--num_train");
  o = small_options(dir.file("out"));
  o.task = "captioning";
  o.max_objects = 3;  // captions describe one or two objects
  expect_error(o, "need 1 <= --min_objects <= --max_objects <= 2");
  o = small_options(dir.file("out"));
  o.min_objects = 3;
  o.max_objects = 2;
  expect_error(o, "min_objects <= max_objects");
  EXPECT_THROW(shapes_scene(small_options(""), "test", 0), Error);
}

}  // namespace
}  // namespace orchard::data
