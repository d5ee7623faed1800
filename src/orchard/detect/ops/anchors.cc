#include "orchard/detect/ops/anchors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

void check_per_layer(const std::vector<int>& values, const SsdAnchorOptions& o, const char* name) {
  if (!values.empty() && static_cast<int>(values.size()) != o.num_layers) {
    throw Error(std::string("ssd_anchor_generator: ") + name + " has " + std::to_string(values.size()) +
                " values, need one per layer (" + std::to_string(o.num_layers) + ")");
  }
}

}  // namespace

std::vector<std::vector<AnchorSpec>> ssd_anchor_specs(const SsdAnchorOptions& o) {
  if (o.num_layers < 1) throw Error("ssd_anchor_generator: num_layers must be >= 1");
  if (o.aspect_ratios.empty()) throw Error("ssd_anchor_generator: needs at least one aspect ratio");
  for (float r : o.aspect_ratios) {
    if (!(r > 0.0f)) throw Error("ssd_anchor_generator: aspect ratios must be > 0, got " + std::to_string(r));
  }
  std::vector<double> scales;
  if (o.scales.empty()) {
    if (o.num_layers == 1) throw Error("ssd_anchor_generator: one layer needs explicit scales");
    for (int i = 0; i < o.num_layers; ++i) {
      scales.push_back(o.min_scale + (static_cast<double>(o.max_scale) - o.min_scale) * i / (o.num_layers - 1));
    }
  } else {
    if (static_cast<int>(o.scales.size()) != o.num_layers) {
      throw Error("ssd_anchor_generator: " + std::to_string(o.scales.size()) + " scales for " +
                  std::to_string(o.num_layers) + " layers");
    }
    scales.assign(o.scales.begin(), o.scales.end());
  }
  scales.push_back(1.0);  // only the last layer's interpolated scale uses it

  std::vector<std::vector<AnchorSpec>> specs(o.num_layers);
  for (int layer = 0; layer < o.num_layers; ++layer) {
    const double scale = scales[layer], scale_next = scales[layer + 1];
    auto& s = specs[layer];
    if (layer == 0 && o.reduce_boxes_in_lowest_layer) {
      s = {{0.1, 1.0}, {scale, 2.0}, {scale, 0.5}};
      continue;
    }
    for (float r : o.aspect_ratios) s.push_back({scale, r});
    if (o.interpolated_scale_aspect_ratio > 0.0f) {
      s.push_back({std::sqrt(scale * scale_next), o.interpolated_scale_aspect_ratio});
    }
  }
  return specs;
}

std::vector<int64_t> anchors_per_location(const SsdAnchorOptions& o) {
  std::vector<int64_t> counts;
  for (const auto& layer : ssd_anchor_specs(o)) counts.push_back(static_cast<int64_t>(layer.size()));
  return counts;
}

