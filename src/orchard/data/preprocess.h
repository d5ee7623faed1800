// "ResNet preprocessing" (TF Models official/legacy/image_classification/resnet/
// imagenet_preprocessing.py), written into a caller-owned float buffer.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "orchard/data/image.h"

namespace orchard::data {

// Normalised box [ymin, xmin, ymax, xmax] in [0, 1].
struct Box {
  float ymin = 0, xmin = 0, ymax = 1, xmax = 1;
};

struct DistortedBoxOptions {
  float min_object_covered = 0.1f;
  float min_aspect_ratio = 0.75f, max_aspect_ratio = 1.33f;
  float min_area = 0.05f, max_area = 1.0f;
  int max_attempts = 100;
};

// tf.image.sample_distorted_bounding_box: a random crop whose area fraction and aspect ratio
// lie in the ranges and that covers at least min_object_covered of one of `boxes` (the whole
// image when `boxes` is empty). After max_attempts failures, returns the whole image.
CropWindow sample_distorted_crop(int height, int width, const std::vector<Box>& boxes,
                                 const DistortedBoxOptions& options, std::mt19937_64& rng);

constexpr std::array<float, 3> kChannelMeans = {123.68f, 116.78f, 103.94f};
constexpr int kResizeMin = 256;  // eval short side for 224 outputs

// kResNet: the ImageNet recipe below. kPadCrop: TF Models' CIFAR-10 recipe (resnet/
// cifar10_main.py) for small images: train pads `pad` black pixels on each side, takes a
// random S x S crop and flips; eval uses the whole image. Both resize to S x S first when the
// image has another size.
enum class Augmentation { kResNet, kPadCrop };
Augmentation parse_augmentation(const std::string& name);  // "resnet" | "pad_crop"
std::string augmentation_name(Augmentation a);

struct PreprocessOptions {
  int image_size = 224;
  bool channels_last = false;  // false: out is [3, S, S]; true: [S, S, 3]
  Augmentation augmentation = Augmentation::kResNet;
  DistortedBoxOptions crop;  // kResNet
  int pad = 4;               // kPadCrop
  // Random erasing (Zhong et al. 2017; torchvision.transforms.RandomErasing defaults): after the
  // augmentation above, with this probability one rectangle of 2-33% of the area and aspect ratio
  // in [0.3, 3.3] is set to 0, i.e. the mean pixel. Training only; 0 draws nothing.
  float random_erasing = 0.0f;
  // Output pixel * scale - offset[c]: RGB minus the ImageNet means (the ResNets) by default;
  // 2/255 and 1 for Inception's [-1, 1] (see kInceptionScale).
  float scale = 1.0f;
  std::array<float, 3> offset = kChannelMeans;
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // larger images are data errors (image.h)
};
constexpr float kInceptionScale = 2.0f / 255.0f;
constexpr std::array<float, 3> kInceptionOffset = {1.0f, 1.0f, 1.0f};

// Train path (kResNet): distorted crop (fused JPEG decode-and-crop), random horizontal flip,
// bilinear resize to image_size x image_size, scaled (options.scale, options.offset). `out` holds
// 3 * S * S floats.
void preprocess_train(const std::string& encoded, const std::vector<Box>& boxes, const PreprocessOptions& options,
                      std::mt19937_64& rng, float* out, const std::string& what);

// Random erasing on a preprocessed [3, S, S] / [S, S, 3] image in place (see
// PreprocessOptions::random_erasing). Returns the erased rectangle, empty when nothing was erased.
struct Rect {
  int y = 0, x = 0, height = 0, width = 0;
};
Rect random_erase(float probability, int size, bool channels_last, std::mt19937_64& rng, float* out);

// Eval path (kResNet): aspect-preserving resize of the short side to 256 * S / 224, central
// crop S x S, scaled as in training.
void preprocess_eval(const std::string& encoded, const PreprocessOptions& options, float* out, const std::string& what);

// Eval geometry for tests: the (scaled) short side, then the centred crop offsets.
int eval_resize_min(int image_size);

// Resizes an RGB image bilinearly, then writes (pixel - mean) in the requested layout.
void resize_normalize(const Image& image, int out_h, int out_w, bool flip, bool channels_last, float* out);
// The same with pixel * scale - offset[c] (e.g. 2/255 and 1 for the [-1, 1] of MobileNets).
void resize_scale(const Image& image, int out_h, int out_w, bool flip, bool channels_last, float scale,
                  const std::array<float, 3>& offset, float* out);

}  // namespace orchard::data
