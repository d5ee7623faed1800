#include "orchard/detect/metrics/coco_mask.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

using Counts = std::vector<uint32_t>;

Rle rle(int64_t h, int64_t w, Counts counts) {
  Rle r;
  r.h = h;
  r.w = w;
  r.counts = std::move(counts);
  return r;
}

// A 3x4 mask, row-major:
//   0 1 1 0
//   0 1 0 0
//   1 1 0 0
// Column-major its pixels are 001 111 100 000: two 0s, five 1s, five 0s.
const std::vector<uint8_t> kMask3x4 = {0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0};

TEST(CocoMask, EncodeSmallMaskColumnMajor) {
  const Rle r = rle_encode(kMask3x4.data(), 3, 4);
  EXPECT_EQ(r.h, 3);
  EXPECT_EQ(r.w, 4);
  EXPECT_EQ(r.counts, (Counts{2, 5, 5}));
  EXPECT_EQ(rle_decode(r), kMask3x4);
  EXPECT_EQ(rle_area(r), 5u);
  EXPECT_EQ(rle_to_bbox(r), (std::vector<double>{0, 0, 3, 3}));
  // Every count is below 16: one character each, '0' + count.
  EXPECT_EQ(rle_to_string(r), "255");

  // Any nonzero byte is foreground.
  std::vector<uint8_t> bytes = kMask3x4;
  for (auto& b : bytes) b *= 200;
  EXPECT_EQ(rle_encode(bytes.data(), 3, 4).counts, r.counts);
}

TEST(CocoMask, EncodeStartsWithAnEmptyZeroRunAndHandlesEmptyMasks) {
  const std::vector<uint8_t> ones(6, 1);
  EXPECT_EQ(rle_encode(ones.data(), 2, 3).counts, (Counts{0, 6}));
  const std::vector<uint8_t> zeros(6, 0);
  const Rle empty = rle_encode(zeros.data(), 2, 3);
  EXPECT_EQ(empty.counts, (Counts{6}));
  EXPECT_EQ(rle_area(empty), 0u);
  EXPECT_EQ(rle_to_bbox(empty), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(rle_encode(nullptr, 0, 5).counts, (Counts{0}));
}

// Worked from rleToString: counts 0 40 3 100 1 17, the last three as differences to the count two before:
// 60, -2, -83. In 5-bit groups, low first, continuation 0x20, '0' added:
//   0 -> '0';  40 = 8 + 1*32 -> 8|0x20, 1 -> 'X1';  3 -> '3';
//   60 = 28 + 1*32 -> 28|0x20 ('l'), then 1 ('1') since 28 has bit 0x10 and 1 is not the sign extension;
//   -2 -> 30 ('N'), the rest is -1 and 30 has bit 0x10: done;
//   -83 = 13 + (-3)*32 -> 13|0x20 (']'), then -3 -> 29 ('M') with sign bit, rest -1.
TEST(CocoMask, CompressedStringWorkedByHand) {
  const Rle r = rle(7, 23, {0, 40, 3, 100, 1, 17});
  EXPECT_EQ(rle_to_string(r), "0X13l1N]M");
  EXPECT_EQ(rle_from_string("0X13l1N]M", 7, 23).counts, r.counts);
}

TEST(CocoMask, RoundTripsRandomMasks) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t h = 1 + static_cast<int64_t>(rng() % 40), w = 1 + static_cast<int64_t>(rng() % 40);
    // Blobby masks: runs of random length, so that counts span several 5-bit groups.
    std::vector<uint8_t> mask(static_cast<size_t>(h * w));
    const double p = (rng() % 100) / 100.0;
    uint8_t v = 0;
    for (auto& px : mask) {
      if ((rng() % 1000) / 1000.0 < 0.1) v = (rng() % 1000) / 1000.0 < p;
      px = v;
    }
    const Rle r = rle_encode(mask.data(), h, w);
    ASSERT_EQ(rle_decode(r), mask) << trial;
    ASSERT_EQ(rle_from_string(rle_to_string(r), h, w).counts, r.counts) << trial;

    // Area and tight box counted on the pixels.
    uint64_t area = 0;
    int64_t x0 = w, y0 = h, x1 = -1, y1 = -1;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        if (mask[y * w + x]) {
          ++area;
          x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
        }
    EXPECT_EQ(rle_area(r), area) << trial;
    const std::vector<double> box =
        area == 0 ? std::vector<double>{0, 0, 0, 0}
                  : std::vector<double>{static_cast<double>(x0), static_cast<double>(y0),
                                        static_cast<double>(x1 - x0 + 1), static_cast<double>(y1 - y0 + 1)};
    EXPECT_EQ(rle_to_bbox(r), box) << trial;
  }
}