at::Tensor generate_ssd_anchors(const SsdAnchorOptions& o,
                                const std::vector<std::pair<int64_t, int64_t>>& feature_map_sizes, int64_t image_height,
                                int64_t image_width) {
  const auto specs = ssd_anchor_specs(o);
  if (static_cast<int>(feature_map_sizes.size()) != o.num_layers) {
    throw Error("ssd anchors: " + std::to_string(feature_map_sizes.size()) + " feature maps for " +
                std::to_string(o.num_layers) + " anchor layers");
  }
  if (image_height <= 0 || image_width <= 0) throw Error("ssd anchors: image size must be positive");
  check_per_layer(o.height_stride, o, "height_stride");
  check_per_layer(o.width_stride, o, "width_stride");
  check_per_layer(o.height_offset, o, "height_offset");
  check_per_layer(o.width_offset, o, "width_offset");
  if (o.height_stride.size() != o.width_stride.size() || o.height_offset.size() != o.width_offset.size()) {
    throw Error("ssd_anchor_generator: height and width strides (offsets) must both be given or both absent");
  }

  // float32 throughout, as the TF graph computes them.
  const auto im_h = static_cast<float>(image_height), im_w = static_cast<float>(image_width);
  const float min_side = std::min(im_h, im_w);
  const float base_h = min_side / im_h * o.base_anchor_height;
  const float base_w = min_side / im_w * o.base_anchor_width;

  std::vector<float> out;
  for (int layer = 0; layer < o.num_layers; ++layer) {
    const auto [grid_h, grid_w] = feature_map_sizes[layer];
    if (grid_h <= 0 || grid_w <= 0) throw Error("ssd anchors: feature map sizes must be positive");
    float stride_y = 1.0f / static_cast<float>(grid_h), stride_x = 1.0f / static_cast<float>(grid_w);
    if (!o.height_stride.empty()) {
      stride_y = static_cast<float>(o.height_stride[layer]) / im_h;
      stride_x = static_cast<float>(o.width_stride[layer]) / im_w;
    }
    float offset_y = 0.5f * stride_y, offset_x = 0.5f * stride_x;
    if (!o.height_offset.empty()) {
      offset_y = static_cast<float>(o.height_offset[layer]) / im_h;
      offset_x = static_cast<float>(o.width_offset[layer]) / im_w;
    }
    std::vector<float> heights, widths;
    for (const AnchorSpec& s : specs[layer]) {
      const float ratio_sqrt = std::sqrt(static_cast<float>(s.aspect_ratio));
      heights.push_back(static_cast<float>(s.scale) / ratio_sqrt * base_h);
      widths.push_back(static_cast<float>(s.scale) * ratio_sqrt * base_w);
    }
    out.reserve(out.size() + static_cast<size_t>(grid_h * grid_w) * heights.size() * 4);
    for (int64_t y = 0; y < grid_h; ++y) {
      const float cy = static_cast<float>(y) * stride_y + offset_y;
      for (int64_t x = 0; x < grid_w; ++x) {
        const float cx = static_cast<float>(x) * stride_x + offset_x;
        for (size_t a = 0; a < heights.size(); ++a) {
          out.insert(out.end(),
                     {cy - 0.5f * heights[a], cx - 0.5f * widths[a], cy + 0.5f * heights[a], cx + 0.5f * widths[a]});
        }
      }
    }
  }
  const auto n = static_cast<int64_t>(out.size() / 4);
  return torch::from_blob(out.data(), {n, 4}, at::kFloat).clone();
}

int64_t anchors_per_location(const MultiscaleAnchorOptions& o) {
  return static_cast<int64_t>(o.aspect_ratios.size()) * o.scales_per_octave;
}

