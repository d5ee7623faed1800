// The TF OD API's anchor generators: SSD's create_ssd_anchors + MultipleGridAnchorGenerator
// (anchor_generators/multiple_grid_anchor_generator.py, grid_anchor_generator.tile_anchors),
// configured as an ssd_anchor_generator { ... } block of pipeline.config; the RetinaNet/FPN
// configs' multiscale_anchor_generator; and Faster R-CNN's grid_anchor_generator.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace orchard::detect {

struct SsdAnchorOptions {
  int num_layers = 6;
  float min_scale = 0.2f;
  float max_scale = 0.95f;
  // One scale per layer; empty: min_scale + (max_scale - min_scale) * i / (num_layers - 1).
  std::vector<float> scales;
  std::vector<float> aspect_ratios{1.0f, 2.0f, 0.5f, 3.0f, 0.3333f};
  // > 0: one more anchor per location of scale sqrt(s_i * s_{i+1}) (s_{num_layers} = 1) and
  // this aspect ratio.
  float interpolated_scale_aspect_ratio = 1.0f;
  float base_anchor_height = 1.0f;
  float base_anchor_width = 1.0f;
  // Per layer, in input-image pixels; empty: stride 1 / grid size and offset half a stride.
  std::vector<int> height_stride, width_stride, height_offset, width_offset;
  // The first layer gets only (0.1, 1.0), (s_0, 2.0), (s_0, 0.5).
  bool reduce_boxes_in_lowest_layer = true;
};

// One anchor shape: height = scale / sqrt(aspect_ratio) * base height, width =
// scale * sqrt(aspect_ratio) * base width (aspect ratio = width / height).
struct AnchorSpec {
  double scale = 0;
  double aspect_ratio = 0;
};

// The anchor shapes of each layer, in the order of the anchors at one grid cell. Throws
// orchard::Error on inconsistent options.
std::vector<std::vector<AnchorSpec>> ssd_anchor_specs(const SsdAnchorOptions& options);

// Anchors per grid cell of each layer: {3, 6, 6, 6, 6, 6} for the defaults.
std::vector<int64_t> anchors_per_location(const SsdAnchorOptions& options);

// All anchors, [num_anchors, 4] float32 (ymin, xmin, ymax, xmax) normalised, on the CPU,
// for feature maps of the given (height, width), one per layer, of an image_height x
// image_width input. Base sizes are scaled by min(H, W) / H and min(H, W) / W so that an
// aspect ratio 1 anchor is square in pixels; no clip window (create_ssd_anchors sets none),
// so anchors may extend past the image.
// Order: layer by layer; within a layer row-major over grid cells (y, then x); within a
// cell the layer's anchor specs in order. This is the order of a box predictor head whose
// NCHW output [B, A * 4, H, W] is permuted to NHWC and reshaped to [B, H * W * A, 4].
at::Tensor generate_ssd_anchors(const SsdAnchorOptions& options,
                                const std::vector<std::pair<int64_t, int64_t>>& feature_map_sizes, int64_t image_height,
                                int64_t image_width);

// The OD API's multiscale_anchor_generator (MultiscaleGridAnchorGenerator, the RetinaNet/FPN
// configs): per level l in [min_level, max_level] a grid of stride 2^l, anchors of base size
// 2^l * anchor_scale pixels, scales 2^(i / scales_per_octave) (i < scales_per_octave) and the
// aspect ratios.
struct MultiscaleAnchorOptions {
  int min_level = 3;
  int max_level = 7;
  float anchor_scale = 4.0f;
  std::vector<float> aspect_ratios{1.0f, 2.0f, 0.5f};
  int scales_per_octave = 2;
  bool normalize_coordinates = true;
};

// aspect_ratios x scales_per_octave.
int64_t anchors_per_location(const MultiscaleAnchorOptions& options);

// All anchors, [num_anchors, 4] float32 (ymin, xmin, ymax, xmax), for one feature map per level
// (min_level first) of an image_height x image_width input; normalised by the image size
// (normalize_coordinates) or in pixels. A level's anchor centres are offset by half its stride
// when the image side is a multiple of the stride, else 0, as the OD API does. Within a cell
// the anchors go aspect ratio by aspect ratio, the scales within each (ops.meshgrid's order);
// cells and levels as generate_ssd_anchors. Throws orchard::Error on inconsistent options.
at::Tensor generate_multiscale_anchors(const MultiscaleAnchorOptions& options,
                                       const std::vector<std::pair<int64_t, int64_t>>& feature_map_sizes,
                                       int64_t image_height, int64_t image_width);

// Faster R-CNN's first-stage anchors: grid_anchor_generator { ... } (GridAnchorGenerator,
// anchor_generators/grid_anchor_generator.py) in pixels of the input.
struct GridAnchorOptions {
  float base_height = 256.0f, base_width = 256.0f;  // height, width
  float stride_height = 16.0f, stride_width = 16.0f;
  float offset_height = 0.0f, offset_width = 0.0f;
  std::vector<float> scales{0.5f, 1.0f, 2.0f};         // the proto's lists (the configs give them)
  std::vector<float> aspect_ratios{0.5f, 1.0f, 2.0f};  // width / height
};

// scales x aspect_ratios.
int64_t anchors_per_location(const GridAnchorOptions& options);

// All anchors of a grid_height x grid_width feature map, [H * W * A, 4] float32 (ymin, xmin, ymax,
// xmax) in input pixels, unclipped: cell (i, j) centred at (i * stride_height + offset_height,
// j * stride_width + offset_width) (the first at the origin by default, no half-stride shift);
// within a cell aspect ratio by aspect ratio, the scales within each (ops.meshgrid's order);
// height scale / sqrt(ratio) * base_height, width scale * sqrt(ratio) * base_width. Cells
// row-major, as the NHWC reshape of the RPN's outputs.
at::Tensor generate_grid_anchors(const GridAnchorOptions& options, int64_t grid_height, int64_t grid_width);

}  // namespace orchard::detect
