#include "orchard/data/image.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include "core/test_util.h"
#include "orchard/core/error.h"

namespace orchard::data {
namespace {

Image make_image(int h, int w) {
  Image im;
  im.height = h;
  im.width = w;
  im.pixels.resize(static_cast<size_t>(h) * w * 3);
  return im;
}

uint8_t* px(Image& im, int y, int x) { return im.pixels.data() + (static_cast<size_t>(y) * im.width + x) * 3; }
const uint8_t* px(const Image& im, int y, int x) {
  return im.pixels.data() + (static_cast<size_t>(y) * im.width + x) * 3;
}

// Smooth in every channel, so JPEG reproduces it closely.
Image gradient(int h, int w) {
  Image im = make_image(h, w);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = px(im, y, x);
      p[0] = static_cast<uint8_t>(255 * x / (w - 1));
      p[1] = static_cast<uint8_t>(255 * y / (h - 1));
      p[2] = static_cast<uint8_t>(128 + 100 * std::sin(x * 0.1) * std::cos(y * 0.13));
    }
  return im;
}

Image noise(int h, int w, uint64_t seed) {
  Image im = make_image(h, w);
  const std::string r = test::random_bytes(im.pixels.size(), seed);
  std::copy(r.begin(), r.end(), im.pixels.begin());
  return im;
}

Image crop(const Image& in, CropWindow c) {
  Image out = make_image(c.height, c.width);
  for (int y = 0; y < c.height; ++y)
    for (int x = 0; x < c.width; ++x)
      for (int k = 0; k < 3; ++k) px(out, y, x)[k] = px(in, c.y + y, c.x + x)[k];
  return out;
}

double mean_abs_diff(const Image& a, const Image& b) {
  EXPECT_EQ(a.height, b.height);
  EXPECT_EQ(a.width, b.width);
  if (a.pixels.size() != b.pixels.size() || a.pixels.empty()) return 1e9;
  double s = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
  return s / static_cast<double>(a.pixels.size());
}

int max_abs_diff(const Image& a, const Image& b) {
  if (a.pixels.size() != b.pixels.size()) return 1 << 20;
  int m = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) m = std::max(m, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return m;
}

// Averages f x f blocks (what a 1/f DCT-scaled decode approximates).
Image box_downscale(const Image& in, int f) {
  Image out = make_image(in.height / f, in.width / f);
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x)
      for (int k = 0; k < 3; ++k) {
        int s = 0;
        for (int dy = 0; dy < f; ++dy)
          for (int dx = 0; dx < f; ++dx) s += px(in, y * f + dy, x * f + dx)[k];
        px(out, y, x)[k] = static_cast<uint8_t>((s + f * f / 2) / (f * f));
      }
  return out;
}

using test::expect_data_error;

const std::string kWhat = "shard-3: record 9";

TEST(Image, PngRoundTripIsExact) {
  const Image im = noise(23, 37, 1);
  const std::string png = encode_png(im);
  EXPECT_EQ(sniff_format(png), ImageFormat::kPng);
  const ImageSize size = image_size(png, kWhat);
  EXPECT_EQ(size.height, 23);
  EXPECT_EQ(size.width, 37);
  const Image back = decode_image(png, kWhat);
  EXPECT_EQ(back.height, 23);
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.pixels, im.pixels);
}

TEST(Image, JpegRoundTripIsClose) {
  const Image im = gradient(48, 64);
  const std::string jpg = encode_jpeg(im, 95);
  EXPECT_EQ(sniff_format(jpg), ImageFormat::kJpeg);
  const ImageSize size = image_size(jpg, kWhat);
  EXPECT_EQ(size.height, 48);
  EXPECT_EQ(size.width, 64);
  const Image back = decode_image(jpg, kWhat);
  EXPECT_LT(mean_abs_diff(back, im), 3.0);
}