TEST(CocoMask, RejectsMalformedStrings) {
  EXPECT_THROW(rle_from_string("255", 3, 5), Error);  // sums to 12, not 15
  EXPECT_THROW(rle_from_string("X", 7, 23), Error);   // ends inside a number
  EXPECT_THROW(rle_from_string("2 5", 3, 4), Error);  // ' ' is below '0'
  EXPECT_THROW(rle_from_string("255", -1, 4), Error);
  try {
    rle_from_string("25", 3, 4, "instances.json: annotation 7");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("annotation 7"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rle_from_string("", 0, 0).counts, Counts{});
}

// Worked from rleFrPoly. The square (1,1) (4,1) (4,3) (1,3) scaled by 5 has its edges at x 5 and 20, y 5 and
// 15. Going right along the top edge, the boundary crosses the centre lines of columns 1, 2, 3 (5 * (c + .5)
// - .5 = 7, 12, 17) at y 5, i.e. row ceil(5.5 / 5 - .5) = 1; going back along the bottom edge it crosses them at
// row ceil(15.5 / 5 - .5) = 3. Flip positions x * 5 + y: 6 11 16 and 8 13 18, and the end 30: runs
// 6 2 3 2 3 2 12. Rows 1-2 of columns 1-3, the pixels whose centres lie inside.
TEST(CocoMask, PolygonSquare) {
  const Rle r = rle_from_polygon({1, 1, 4, 1, 4, 3, 1, 3}, 5, 6);
  EXPECT_EQ(r.counts, (Counts{6, 2, 3, 2, 3, 2, 12}));
  EXPECT_EQ(rle_area(r), 6u);
  EXPECT_EQ(rle_to_bbox(r), (std::vector<double>{1, 1, 3, 2}));
  // The same square counter-clockwise, from another vertex, with the first vertex repeated at the end.
  EXPECT_EQ(rle_from_polygon({4, 3, 4, 1, 1, 1, 1, 3, 4, 3}, 5, 6).counts, r.counts);
}

// The triangle (0,0) (4,0) (0,4) on 5x5. The top edge crosses columns 0-3 at row 0 (flips 0 5 10 15); the
// hypotenuse, walked from (0,20) to (20,0) on the 5x grid, crosses column c at y 19 - (5c + 2), row
// ceil((y + .5) / 5 - .5) = 3 - c (flips 15 11 7 3). The two flips at 15 cancel (column 3 is empty), their empty
// run merged into the next: runs 0 3 2 2 3 1 14. Columns 0, 1, 2 have 3, 2, 1 pixels, those with x + y + 1 < 4.
TEST(CocoMask, PolygonTriangle) {
  const Rle r = rle_from_polygon({0, 0, 4, 0, 0, 4}, 5, 5);
  EXPECT_EQ(r.counts, (Counts{0, 3, 2, 2, 3, 1, 14}));
  EXPECT_EQ(rle_area(r), 6u);
  EXPECT_EQ(rle_to_bbox(r), (std::vector<double>{0, 0, 3, 3}));
  const std::vector<uint8_t> expected = {1, 1, 1, 0, 0,  //
                                         1, 1, 0, 0, 0,  //
                                         1, 0, 0, 0, 0,  //
                                         0, 0, 0, 0, 0,  //
                                         0, 0, 0, 0, 0};
  EXPECT_EQ(rle_decode(r), expected);
}

TEST(CocoMask, PolygonOutsideTheImageIsClipped) {
  // Columns left of 0 or right of w - 1 are dropped, rows are clamped to [0, h].
  const Rle r = rle_from_polygon({-10, -10, 20, -10, 20, 20, -10, 20}, 3, 4);
  EXPECT_EQ(r.counts, (Counts{0, 12}));
  EXPECT_EQ(rle_area(rle_from_polygon({10, 10, 20, 10, 20, 20}, 3, 4)), 0u);
}

TEST(CocoMask, PolygonRejectsBadInput) {
  EXPECT_THROW(rle_from_polygon({}, 5, 5), Error);
  EXPECT_THROW(rle_from_polygon({1, 1, 2}, 5, 5), Error);
  EXPECT_THROW(rle_from_polygon({1, 1, 2, 2, 3, std::nan("")}, 5, 5), Error);
  EXPECT_THROW(rle_from_polygon({1, 1, 2, 2, 3, 1e12}, 5, 5), Error);
}

// kMask3x4 (column-major pixels 2-6) with the pixels 0 and 11: pixels 0, 2-6, 11, runs 0 1 1 5 4 1.
TEST(CocoMask, MergeIsTheUnion) {
  const Rle a = rle(3, 4, {2, 5, 5});
  const Rle b = rle(3, 4, {0, 1, 10, 1});
  const Rle u = rle_merge({a, b});
  EXPECT_EQ(u.h, 3);
  EXPECT_EQ(u.w, 4);
  EXPECT_EQ(u.counts, (Counts{0, 1, 1, 5, 4, 1}));
  EXPECT_EQ(rle_area(u), 7u);
  EXPECT_EQ(rle_merge({b, a}).counts, u.counts);
  EXPECT_EQ(rle_merge({a, a}).counts, a.counts);
  EXPECT_EQ(rle_merge({a}).counts, a.counts);
  const Rle none = rle_merge({});
  EXPECT_EQ(none.h, 0);
  EXPECT_TRUE(none.counts.empty());
  EXPECT_THROW(rle_merge({a, rle(4, 3, {2, 5, 5})}), Error);
  EXPECT_THROW(rle_merge({a, rle(3, 4, {2, 5})}), Error);

  // A multi-polygon annotation: the square and the triangle above on one 5x6 image overlap in pixel
  // (x, y) = (1, 1) only: 6 + 6 - 1 = 11.
  const Rle square = rle_from_polygon({1, 1, 4, 1, 4, 3, 1, 3}, 5, 6);
  const Rle triangle = rle_from_polygon({0, 0, 4, 0, 0, 4}, 5, 6);
  EXPECT_EQ(rle_area(rle_merge({square, triangle})), 11u);
}

// kMask3x4 (5 pixels) against column 1 (pixels 3-5, all inside it): 3 / 5 = 0.6, either way round. Against a
// crowd region the denominator is the detection's area: 3 / 5 with kMask3x4 detected, 3 / 3 with column 1.
TEST(CocoMask, IouAndTheCrowdRule) {
  const Rle a = rle(3, 4, {2, 5, 5});
  const Rle column = rle(3, 4, {3, 3, 6});
  EXPECT_DOUBLE_EQ(rle_iou(a, column, false), 0.6);
  EXPECT_DOUBLE_EQ(rle_iou(column, a, false), 0.6);
  EXPECT_DOUBLE_EQ(rle_iou(a, column, true), 0.6);
  EXPECT_DOUBLE_EQ(rle_iou(column, a, true), 1.0);
  EXPECT_DOUBLE_EQ(rle_iou(a, a, false), 1.0);
  // Overlapping boxes but no common pixel, and empty masks: 0.
  const Rle corners = rle(3, 4, {0, 1, 10, 1});
  EXPECT_EQ(rle_iou(a, corners, false), 0);
  EXPECT_EQ(rle_iou(a, corners, true), 0);
  EXPECT_EQ(rle_iou(rle(3, 4, {12}), rle(3, 4, {12}), false), 0);
  EXPECT_EQ(rle_iou(rle(3, 4, {12}), a, true), 0);
  EXPECT_THROW(rle_iou(a, rle(4, 3, {2, 5, 5}), false), Error);
  EXPECT_THROW(rle_iou(a, rle(3, 4, {3, 3, 3}), false), Error);  // counts do not add up
}

TEST(CocoMask, IouMatchesPixelCounts) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t h = 1 + static_cast<int64_t>(rng() % 20), w = 1 + static_cast<int64_t>(rng() % 20);
    std::vector<uint8_t> a(static_cast<size_t>(h * w)), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = rng() % 3 == 0;
      b[i] = rng() % 2 == 0;
    }
    uint64_t inter = 0, uni = 0, area_a = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      inter += a[i] && b[i];
      uni += a[i] || b[i];
      area_a += a[i];
    }
    const Rle ra = rle_encode(a.data(), h, w), rb = rle_encode(b.data(), h, w);
    const double iou = inter == 0 ? 0 : static_cast<double>(inter) / static_cast<double>(uni);
    const double crowd = inter == 0 ? 0 : static_cast<double>(inter) / static_cast<double>(area_a);
    EXPECT_EQ(rle_iou(ra, rb, false), iou) << trial;
    EXPECT_EQ(rle_iou(ra, rb, true), crowd) << trial;
    std::vector<uint8_t> either(a.size());
    for (size_t i = 0; i < a.size(); ++i) either[i] = a[i] || b[i];
    EXPECT_EQ(rle_merge({ra, rb}).counts, rle_encode(either.data(), h, w).counts) << trial;
  }
}

