#include "orchard/data/preprocess.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>

#include "orchard/core/error.h"

namespace orchard::data {
namespace {

// Follows TensorFlow's GenerateRandomCrop (sample_distorted_bounding_box_op.cc): sample
// a height for the aspect ratio between the min and max area, then a position.
bool random_crop(int width, int height, float min_rel_area, float max_rel_area, float aspect, std::mt19937_64& rng,
                 CropWindow* crop) {
  const float total = static_cast<float>(width) * height;
  const float min_area = min_rel_area * total, max_area = max_rel_area * total;
  int h = static_cast<int>(std::lrint(std::sqrt(min_area / aspect)));
  int max_h = static_cast<int>(std::lrint(std::sqrt(max_area / aspect)));
  if (std::lrint(max_h * aspect) > width) {
    const float kEps = 0.0000001f;
    max_h = static_cast<int>((width + 0.5f - kEps) / aspect);
  }
  max_h = std::min(max_h, height);
  if (h >= max_h) h = max_h;
  if (h < max_h) h += std::uniform_int_distribution<int>(0, max_h - h)(rng);
  int w = static_cast<int>(std::lrint(h * aspect));
  float area = static_cast<float>(w) * h;
  if (area < min_area) {
    h += 1;
    w = static_cast<int>(std::lrint(h * aspect));
    area = static_cast<float>(w) * h;
  }
  if (area < min_area || area > max_area || w > width || h > height || w <= 0 || h <= 0) return false;
  crop->y = std::uniform_int_distribution<int>(0, height - h)(rng);
  crop->x = std::uniform_int_distribution<int>(0, width - w)(rng);
  crop->height = h;
  crop->width = w;
  return true;
}

bool covers(const CropWindow& c, int height, int width, const std::vector<Box>& boxes, float min_covered) {
  if (boxes.empty()) return true;  // the whole image is the box: any crop covers >= min_area of it
  for (const Box& b : boxes) {
    const float by0 = b.ymin * height, bx0 = b.xmin * width, by1 = b.ymax * height, bx1 = b.xmax * width;
    const float barea = (by1 - by0) * (bx1 - bx0);
    if (barea <= 0) continue;
    const float iy = std::min<float>(by1, c.y + c.height) - std::max<float>(by0, c.y);
    const float ix = std::min<float>(bx1, c.x + c.width) - std::max<float>(bx0, c.x);
    if (iy > 0 && ix > 0 && iy * ix / barea >= min_covered) return true;
  }
  return false;
}

}  // namespace

CropWindow sample_distorted_crop(int height, int width, const std::vector<Box>& boxes, const DistortedBoxOptions& o,
                                 std::mt19937_64& rng) {
  std::uniform_real_distribution<float> aspect_dist(o.min_aspect_ratio, o.max_aspect_ratio);
  for (int attempt = 0; attempt < o.max_attempts; ++attempt) {
    CropWindow c;
    if (!random_crop(width, height, o.min_area, o.max_area, aspect_dist(rng), rng, &c)) continue;
    if (covers(c, height, width, boxes, boxes.empty() ? 0.f : o.min_object_covered)) return c;
  }
  return {0, 0, height, width};
}

int eval_resize_min(int image_size) {
  return static_cast<int>(std::lround(static_cast<double>(kResizeMin) * image_size / 224.0));
}

namespace {

// Writes pixel * scale - offset[c] of an RGB matrix (or a view into one), optionally mirrored,
// in the layout asked.
void write_scaled(cv::Mat rgb, bool flip, bool channels_last, float scale, const std::array<float, 3>& offset,
                  float* out) {
  if (flip) {
    cv::Mat mirrored;
    cv::flip(rgb, mirrored, 1);
    rgb = mirrored;
  }
  const int out_h = rgb.rows, out_w = rgb.cols;
  const float m0 = offset[0], m1 = offset[1], m2 = offset[2];
  const size_t plane = static_cast<size_t>(out_h) * out_w;
  for (int y = 0; y < out_h; ++y) {
    const uint8_t* row = rgb.ptr<uint8_t>(y);
    if (channels_last) {
      float* dst = out + static_cast<size_t>(y) * out_w * 3;
      for (int x = 0; x < out_w; ++x) {
        dst[3 * x] = row[3 * x] * scale - m0;
        dst[3 * x + 1] = row[3 * x + 1] * scale - m1;
        dst[3 * x + 2] = row[3 * x + 2] * scale - m2;
      }
    } else {
      float* r = out + static_cast<size_t>(y) * out_w;
      float* g = r + plane;
      float* b = g + plane;
      for (int x = 0; x < out_w; ++x) {
        r[x] = row[3 * x] * scale - m0;
        g[x] = row[3 * x + 1] * scale - m1;
        b[x] = row[3 * x + 2] * scale - m2;
      }
    }
  }
}

void normalize(cv::Mat rgb, bool flip, const PreprocessOptions& o, float* out) {
  write_scaled(rgb, flip, o.channels_last, o.scale, o.offset, out);
}

cv::Mat as_mat(const Image& image) {
  return cv::Mat(image.height, image.width, CV_8UC3, const_cast<uint8_t*>(image.pixels.data()));
}

// The whole image at S x S (resized only when it has another size).
cv::Mat decode_square(const std::string& encoded, int size, int64_t max_pixels, Image* storage,
                      const std::string& what) {
  *storage = decode_image(encoded, what, max_pixels);
  cv::Mat m = as_mat(*storage);
  if (storage->height == size && storage->width == size) return m;
  cv::Mat resized;
  cv::resize(m, resized, cv::Size(size, size), 0, 0, cv::INTER_AREA);
  return resized;
}

void pad_crop_train(const std::string& encoded, const PreprocessOptions& o, std::mt19937_64& rng, float* out,
                    const std::string& what) {
  Image storage;
  cv::Mat padded;
  cv::copyMakeBorder(decode_square(encoded, o.image_size, o.max_image_pixels, &storage, what), padded, o.pad, o.pad,
                     o.pad, o.pad, cv::BORDER_CONSTANT, cv::Scalar(0, 0, 0));
  std::uniform_int_distribution<int> offset(0, 2 * o.pad);
  const int y = offset(rng), x = offset(rng);
  const bool flip = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  normalize(padded(cv::Rect(x, y, o.image_size, o.image_size)), flip, o, out);
}

void resnet_train(const std::string& encoded, const std::vector<Box>& boxes, const PreprocessOptions& options,
                  std::mt19937_64& rng, float* out, const std::string& what) {
  const ImageSize size = image_size(encoded, what, options.max_image_pixels);
  const CropWindow crop = sample_distorted_crop(size.height, size.width, boxes, options.crop, rng);
  const bool flip = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  const Image img = decode_crop(encoded, crop, options.image_size, options.image_size, what, options.max_image_pixels);
  resize_scale(img, options.image_size, options.image_size, flip, options.channels_last, options.scale, options.offset,
               out);
}

}  // namespace

void resize_normalize(const Image& image, int out_h, int out_w, bool flip, bool channels_last, float* out) {
  resize_scale(image, out_h, out_w, flip, channels_last, 1.0f, kChannelMeans, out);
}

void resize_scale(const Image& image, int out_h, int out_w, bool flip, bool channels_last, float scale,
                  const std::array<float, 3>& offset, float* out) {
  cv::Mat resized = as_mat(image);
  if (image.height != out_h || image.width != out_w)
    cv::resize(as_mat(image), resized, cv::Size(out_w, out_h), 0, 0, cv::INTER_LINEAR);
  write_scaled(resized, flip, channels_last, scale, offset, out);
}

Augmentation parse_augmentation(const std::string& name) {
  if (name == "resnet") return Augmentation::kResNet;
  if (name == "pad_crop") return Augmentation::kPadCrop;
  throw Error("unknown augmentation '" + name + "' (resnet | pad_crop)");
}

std::string augmentation_name(Augmentation a) { return a == Augmentation::kPadCrop ? "pad_crop" : "resnet"; }

Rect random_erase(float probability, int size, bool channels_last, std::mt19937_64& rng, float* out) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  if (probability <= 0 || unit(rng) >= probability) return {};
  // torchvision's RandomErasing.get_params: up to 10 draws of area and log-uniform aspect ratio.
  const double area = static_cast<double>(size) * size;
  std::uniform_real_distribution<double> area_fraction(0.02, 0.33);
  std::uniform_real_distribution<double> log_ratio(std::log(0.3), std::log(3.3));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * area_fraction(rng), ratio = std::exp(log_ratio(rng));
    const int h = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const int w = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (h < 1 || w < 1 || h >= size || w >= size) continue;
    Rect r{std::uniform_int_distribution<int>(0, size - h)(rng), std::uniform_int_distribution<int>(0, size - w)(rng),
           h, w};
    const size_t plane = static_cast<size_t>(size) * size;
    for (int y = r.y; y < r.y + h; ++y) {
      if (channels_last) {
        std::fill_n(out + (static_cast<size_t>(y) * size + r.x) * 3, static_cast<size_t>(w) * 3, 0.0f);
      } else {
        for (int c = 0; c < 3; ++c) std::fill_n(out + c * plane + static_cast<size_t>(y) * size + r.x, w, 0.0f);
      }
    }
    return r;
  }
  return {};
}