TEST(Image, GrayscalePngDecodesToEqualChannels) {
  std::vector<uint8_t> gray(20 * 30);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 7);
  const Image im = decode_image(encode_gray_png(gray.data(), 20, 30), kWhat);
  ASSERT_EQ(im.height, 20);
  ASSERT_EQ(im.width, 30);
  for (size_t i = 0; i < gray.size(); ++i) {
    ASSERT_EQ(im.pixels[3 * i], gray[i]) << i;
    ASSERT_EQ(im.pixels[3 * i + 1], gray[i]) << i;
    ASSERT_EQ(im.pixels[3 * i + 2], gray[i]) << i;
  }
}

TEST(Image, GrayscaleJpegDecodesToEqualChannels) {
  std::vector<uint8_t> gray(24 * 32);
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 32; ++x) gray[static_cast<size_t>(y) * 32 + x] = static_cast<uint8_t>(4 * x + 2 * y);
  const Image im = decode_image(encode_gray_jpeg(gray.data(), 24, 32, 95), kWhat);
  ASSERT_EQ(im.height, 24);
  ASSERT_EQ(im.width, 32);
  double err = 0;
  for (size_t i = 0; i < gray.size(); ++i) {
    ASSERT_EQ(im.pixels[3 * i], im.pixels[3 * i + 1]);
    ASSERT_EQ(im.pixels[3 * i], im.pixels[3 * i + 2]);
    err += std::abs(int(im.pixels[3 * i]) - int(gray[i]));
  }
  EXPECT_LT(err / static_cast<double>(gray.size()), 3.0);
}

TEST(Image, DecodeCropJpegMatchesFullDecodeThenCrop) {
  // libjpeg-turbo's partial decode equals the full decode except that 4:2:0 "fancy"
  // chroma upsampling treats the left/right edges of the decoded region as image edges
  // (libjpeg.txt, "Decompressing partial scanlines"). So: interior columns must match
  // exactly even for a harsh texture, and edge columns closely for a smooth image.
  Image textured = gradient(80, 96);
  for (int y = 0; y < 80; ++y)
    for (int x = 0; x < 96; ++x) px(textured, y, x)[2] = static_cast<uint8_t>((x * 37 + y * 11) % 256);
  const std::string textured_jpg = encode_jpeg(textured, 95);
  const std::string smooth_jpg = encode_jpeg(gradient(80, 96), 95);
  const Image textured_full = decode_image(textured_jpg, kWhat);
  const Image smooth_full = decode_image(smooth_jpg, kWhat);
  const CropWindow windows[] = {
      {0, 0, 80, 96},    // everything
      {13, 21, 30, 41},  // nothing aligned
      {16, 32, 16, 16},  // iMCU aligned
      {75, 89, 5, 7},    // bottom-right corner
      {0, 95, 80, 1},    // last column
      {40, 3, 1, 90},    // one row
      {13, 0, 30, 96},   // full rows
      {1, 1, 1, 1},
  };
  for (const CropWindow& w : windows) {
    SCOPED_TRACE(::testing::Message() << "window y=" << w.y << " x=" << w.x << " h=" << w.height << " w=" << w.width);
    // A minimum equal to the window rules out DCT scaling.
    const Image got = decode_crop(textured_jpg, w, w.height, w.width, kWhat);
    ASSERT_EQ(got.height, w.height);
    ASSERT_EQ(got.width, w.width);
    const Image want = crop(textured_full, w);
    for (int y = 0; y < w.height; ++y)
      for (int x = 1; x + 1 < w.width; ++x)
        for (int k = 0; k < 3; ++k)
          ASSERT_EQ(px(got, y, x)[k], px(want, y, x)[k]) << "y " << y << " x " << x << " channel " << k;

    const Image smooth = decode_crop(smooth_jpg, w, w.height, w.width, kWhat);
    EXPECT_LE(max_abs_diff(smooth, crop(smooth_full, w)), 8);
  }
  // Whole rows have no partial-width edges: exact.
  EXPECT_EQ(decode_crop(textured_jpg, {13, 0, 30, 96}, 30, 96, kWhat).pixels,
            crop(textured_full, {13, 0, 30, 96}).pixels);
}