// tests/fixtures/coco_mask/masks.txt: random masks, polygons, multi-polygon annotations and IoUs, with the
// answers of the real pycocotools (maskApi.c); see the README there.
std::vector<double> read_polygon(std::istringstream& in) {
  size_t n = 0;
  in >> n;
  std::vector<double> xy(n);
  for (double& v : xy) {
    std::string token;
    in >> token;
    v = std::strtod(token.c_str(), nullptr);
  }
  return xy;
}

// Checks `r` against pycocotools' "counts | string | area | x y w h".
void expect_as_pycocotools(const Rle& r, const std::string& expected) {
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    const size_t end = expected.find(" | ", begin);
    parts.push_back(expected.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 3;
  }
  ASSERT_EQ(parts.size(), 4u) << expected;
  std::ostringstream counts;
  for (size_t i = 0; i < r.counts.size(); ++i) counts << (i ? " " : "") << r.counts[i];
  EXPECT_EQ(counts.str(), parts[0]);
  EXPECT_EQ(rle_to_string(r), parts[1]);
  EXPECT_EQ(std::to_string(rle_area(r)), parts[2]);
  std::istringstream box(parts[3]);
  std::vector<double> expected_box(4);
  for (double& v : expected_box) box >> v;
  EXPECT_EQ(rle_to_bbox(r), expected_box);  // whole numbers
}

