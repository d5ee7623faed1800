#include "orchard/detect/ops/anchors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

const std::vector<std::pair<int64_t, int64_t>> kSsd300Maps{{19, 19}, {10, 10}, {5, 5}, {3, 3}, {2, 2}, {1, 1}};

// Corners of a box of size (h, w) centred at (cy, cx).
std::vector<double> centered(double cy, double cx, double h, double w) {
  return {cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2};
}

void expect_row(const at::Tensor& anchors, int64_t row, const std::vector<double>& want) {
  const auto r = anchors[row].to(at::kDouble);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(r[j].item<double>(), want[j], 1e-5) << "anchor " << row << " coord " << j;
}

TEST(SsdAnchors, DefaultCountsPerLocation) {
  EXPECT_EQ(anchors_per_location(SsdAnchorOptions{}), (std::vector<int64_t>{3, 6, 6, 6, 6, 6}));
  SsdAnchorOptions o;
  o.interpolated_scale_aspect_ratio = 0;
  o.reduce_boxes_in_lowest_layer = false;
  EXPECT_EQ(anchors_per_location(o), (std::vector<int64_t>{5, 5, 5, 5, 5, 5}));
}

TEST(SsdAnchors, Ssd300Has1917Anchors) {
  const auto a = generate_ssd_anchors(SsdAnchorOptions{}, kSsd300Maps, 300, 300);
  // 19*19*3 + (100 + 25 + 9 + 4 + 1) * 6
  ASSERT_EQ(a.sizes(), (at::IntArrayRef{1917, 4}));
  EXPECT_EQ(a.scalar_type(), at::kFloat);
}

TEST(SsdAnchors, HandComputedBoxes) {
  const auto a = generate_ssd_anchors(SsdAnchorOptions{}, kSsd300Maps, 300, 300);
  const double r2 = std::sqrt(2.0);
  // Layer 0 (scale 0.2), cell (0, 0), centre 0.5 / 19: (0.1, 1.0), (0.2, 2.0), (0.2, 0.5).
  const double c0 = 0.5 / 19;
  expect_row(a, 0, centered(c0, c0, 0.1, 0.1));
  expect_row(a, 1, centered(c0, c0, 0.2 / r2, 0.2 * r2));
  expect_row(a, 2, centered(c0, c0, 0.2 * r2, 0.2 / r2));
  // Cell (0, 1) follows: x moves first.
  expect_row(a, 3, centered(c0, 1.5 / 19, 0.1, 0.1));
  // Cell (1, 0) starts the second row of cells.
  expect_row(a, 19 * 3, centered(1.5 / 19, c0, 0.1, 0.1));
  // Last cell (18, 18), third anchor.
  expect_row(a, 1082, centered(18.5 / 19, 18.5 / 19, 0.2 * r2, 0.2 / r2));
  // Layer 1 (scale 0.35, next 0.5), cell (0, 0), centre 0.05: ratios 1, 2, 0.5, 3, 0.3333,
  // then the interpolated sqrt(0.35 * 0.5) at ratio 1.
  const double s1 = 0.2 + 0.75 / 5;
  expect_row(a, 1083, centered(0.05, 0.05, s1, s1));
  expect_row(a, 1083 + 3, centered(0.05, 0.05, s1 / std::sqrt(3.0), s1 * std::sqrt(3.0)));
  expect_row(a, 1083 + 4, centered(0.05, 0.05, s1 / std::sqrt(0.3333), s1 * std::sqrt(0.3333)));
  const double i1 = std::sqrt(s1 * 0.5);
  expect_row(a, 1083 + 5, centered(0.05, 0.05, i1, i1));
  // Last layer: one cell at the centre, scale 0.95, the interpolated anchor uses scale_next 1.
  expect_row(a, 1911, centered(0.5, 0.5, 0.95, 0.95));
  const double i5 = std::sqrt(0.95 * 1.0);
  expect_row(a, 1916, centered(0.5, 0.5, i5, i5));
}

TEST(SsdAnchors, NonSquareImageCorrectsBaseSize) {
  // 300 high, 600 wide: base width 300/600, so a ratio-1 anchor is square in pixels.
  const auto a =
      generate_ssd_anchors(SsdAnchorOptions{}, {{19, 38}, {10, 20}, {5, 10}, {3, 6}, {2, 4}, {1, 2}}, 300, 600);
  expect_row(a, 0, centered(0.5 / 19, 0.5 / 38, 0.1, 0.05));
  EXPECT_EQ(a.size(0), 19 * 38 * 3 + (200 + 50 + 18 + 8 + 2) * 6);
}