TEST(Image, DecodeCropPngIsExact) {
  const Image im = noise(40, 50, 2);
  const std::string png = encode_png(im);
  const CropWindow w{7, 11, 20, 13};
  const Image got = decode_crop(png, w, 1, 1, kWhat);
  EXPECT_EQ(got.pixels, crop(im, w).pixels);
  EXPECT_EQ(got.height, 20);
  EXPECT_EQ(got.width, 13);
}

TEST(Image, DecodeCropScalesDownWhenTheWindowIsMuchLargerThanNeeded) {
  const Image im = gradient(128, 160);
  const std::string jpg = encode_jpeg(im, 95);
  const Image full = decode_image(jpg, kWhat);

  // Whole image, minimum 20x20: 1/4 gives 32x40 (1/8 would be 16x20 < 20).
  const Image quarter = decode_crop(jpg, {0, 0, 128, 160}, 20, 20, kWhat);
  EXPECT_EQ(quarter.height, 32);
  EXPECT_EQ(quarter.width, 40);
  EXPECT_LT(mean_abs_diff(quarter, box_downscale(full, 4)), 4.0);

  // An offset window: 64x64 at (32, 64), minimum 30 -> 1/2 -> 32x32 of the right region.
  const CropWindow w{32, 64, 64, 64};
  const Image half = decode_crop(jpg, w, 30, 30, kWhat);
  EXPECT_GE(half.height, 30);
  EXPECT_GE(half.width, 30);
  EXPECT_LT(half.height, 64);
  EXPECT_LT(half.width, 64);
  const Image want = box_downscale(crop(full, w), 2);
  // Compare the common area (rounding may add a row or column).
  Image common = make_image(std::min(half.height, want.height), std::min(half.width, want.width));
  Image want_common = common;
  for (int y = 0; y < common.height; ++y)
    for (int x = 0; x < common.width; ++x)
      for (int k = 0; k < 3; ++k) {
        px(common, y, x)[k] = px(half, y, x)[k];
        px(want_common, y, x)[k] = px(want, y, x)[k];
      }
  EXPECT_LT(mean_abs_diff(common, want_common), 4.0);
}

TEST(Image, DecodeScaledKeepsTheShortSideAboveTheMinimum) {
  const std::string jpg = encode_jpeg(gradient(96, 128), 90);
  const Image s = decode_scaled(jpg, 40, kWhat);  // 1/2: 48x64; 1/4 would be 24 < 40
  EXPECT_EQ(s.height, 48);
  EXPECT_EQ(s.width, 64);
  const Image f = decode_scaled(jpg, 0, kWhat);
  EXPECT_EQ(f.height, 96);
  EXPECT_EQ(f.width, 128);
}

TEST(Image, CropWindowOutsideTheImageIsADataError) {
  const std::string jpg = encode_jpeg(gradient(16, 16), 90);
  expect_data_error([&] { decode_crop(jpg, {8, 8, 16, 16}, 1, 1, kWhat); }, {kWhat});
  const std::string png = encode_png(gradient(16, 16));
  expect_data_error([&] { decode_crop(png, {0, 10, 4, 8}, 1, 1, kWhat); }, {kWhat});
}

TEST(Image, TruncatedJpegIsADataError) {
  const std::string jpg = encode_jpeg(noise(64, 64, 3), 90);
  const std::string cut = jpg.substr(0, jpg.size() / 2);
  expect_data_error([&] { decode_image(cut, kWhat); }, {kWhat});
  expect_data_error([&] { decode_crop(cut, {40, 40, 20, 20}, 20, 20, kWhat); }, {kWhat});
  // Header only: the size is readable, the pixels are not.
  const std::string header_only = jpg.substr(0, 700);
  expect_data_error([&] { decode_image(header_only, kWhat); }, {kWhat});
}

