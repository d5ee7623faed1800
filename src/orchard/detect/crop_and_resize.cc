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

}  // namespace orchard::detect