TEST(SsdAnchors, ExplicitScalesStridesAndOffsets) {
  SsdAnchorOptions o;
  o.num_layers = 2;
  o.scales = {0.1f, 0.4f};
  o.aspect_ratios = {1.0f};
  o.reduce_boxes_in_lowest_layer = false;
  o.height_stride = {16, 32};
  o.width_stride = {16, 32};
  o.height_offset = {0, 8};
  o.width_offset = {0, 8};
  const auto a = generate_ssd_anchors(o, {{2, 2}, {1, 1}}, 64, 64);
  ASSERT_EQ(a.size(0), 2 * 2 * 2 + 2);
  // Layer 0 cell (0, 1): centre (0, 16/64); anchors of scale 0.1 and sqrt(0.1 * 0.4) = 0.2.
  expect_row(a, 2, centered(0.0, 0.25, 0.1, 0.1));
  expect_row(a, 3, centered(0.0, 0.25, 0.2, 0.2));
  // Layer 1 cell (0, 0): centre 8/64; the interpolated scale is sqrt(0.4 * 1.0).
  expect_row(a, 8, centered(0.125, 0.125, 0.4, 0.4));
  expect_row(a, 9, centered(0.125, 0.125, std::sqrt(0.4), std::sqrt(0.4)));
}

TEST(SsdAnchors, RejectsInconsistentOptions) {
  EXPECT_THROW(generate_ssd_anchors(SsdAnchorOptions{}, {{19, 19}}, 300, 300), Error);
  SsdAnchorOptions o;
  o.scales = {0.1f, 0.2f};
  EXPECT_THROW(anchors_per_location(o), Error);
  SsdAnchorOptions s;
  s.height_stride = {16};
  EXPECT_THROW(generate_ssd_anchors(s, kSsd300Maps, 300, 300), Error);
}

// multiscale_anchor_generator, worked by hand from MultiscaleGridAnchorGenerator and
// grid_anchor_generator.tile_anchors: a 64x64 image, levels 3..4 (strides 8, 16; base sizes 32,
// 64 at anchor_scale 4), 2 scales per octave (1, sqrt 2), aspect ratios 1, 2, 0.5.
TEST(MultiscaleAnchors, HandComputedBoxes) {
  MultiscaleAnchorOptions o;
  o.min_level = 3;
  o.max_level = 4;
  EXPECT_EQ(anchors_per_location(o), 6);
  const auto a = generate_multiscale_anchors(o, {{8, 8}, {4, 4}}, 64, 64);
  ASSERT_EQ(a.sizes().vec(), (std::vector<int64_t>{(64 + 16) * 6, 4}));
  const auto box = [&](int64_t i) { return std::vector<float>(a[i].data_ptr<float>(), a[i].data_ptr<float>() + 4); };
  const auto near = [](const std::vector<float>& got, const std::vector<double>& want) {
    for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << k;
  };
  // Cell (0, 0) of level 3: centre (4, 4) pixels (offset half a stride: 64 % 8 == 0).
  near(box(0), {(4 - 16) / 64.0, (4 - 16) / 64.0, (4 + 16) / 64.0, (4 + 16) / 64.0});  // aspect 1, scale 1: 32x32
  const double r2 = std::sqrt(2.0);
  near(box(1), {(4 - 16 * r2) / 64, (4 - 16 * r2) / 64, (4 + 16 * r2) / 64, (4 + 16 * r2) / 64});  // scale sqrt 2
  // aspect 2 (width / height), scale 1: height 32 / sqrt 2, width 32 sqrt 2.
  near(box(2), {(4 - 16 / r2) / 64, (4 - 16 * r2) / 64, (4 + 16 / r2) / 64, (4 + 16 * r2) / 64});
  // aspect 0.5, scale sqrt 2: height 32 sqrt 2 * sqrt 2 = 64, width 32.
  near(box(5), {(4 - 32) / 64.0, (4 - 16) / 64.0, (4 + 32) / 64.0, (4 + 16) / 64.0});
  // Cell (0, 1): the next 6 anchors move 8 pixels right; cell (1, 0) is 8 rows of 6 later.
  near(box(6), {(4 - 16) / 64.0, (12 - 16) / 64.0, (4 + 16) / 64.0, (12 + 16) / 64.0});
  near(box(48), {(12 - 16) / 64.0, (4 - 16) / 64.0, (12 + 16) / 64.0, (4 + 16) / 64.0});
  // Level 4 starts after 64 cells: centre (8, 8), base 64.
  near(box(64 * 6), {(8 - 32) / 64.0, (8 - 32) / 64.0, (8 + 32) / 64.0, (8 + 32) / 64.0});

  // A side that is not a multiple of the stride gets no offset: 100 % 8 != 0 (rows), 64 % 8 == 0.
  const auto b = generate_multiscale_anchors(o, {{13, 8}, {7, 4}}, 100, 64);
  near(std::vector<float>(b[0].data_ptr<float>(), b[0].data_ptr<float>() + 4),
       {(0 - 16) / 100.0, (4 - 16) / 64.0, (0 + 16) / 100.0, (4 + 16) / 64.0});
  // In pixels without normalize_coordinates.
  o.normalize_coordinates = false;
  const auto p = generate_multiscale_anchors(o, {{8, 8}, {4, 4}}, 64, 64);
  EXPECT_TRUE(at::allclose(p, a * 64));
}

