// JPEG/PNG decoding and the image preprocessing built on it (issue 31). The input is an encoded
// image followed by kTrailer bytes that choose a crop window, a minimum size and a random seed
// (make_seed_corpus appends them to its images), so that libFuzzer mutates both. Every entry
// point of data/image.h and the ResNet, pad-crop and OD API (SSD) preprocessing run on it at
// small output sizes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "orchard/core/error.h"
#include "orchard/data/detection.h"
#include "orchard/data/image.h"
#include "orchard/data/preprocess.h"

using orchard::fuzz::expect_clean;

namespace {

using namespace orchard::data;  // NOLINT: every call below is into orchard::data

constexpr size_t kTrailer = 8;

struct Params {
  uint8_t y, x, height, width;  // crop window as fractions (/255) of the image
  int min_size;                 // decode_crop / decode_scaled minimum, 1..64
  bool channels_last;
  bool raw_window;  // the window bytes taken as pixels, unchecked (may lie outside the image)
  uint16_t seed;
};

Params read_params(const uint8_t* t) {
  return {
      t[0], t[1], t[2], t[3], 1 + t[4] % 64, (t[5] & 1) != 0, (t[5] & 2) != 0, static_cast<uint16_t>(t[6] | t[7] << 8)};
}

CropWindow window_in(const ImageSize& size, const Params& p) {
  if (p.raw_window) return {p.y - 16, p.x - 16, p.height, p.width};
  CropWindow c;
  c.y = static_cast<int>(int64_t{size.height} * p.y / 256);
  c.x = static_cast<int>(int64_t{size.width} * p.x / 256);
  c.height = std::max(1, static_cast<int>(int64_t{size.height - c.y} * (p.height + 1) / 256));
  c.width = std::max(1, static_cast<int>(int64_t{size.width - c.x} * (p.width + 1) / 256));
  return c;
}

void check_image(const Image& image) {
  // A decoder that returns must return a whole RGB image.
  if (image.height <= 0 || image.width <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.height) * image.width * 3)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kTrailer) return 0;
  const Params p = read_params(data + size - kTrailer);
  const std::string bytes(reinterpret_cast<const char*>(data), size - kTrailer);
  sniff_format(bytes);

  ImageSize full;
  try {
    full = image_size(bytes, "fuzz");
  } catch (const orchard::Error&) {
    // The decoders must reject what the header reader rejects, cleanly too.
    expect_clean([&] { decode_image(bytes, "fuzz"); });
    return 0;
  }
  const CropWindow window = window_in(full, p);
  std::mt19937_64 rng(p.seed);

  expect_clean([&] { check_image(decode_image(bytes, "fuzz")); });
  expect_clean([&] { check_image(decode_scaled(bytes, p.min_size, "fuzz")); });
  expect_clean([&] { check_image(decode_crop(bytes, window, p.min_size, p.min_size, "fuzz")); });

  // ResNet train (distorted crop around one box, fused decode-and-crop, flip, random erasing) and eval.
  PreprocessOptions resnet;
  resnet.image_size = 32;
  resnet.channels_last = p.channels_last;
  resnet.random_erasing = 0.5f;
  std::vector<float> out(3 * 32 * 32);
  const float fh = full.height > 0 ? static_cast<float>(full.height) : 1.f;
  const float fw = full.width > 0 ? static_cast<float>(full.width) : 1.f;
  const std::vector<Box> boxes = {
      {window.y / fh, window.x / fw, (window.y + window.height) / fh, (window.x + window.width) / fw}};
  expect_clean([&] { preprocess_train(bytes, boxes, resnet, rng, out.data(), "fuzz"); });
  expect_clean([&] { preprocess_eval(bytes, resnet, out.data(), "fuzz"); });

  // Pad-crop (CIFAR-10 recipe), whose resize to S x S runs for any other image size.
  PreprocessOptions pad_crop = resnet;
  pad_crop.augmentation = Augmentation::kPadCrop;
  pad_crop.image_size = 16;
  pad_crop.pad = 1 + p.min_size % 8;
  expect_clean([&] { preprocess_train(bytes, {}, pad_crop, rng, out.data(), "fuzz"); });
  expect_clean([&] { preprocess_eval(bytes, pad_crop, out.data(), "fuzz"); });

  // The OD API's SSD input: flip, ssd_random_crop over the box, fixed_shape_resizer 24 x 32.
  DetectionExample example;
  example.encoded = bytes;
  example.height = full.height;
  example.width = full.width;
  example.boxes = boxes;
  example.classes = {1};
  example.crowd = {(p.seed & 1) != 0};
  DetectionInputOptions detection;
  detection.height = 24;
  detection.width = 32;
  detection.channels_last = p.channels_last;
  detection.max_boxes = 4;
  detection.augmentation.random_horizontal_flip = true;
  detection.augmentation.ssd_random_crop = default_ssd_random_crop();
  std::vector<float> image(3 * 24 * 32), box_out(4 * 4);
  std::vector<int64_t> classes(4), num_boxes(1), image_id(1), original_size(2);
  std::vector<uint8_t> crowd(4);
  DetectionTargets targets{box_out.data(),   classes.data(),  reinterpret_cast<bool*>(crowd.data()),
                           num_boxes.data(), image_id.data(), original_size.data()};
  for (bool training : {true, false})
    expect_clean([&] { preprocess_detection(example, detection, training, rng, image.data(), &targets, "fuzz"); });
  return 0;
}