TEST(Image, TruncatedPngIsADataError) {
  const std::string png = encode_png(noise(32, 32, 4));
  expect_data_error([&] { decode_image(png.substr(0, png.size() / 2), kWhat); }, {kWhat});
}

TEST(Image, RandomBytesAreADataErrorNamingWhat) {
  const std::string junk = test::random_bytes(500, 5);
  EXPECT_EQ(sniff_format(junk), ImageFormat::kUnknown);
  expect_data_error([&] { decode_image(junk, kWhat); }, {kWhat, "not a JPEG or PNG"});
  expect_data_error([&] { image_size(junk, kWhat); }, {kWhat});
  expect_data_error([&] { decode_crop(junk, {0, 0, 1, 1}, 1, 1, kWhat); }, {kWhat});
  // Right magic bytes, garbage after.
  expect_data_error([&] { decode_image("\xff\xd8\xff" + junk, kWhat); }, {kWhat});
  expect_data_error([&] { image_size("\xff\xd8\xff" + junk, kWhat); }, {kWhat});
  expect_data_error([&] { decode_image(std::string("\x89PNG\r\n\x1a\n", 8) + junk, kWhat); }, {kWhat});
  expect_data_error([&] { decode_image("", kWhat); }, {kWhat});
}

// Writes a 4-component CMYK JPEG with libjpeg. `adobe` writes the Adobe APP14 marker,
// in which case (as Photoshop does) the stored values are inverted: 255 - ink.
std::string encode_cmyk_jpeg(const std::vector<uint8_t>& ink, int h, int w, bool adobe) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr jerr{};
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, JCS_CMYK);
  cinfo.write_Adobe_marker = adobe ? TRUE : FALSE;
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(w) * 4);
  while (cinfo.next_scanline < cinfo.image_height) {
    const uint8_t* src = ink.data() + static_cast<size_t>(cinfo.next_scanline) * w * 4;
    for (size_t i = 0; i < row.size(); ++i) row[i] = adobe ? static_cast<uint8_t>(255 - src[i]) : src[i];
    JSAMPROW rp = row.data();
    jpeg_write_scanlines(&cinfo, &rp, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buf), size);
  jpeg_destroy_compress(&cinfo);
  std::free(buf);
  return out;
}

// A small valid image whose header is rewritten to claim width x height: JPEG's SOF0 size
// fields, or PNG's IHDR with its CRC recomputed (libpng checks it).
std::string claiming(std::string bytes, uint32_t width, uint32_t height) {
  auto put16 = [&](size_t at, uint32_t v) {
    bytes[at] = static_cast<char>(v >> 8);
    bytes[at + 1] = static_cast<char>(v & 0xff);
  };
  if (sniff_format(bytes) == ImageFormat::kJpeg) {
    const size_t sof = bytes.find("\xff\xc0");
    EXPECT_NE(sof, std::string::npos);
    put16(sof + 5, height);
    put16(sof + 7, width);
    return bytes;
  }
  for (int i = 0; i < 4; ++i) {
    bytes[16 + i] = static_cast<char>((width >> (24 - 8 * i)) & 0xff);
    bytes[20 + i] = static_cast<char>((height >> (24 - 8 * i)) & 0xff);
  }
  const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + 12), 17));
  for (int i = 0; i < 4; ++i) bytes[29 + i] = static_cast<char>((crc >> (24 - 8 * i)) & 0xff);
  return bytes;
}

long peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// A ~100-byte PNG claiming 37837x37837 allocated 4.3 GB; a JPEG claiming 65500x65500 ended in
// std::bad_alloc. Both are data errors naming the image and its size, before any allocation.
TEST(Image, HeadersClaimingHugeImagesAreDataErrorsBeforeAllocation) {
  const long rss_before = peak_rss_mib();
  const std::string png = claiming(encode_png(gradient(8, 8)), 37837, 37837);
  const std::string jpeg = claiming(encode_jpeg(gradient(16, 16)), 65500, 65500);
  for (const auto& claim : {std::tuple{"png", png, "37837x37837"}, {"jpeg", jpeg, "65500x65500"}}) {
    // Named copies, not a structured binding: clang 14 (the sanitizer build) cannot capture one.
    const std::string name = std::get<0>(claim), bytes = std::get<1>(claim), size = std::get<2>(claim);
    SCOPED_TRACE(name);
    EXPECT_EQ(image_size(bytes, "x", int64_t{1} << 40).width, std::stoi(size));  // the header is read as written
    test::expect_data_error([&] { image_size(bytes, "f.tfrecord: record 7"); },
                            {"f.tfrecord: record 7", size, "--max_image_pixels"});
    test::expect_data_error([&] { decode_image(bytes, "f.tfrecord: record 7"); },
                            {"f.tfrecord: record 7", size, "--max_image_pixels"});
    test::expect_data_error([&] { decode_scaled(bytes, 32, "w"); }, {"w", size});
    test::expect_data_error([&] { decode_crop(bytes, {0, 0, 16, 16}, 8, 8, "w"); }, {"w", size});
  }
  // Under the pixel limit but more than a 100-byte PNG can hold (deflate expands at most 1032x).
  test::expect_data_error([&] { decode_image(claiming(encode_png(gradient(8, 8)), 20000, 4000), "p"); },
                          {"p", "20000x4000", "can hold"});
  EXPECT_LT(peak_rss_mib() - rss_before, 200) << "a claimed size was allocated";
}

TEST(Image, ThePixelLimitIsAnOption) {
  const std::string jpeg = encode_jpeg(gradient(40, 30));
  EXPECT_EQ(decode_image(jpeg, "x", 1200).width, 30);
  test::expect_data_error([&] { decode_image(jpeg, "x", 1199); }, {"30x40", "1200 pixels", "limit of 1199"});
  test::expect_data_error([&] { image_size(encode_png(gradient(40, 30)), "x", 1000); }, {"30x40"});
}

TEST(Image, CmykJpegDecodesToRgb) {
  // Four 16x16 quadrants of ink (C, M, Y, K) and the RGB they print as
  // (R = (255 - C)(255 - K) / 255, and so on).
  struct Quadrant {
    uint8_t cmyk[4];
    uint8_t rgb[3];
  } q[4] = {
      {{0, 255, 255, 0}, {255, 0, 0}},    // red
      {{255, 0, 255, 0}, {0, 255, 0}},    // green
      {{0, 0, 0, 0}, {255, 255, 255}},    // paper white
      {{0, 0, 0, 128}, {127, 127, 127}},  // half black
  };
  const int h = 32, w = 32;
  std::vector<uint8_t> ink(static_cast<size_t>(h) * w * 4);
  auto quadrant = [](int y, int x) { return (y / 16) * 2 + x / 16; };
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < 4; ++k) ink[(static_cast<size_t>(y) * w + x) * 4 + k] = q[quadrant(y, x)].cmyk[k];

  for (bool adobe : {true, false}) {
    SCOPED_TRACE(adobe ? "Adobe (inverted) CMYK" : "plain CMYK");
    const std::string jpg = encode_cmyk_jpeg(ink, h, w, adobe);
    const Image im = decode_image(jpg, kWhat);
    ASSERT_EQ(im.height, h);
    ASSERT_EQ(im.width, w);
    for (int y : {4, 11, 20, 27})
      for (int x : {4, 11, 20, 27})
        for (int k = 0; k < 3; ++k)
          EXPECT_NEAR(px(im, y, x)[k], q[quadrant(y, x)].rgb[k], 8) << "y " << y << " x " << x << " channel " << k;
    // The fused crop path converts CMYK too.
    const Image c = decode_crop(jpg, {16, 0, 16, 16}, 16, 16, kWhat);
    ASSERT_EQ(c.height, 16);
    EXPECT_NEAR(px(c, 8, 8)[0], 255, 8);
    EXPECT_NEAR(px(c, 8, 8)[1], 255, 8);
  }
}

}  // namespace
}  // namespace orchard::data