at::Tensor generate_multiscale_anchors(const MultiscaleAnchorOptions& o,
                                       const std::vector<std::pair<int64_t, int64_t>>& feature_map_sizes,
                                       int64_t image_height, int64_t image_width) {
  if (o.min_level < 0 || o.max_level < o.min_level || o.max_level > 30)
    throw Error("multiscale_anchor_generator: need 0 <= min_level <= max_level, got min_level " +
                std::to_string(o.min_level) + ", max_level " + std::to_string(o.max_level));
  if (o.scales_per_octave < 1) throw Error("multiscale_anchor_generator.scales_per_octave must be >= 1");
  if (o.aspect_ratios.empty()) throw Error("multiscale_anchor_generator.aspect_ratios must not be empty");
  for (float a : o.aspect_ratios)
    if (!(a > 0)) throw Error("multiscale_anchor_generator.aspect_ratios must be positive");
  if (!(o.anchor_scale > 0)) throw Error("multiscale_anchor_generator.anchor_scale must be positive");
  const size_t levels = static_cast<size_t>(o.max_level - o.min_level + 1);
  if (feature_map_sizes.size() != levels)
    throw Error("multiscale anchors: " + std::to_string(feature_map_sizes.size()) + " feature maps for levels " +
                std::to_string(o.min_level) + ".." + std::to_string(o.max_level));
  if (image_height <= 0 || image_width <= 0) throw Error("multiscale anchors: image size must be positive");
  if (o.normalize_coordinates && (image_height == 1 || image_width == 1))
    throw Error("multiscale anchors: cannot normalise the coordinates of a 1-pixel image side");

  // float32 throughout, as the TF graph computes them; normalised by multiplying with 1 / size
  // (box_list_ops.to_normalized_coordinates).
  const float y_norm = o.normalize_coordinates ? 1.0f / static_cast<float>(image_height) : 1.0f;
  const float x_norm = o.normalize_coordinates ? 1.0f / static_cast<float>(image_width) : 1.0f;
  std::vector<float> heights, widths;  // per anchor of a cell, in pixels before the level's base
  for (float aspect : o.aspect_ratios) {
    const float ratio_sqrt = std::sqrt(aspect);
    for (int i = 0; i < o.scales_per_octave; ++i) {
      const auto scale = static_cast<float>(std::pow(2.0, static_cast<double>(i) / o.scales_per_octave));
      heights.push_back(scale / ratio_sqrt);
      widths.push_back(scale * ratio_sqrt);
    }
  }
  std::vector<float> out;
  for (size_t k = 0; k < levels; ++k) {
    const int level = o.min_level + static_cast<int>(k);
    const auto [grid_h, grid_w] = feature_map_sizes[k];
    if (grid_h <= 0 || grid_w <= 0) throw Error("multiscale anchors: feature map sizes must be positive");
    const int64_t stride = int64_t{1} << level;
    const auto base = static_cast<float>(static_cast<double>(stride) * o.anchor_scale);
    const float offset_y = image_height % stride == 0 || image_height == 1 ? stride / 2.0f : 0.0f;
    const float offset_x = image_width % stride == 0 || image_width == 1 ? stride / 2.0f : 0.0f;
    out.reserve(out.size() + static_cast<size_t>(grid_h * grid_w) * heights.size() * 4);
    for (int64_t y = 0; y < grid_h; ++y) {
      const float cy = static_cast<float>(y) * static_cast<float>(stride) + offset_y;
      for (int64_t x = 0; x < grid_w; ++x) {
        const float cx = static_cast<float>(x) * static_cast<float>(stride) + offset_x;
        for (size_t a = 0; a < heights.size(); ++a) {
          const float h = heights[a] * base, w = widths[a] * base;
          out.insert(out.end(), {(cy - 0.5f * h) * y_norm, (cx - 0.5f * w) * x_norm, (cy + 0.5f * h) * y_norm,
                                 (cx + 0.5f * w) * x_norm});
        }
      }
    }
  }
  const auto n = static_cast<int64_t>(out.size() / 4);
  return torch::from_blob(out.data(), {n, 4}, at::kFloat).clone();
}

int64_t anchors_per_location(const GridAnchorOptions& o) {
  return static_cast<int64_t>(o.scales.size() * o.aspect_ratios.size());
}

at::Tensor generate_grid_anchors(const GridAnchorOptions& o, int64_t grid_height, int64_t grid_width) {
  if (o.scales.empty() || o.aspect_ratios.empty())
    throw Error("grid_anchor_generator: scales and aspect_ratios must not be empty");
  if (grid_height <= 0 || grid_width <= 0) throw Error("grid anchors: the feature map size must be positive");
  for (float r : o.aspect_ratios)
    if (!(r > 0)) throw Error("grid_anchor_generator: aspect ratios must be positive");
  // float32 throughout, as the TF graph computes them.
  std::vector<float> heights, widths;
  for (float ratio : o.aspect_ratios) {
    const float root = std::sqrt(ratio);
    for (float scale : o.scales) {
      heights.push_back(scale / root * o.base_height);
      widths.push_back(scale * root * o.base_width);
    }
  }
  std::vector<float> out;
  out.reserve(static_cast<size_t>(grid_height * grid_width) * heights.size() * 4);
  for (int64_t y = 0; y < grid_height; ++y) {
    const float cy = static_cast<float>(y) * o.stride_height + o.offset_height;
    for (int64_t x = 0; x < grid_width; ++x) {
      const float cx = static_cast<float>(x) * o.stride_width + o.offset_width;
      for (size_t a = 0; a < heights.size(); ++a)
        out.insert(out.end(),
                   {cy - 0.5f * heights[a], cx - 0.5f * widths[a], cy + 0.5f * heights[a], cx + 0.5f * widths[a]});
    }
  }
  const auto n = static_cast<int64_t>(out.size() / 4);
  return torch::from_blob(out.data(), {n, 4}, at::kFloat).clone();
}

}  // namespace orchard::detect
