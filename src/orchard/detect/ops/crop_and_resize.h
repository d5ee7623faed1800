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
// On the CPU a kernel of its own (channel vectors of a channels-last copy of the image; the crops
// come back channels-last; float or double, other types computed in float); on other devices
// crop_and_resize_grid_sample.
at::Tensor crop_and_resize(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& box_indices,
                           int64_t crop_height, int64_t crop_width, float extrapolation_value = 0.0f);

// The same crops from libtorch's grid_sample (align_corners: TF's sample positions) with the
// extrapolation value set where TF sets it, for any device; its autograd gives the gradient.
at::Tensor crop_and_resize_grid_sample(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& box_indices,
                                       int64_t crop_height, int64_t crop_width, float extrapolation_value = 0.0f);

// R-FCN's ops.position_sensitive_crop_regions with global_pool: the channels of `features`
// [B, bins_h * bins_w * C, H, W] are bins_h * bins_w contiguous groups of C (group g = by * bins_w +
// bx); bin (by, bx) of each box [M, 4] (normalised) is its (by, bx) cell of a bins_h x bins_w grid,
// cropped from group g only to (crop_height / bins_h) x (crop_width / bins_w) samples
// (crop_and_resize's); each bin's samples are averaged, then the bins -> [M, C]. crop_height and
// crop_width must be multiples of the bins (the OD API's check).
at::Tensor position_sensitive_crop_regions(const at::Tensor& features, const at::Tensor& boxes,
                                           const at::Tensor& box_indices, int64_t crop_height, int64_t crop_width,
                                           int64_t bins_height, int64_t bins_width);

}  // namespace orchard::detect