void preprocess_train(const std::string& encoded, const std::vector<Box>& boxes, const PreprocessOptions& options,
                      std::mt19937_64& rng, float* out, const std::string& what) {
  if (options.augmentation == Augmentation::kPadCrop) {
    pad_crop_train(encoded, options, rng, out, what);
  } else {
    resnet_train(encoded, boxes, options, rng, out, what);
  }
  random_erase(options.random_erasing, options.image_size, options.channels_last, rng, out);
}

void preprocess_eval(const std::string& encoded, const PreprocessOptions& options, float* out,
                     const std::string& what) {
  if (options.augmentation == Augmentation::kPadCrop) {
    Image storage;
    return normalize(decode_square(encoded, options.image_size, options.max_image_pixels, &storage, what), false,
                     options, out);
  }
  const int resize_min = eval_resize_min(options.image_size);
  const Image img = decode_scaled(encoded, resize_min, what, options.max_image_pixels);
  // Aspect-preserving resize so the short side is resize_min, then a central crop.
  const double scale = static_cast<double>(resize_min) / std::min(img.height, img.width);
  const int new_h = std::max(options.image_size, static_cast<int>(std::lround(img.height * scale)));
  const int new_w = std::max(options.image_size, static_cast<int>(std::lround(img.width * scale)));
  cv::Mat resized;
  cv::resize(as_mat(img), resized, cv::Size(new_w, new_h), 0, 0, cv::INTER_LINEAR);
  const int top = (new_h - options.image_size) / 2, left = (new_w - options.image_size) / 2;
  normalize(resized(cv::Rect(left, top, options.image_size, options.image_size)), false, options, out);
}

}  // namespace orchard::data
