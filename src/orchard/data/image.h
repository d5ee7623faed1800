// Image decoding and encoding. Decoded images are interleaved RGB uint8, row-major
// [height, width, 3]. JPEG uses libjpeg-turbo (including partial, DCT-scaled decoding of
// a crop window); PNG uses libpng.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orchard::data {

struct Image {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3] RGB
};

struct ImageSize {
  int height = 0;
  int width = 0;
};

// Pixel window in the full-resolution image.
struct CropWindow {
  int y = 0, x = 0, height = 0, width = 0;
};

// Images with more pixels than this are data errors, found from the header before any pixel
// is allocated: a ~100-byte PNG can claim 37837 x 37837 (4.3 GB decoded). 100 megapixels holds
// any real photograph (--max_image_pixels changes it).
constexpr int64_t kDefaultMaxImagePixels = 100'000'000;

enum class ImageFormat { kJpeg, kPng, kUnknown };
ImageFormat sniff_format(const std::string& bytes);

// Reads only the header. Throws DataError mentioning `what` (e.g. "file: record 3"), also for
// an image of more than `max_pixels` pixels.
ImageSize image_size(const std::string& bytes, const std::string& what, int64_t max_pixels = kDefaultMaxImagePixels);

// Decodes a whole JPEG or PNG image to RGB (grayscale and CMYK become RGB).
Image decode_image(const std::string& bytes, const std::string& what, int64_t max_pixels = kDefaultMaxImagePixels);

// Decodes only `crop` of a JPEG (the fused decode-and-crop of tf.image.decode_and_crop_jpeg):
// rows outside the window are skipped and columns cropped at iMCU granularity. When the
// window is at least 2x larger than `min_height` x `min_width`, the DCT scales it down
// by 2, 4 or 8 during decoding, so the result may be smaller than the window but never
// smaller than the minimum. An empty window (height or width <= 0) means the whole image.
// PNG input falls back to decode + crop.
Image decode_crop(const std::string& bytes, CropWindow crop, int min_height, int min_width, const std::string& what,
                  int64_t max_pixels = kDefaultMaxImagePixels);

// Decodes the whole image, letting the JPEG DCT scale it down while both sides stay
// >= min_short_side on the short side (0 = full size).
Image decode_scaled(const std::string& bytes, int min_short_side, const std::string& what,
                    int64_t max_pixels = kDefaultMaxImagePixels);

// The stored sample values of a single-channel PNG (grayscale, or a palette's indices; bit
// depth 8 or less, unpacked but not rescaled; no gamma or palette applied), [height, width]
// row-major: label images such as the Oxford-IIIT Pets' trimaps (1 pet, 2 background, 3 border),
// whose values are classes, not intensities. Another colour type or a 16-bit PNG is a DataError
// naming `what`.
struct LabelImage {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> values;
};
LabelImage decode_png_label_image(const std::string& bytes, const std::string& what,
                                  int64_t max_pixels = kDefaultMaxImagePixels);

std::string encode_jpeg(const Image& image, int quality = 95);
std::string encode_png(const Image& image);
// Grayscale variants for the data tools ([height, width] uint8).
std::string encode_gray_png(const uint8_t* pixels, int height, int width);
std::string encode_gray_jpeg(const uint8_t* pixels, int height, int width, int quality = 95);

}  // namespace orchard::data