// The RetinaNet configs (ssd_resnet50_v1_fpn_640x640: levels 3..7, 9 or 6 anchors per cell).
TEST(MultiscaleAnchors, RetinaNet640CountsAndErrors) {
  MultiscaleAnchorOptions o;  // the defaults: levels 3..7, scale 4, 2 per octave, 1/2/0.5
  const std::vector<std::pair<int64_t, int64_t>> maps{{80, 80}, {40, 40}, {20, 20}, {10, 10}, {5, 5}};
  const auto a = generate_multiscale_anchors(o, maps, 640, 640);
  EXPECT_EQ(a.size(0), (6400 + 1600 + 400 + 100 + 25) * 6);
  // The largest anchor: level 7, scale sqrt 2, aspect 0.5: 128 * 4 * sqrt 2 * sqrt 2 = 1024 high.
  EXPECT_NEAR((a.select(1, 2) - a.select(1, 0)).max().item<double>(), 1024.0 / 640, 1e-5);
  EXPECT_THROW(generate_multiscale_anchors(o, {maps.begin(), maps.end() - 1}, 640, 640), Error);
  o.scales_per_octave = 0;
  EXPECT_THROW(generate_multiscale_anchors(o, maps, 640, 640), Error);
  o.scales_per_octave = 2;
  o.max_level = 2;
  EXPECT_THROW(generate_multiscale_anchors(o, maps, 640, 640), Error);
}

// Faster R-CNN's grid anchors as the samples configure them (base 256, stride 16, scales
// 0.25 .. 2, aspect ratios 0.5, 1, 2): worked by hand from grid_anchor_generator.tile_anchors.
TEST(GridAnchors, HandComputedBoxesAndOrder) {
  GridAnchorOptions o;
  o.scales = {0.25f, 0.5f, 1.0f, 2.0f};
  EXPECT_EQ(anchors_per_location(o), 12);
  const auto a = generate_grid_anchors(o, 2, 3);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{2 * 3 * 12, 4}));
  auto box = [&](int64_t k) {
    return std::vector<float>{a[k][0].item<float>(), a[k][1].item<float>(), a[k][2].item<float>(),
                              a[k][3].item<float>()};
  };
  auto near = [](const std::vector<float>& got, const std::vector<float>& want) {
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-3f) << i;
  };
  // Cell (0, 0) is centred at the origin. Anchor 0: aspect ratio 0.5, scale 0.25: height
  // 0.25 / sqrt(0.5) * 256 = 90.51, width 0.25 * sqrt(0.5) * 256 = 45.25.
  near(box(0), {-45.2548f, -22.6274f, 45.2548f, 22.6274f});
  // Anchor 5: aspect ratio 1 (the second group of four), scale 0.5: a 128 square.
  near(box(5), {-64.f, -64.f, 64.f, 64.f});
  // Anchor 11: aspect ratio 2, scale 2: height 362.04, width 724.08.
  near(box(11), {-181.0193f, -362.0387f, 181.0193f, 362.0387f});
  // Cell (0, 1): x + 16; cell (1, 2) (the last): y + 16, x + 32.
  near(box(12 + 5), {-64.f, -48.f, 64.f, 80.f});
  near(box(5 * 12 + 5), {-48.f, -32.f, 80.f, 96.f});
  // Offsets and non-square bases move and stretch them.
  o.offset_height = 8;
  o.offset_width = 4;
  o.base_height = 128;
  near(box(5), {-64.f, -64.f, 64.f, 64.f});  // (the tensor above is unchanged)
  const auto b = generate_grid_anchors(o, 1, 1);
  EXPECT_NEAR(b[5][0].item<float>(), 8.f - 32.f, 1e-4f);
  EXPECT_NEAR(b[5][1].item<float>(), 4.f - 64.f, 1e-4f);
  o.scales.clear();
  EXPECT_THROW(generate_grid_anchors(o, 1, 1), Error);
}

}  // namespace
}  // namespace orchard::detect
