// tf.image.crop_and_resize (bilinear), the op the OD API's two-stage detectors crop their
// proposals with (Faster R-CNN's initial_crop_size, Mask R-CNN's mask targets), on libtorch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace orchard::detect {

// Crops of `image` [B, C, H, W] at `boxes` [N, 4] (y1, x1, y2, x2, normalised; y1 > y2 or
// x1 > x2 flips the crop) of the images `box_indices` [N] (int64 in [0, B)), each resized to
// crop_height x crop_width -> [N, C, crop_height, crop_width], as TensorFlow samples them:
// row i of a box lies at y = y1 (H - 1) + i (y2 - y1)(H - 1) / (crop_height - 1), or at its centre
// 0.5 (y1 + y2)(H - 1) when crop_height is 1 (columns alike); a sample whose y is outside
// [0, H - 1] or whose x is outside [0, W - 1] is extrapolation_value, the others bilinear.
// Differentiable with respect to `image`; the boxes get no gradient (the OD API stops it).
at::Tensor crop_and_resize(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& box_indices,
                           int64_t crop_height, int64_t crop_width, float extrapolation_value = 0.0f);

}  // namespace orchard::detect