TEST(CocoMask, AgreesWithPycocotools) {
  std::ifstream file(ORCHARD_TEST_FIXTURES "/coco_mask/masks.txt");
  ASSERT_TRUE(file) << "missing fixture";
  std::string line;
  int num_cases = 0;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t arrow = line.find(" => ");
    ASSERT_NE(arrow, std::string::npos) << line;
    const std::string expected = line.substr(arrow + 4);
    std::istringstream in(line.substr(0, arrow));
    std::string kind;
    int64_t h = 0, w = 0;
    in >> kind >> h >> w;
    SCOPED_TRACE(line.substr(0, 80));
    if (kind == "M") {
      std::string bits;
      in >> bits;
      std::vector<uint8_t> mask(bits.size());
      for (size_t i = 0; i < bits.size(); ++i) mask[i] = bits[i] == '1';
      expect_as_pycocotools(rle_encode(mask.data(), h, w), expected);
    } else if (kind == "P") {
      expect_as_pycocotools(rle_from_polygon(read_polygon(in), h, w), expected);
    } else if (kind == "U") {
      int n = 0;
      in >> n;
      std::vector<Rle> parts;
      for (int i = 0; i < n; ++i) parts.push_back(rle_from_polygon(read_polygon(in), h, w));
      expect_as_pycocotools(rle_merge(parts), expected);
    } else {
      ASSERT_EQ(kind, "I");
      int crowd = 0;
      std::string dt, gt;
      in >> crowd >> dt >> gt;
      if (dt == "-") dt.clear();
      if (gt == "-") gt.clear();
      EXPECT_DOUBLE_EQ(rle_iou(rle_from_string(dt, h, w), rle_from_string(gt, h, w), crowd != 0),
                       std::strtod(expected.c_str(), nullptr));
    }
    ++num_cases;
  }
  EXPECT_EQ(num_cases, 80);
}

}  // namespace
}  // namespace orchard::detect
