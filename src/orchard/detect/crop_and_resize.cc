#include "orchard/detect/crop_and_resize.h"

#include <torch/torch.h>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

// Sample positions along one side for every box: [N, size] in pixels of a side of `length`.
at::Tensor sample_positions(const at::Tensor& start, const at::Tensor& end, int64_t size, int64_t length) {
  const double last = static_cast<double>(length - 1);
  if (size == 1) return ((start + end) * (0.5 * last)).unsqueeze(1);
  const auto steps = torch::arange(size, start.options()).unsqueeze(0);  // [1, size]
  const auto scale = (end - start) * (last / static_cast<double>(size - 1));
  return (start * last).unsqueeze(1) + steps * scale.unsqueeze(1);
}

}  // namespace

at::Tensor crop_and_resize(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& box_indices,
                           int64_t crop_height, int64_t crop_width, float extrapolation_value) {
  if (image.dim() != 4) throw Error("crop_and_resize: image must be [B, C, H, W]");
  if (boxes.dim() != 2 || boxes.size(1) != 4) throw Error("crop_and_resize: boxes must be [N, 4]");
  if (box_indices.dim() != 1 || box_indices.size(0) != boxes.size(0))
    throw Error("crop_and_resize: box_indices must be [N], one per box");
  if (crop_height < 1 || crop_width < 1) throw Error("crop_and_resize: the crop size must be positive");
  const int64_t n = boxes.size(0), channels = image.size(1), height = image.size(2), width = image.size(3);
  auto out = image.new_full({n, channels, crop_height, crop_width}, extrapolation_value);
  if (n == 0) return out;
  const auto b = boxes.detach().to(image.options().dtype(image.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  const auto ys = sample_positions(b.select(1, 0), b.select(1, 2), crop_height, height);  // [N, ch]
  const auto xs = sample_positions(b.select(1, 1), b.select(1, 3), crop_width, width);    // [N, cw]
  const auto valid_y = (ys >= 0) & (ys <= static_cast<double>(height - 1));
  const auto valid_x = (xs >= 0) & (xs <= static_cast<double>(width - 1));
  // grid_sample with align_corners maps -1 and 1 to the first and last pixel centres: TF's
  // coordinates. Inside [0, side - 1] its bilinear weights are TF's; outside it TF gives the
  // extrapolation value, set below.
  auto norm = [](const at::Tensor& p, int64_t side) {
    return side > 1 ? p * (2.0 / static_cast<double>(side - 1)) - 1.0 : torch::zeros_like(p);
  };
  const auto gy = norm(ys, height), gx = norm(xs, width);
  const auto indices = box_indices.to(torch::kCPU, torch::kLong).contiguous();
  const auto* index = indices.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(image.size(0)));
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] < 0 || index[i] >= image.size(0))
      throw Error("crop_and_resize: box " + std::to_string(i) + " names image " + std::to_string(index[i]) + " of " +
                  std::to_string(image.size(0)));
    rows_of[static_cast<size_t>(index[i])].push_back(i);
  }
  namespace F = torch::nn::functional;
  const auto options = F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kZeros).align_corners(true);
  std::vector<at::Tensor> parts(static_cast<size_t>(n));
  for (size_t img = 0; img < rows_of.size(); ++img) {
    if (rows_of[img].empty()) continue;
    const auto rows = torch::tensor(rows_of[img], torch::kLong).to(boxes.device());
    const int64_t k = rows.size(0);
    // [1, k * ch, cw, 2] as (x, y).
    const auto grid_y = gy.index_select(0, rows).unsqueeze(2).expand({k, crop_height, crop_width});
    const auto grid_x = gx.index_select(0, rows).unsqueeze(1).expand({k, crop_height, crop_width});
    const auto grid = torch::stack({grid_x, grid_y}, 3).reshape({1, k * crop_height, crop_width, 2});
    auto sampled = F::grid_sample(image.narrow(0, static_cast<int64_t>(img), 1), grid.to(image.scalar_type()), options);
    // [1, C, k * ch, cw] -> [k, C, ch, cw]
    sampled = sampled.view({channels, k, crop_height, crop_width}).permute({1, 0, 2, 3});
    for (int64_t r = 0; r < k; ++r) parts[static_cast<size_t>(rows_of[img][static_cast<size_t>(r)])] = sampled[r];
  }
  const auto valid = (valid_y.unsqueeze(2) & valid_x.unsqueeze(1)).unsqueeze(1);  // [N, 1, ch, cw]
  return torch::where(valid, torch::stack(parts), out);
}

at::Tensor position_sensitive_crop_regions(const at::Tensor& features, const at::Tensor& boxes,
                                           const at::Tensor& box_indices, int64_t crop_height, int64_t crop_width,
                                           int64_t bins_height, int64_t bins_width) {
  TORCH_CHECK(bins_height > 0 && bins_width > 0 && crop_height % bins_height == 0 && crop_width % bins_width == 0,
              "position_sensitive_crop_regions: crop size ", crop_height, "x", crop_width,
              " must be a multiple of the spatial bins ", bins_height, "x", bins_width);
  const int64_t bins = bins_height * bins_width;
  TORCH_CHECK(features.dim() == 4 && features.size(1) % bins == 0, "position_sensitive_crop_regions: ",
              features.size(1), " channels do not split into ", bins, " bins");
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(1) == 4 && box_indices.size(0) == boxes.size(0),
              "position_sensitive_crop_regions: boxes must be [M, 4] with an image index each");
  const int64_t b = features.size(0), c = features.size(1) / bins, m = boxes.size(0);
  // Group g of image i is "image" i * bins + g: each bin crops its own channels.
  const auto groups = features.reshape({b * bins, c, features.size(2), features.size(3)});
  const auto y0 = boxes.select(1, 0), x0 = boxes.select(1, 1);
  const auto dy = (boxes.select(1, 2) - y0) / bins_height, dx = (boxes.select(1, 3) - x0) / bins_width;
  std::vector<at::Tensor> bin_boxes, bin_index;
  for (int64_t by = 0; by < bins_height; ++by)
    for (int64_t bx = 0; bx < bins_width; ++bx) {
      bin_boxes.push_back(torch::stack({y0 + by * dy, x0 + bx * dx, y0 + (by + 1) * dy, x0 + (bx + 1) * dx}, 1));
      bin_index.push_back(box_indices.to(torch::kLong) * bins + (by * bins_width + bx));
    }
  // [bins, M, ...] -> one crop_and_resize over all bins of all boxes.
  const auto crops = crop_and_resize(groups, torch::cat(bin_boxes), torch::cat(bin_index).to(features.device()),
                                     crop_height / bins_height, crop_width / bins_width);
  return crops.mean({2, 3}).view({bins, m, c}).mean(0);
}

}  // namespace orchard::detect
