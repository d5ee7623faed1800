#include "orchard/detect/ops/crop_and_resize.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

// One sample position along a side: the two pixels it lies between (top/bottom or left/right, equal
// on a pixel centre) and the weight of the second, as TF's kernel computes them (in T, TF's own
// expression order); invalid outside [0, length - 1] (the extrapolation value).
template <typename T>
struct Tap {
  int64_t lo = 0, hi = 0;
  T lerp = 0;
  bool valid = false;
};

// [N * size] taps of each box's side from its coordinates `a` and `b` (column a_col, b_col of
// boxes [N, 4]).
template <typename T>
std::vector<Tap<T>> side_taps(const T* boxes, int64_t n, int a_col, int b_col, int64_t size, int64_t length) {
  std::vector<Tap<T>> taps(static_cast<size_t>(n * size));
  const T last = static_cast<T>(length - 1);
  for (int64_t k = 0; k < n; ++k) {
    const T a = boxes[k * 4 + a_col], b = boxes[k * 4 + b_col];
    const T scale = size > 1 ? (b - a) * last / static_cast<T>(size - 1) : T(0);
    for (int64_t i = 0; i < size; ++i) {
      const T p = size > 1 ? a * last + static_cast<T>(i) * scale : static_cast<T>(0.5 * (a + b) * last);
      auto& t = taps[static_cast<size_t>(k * size + i)];
      if (!(p >= 0 && p <= last)) continue;  // NaN boxes extrapolate too
      t.valid = true;
      t.lo = static_cast<int64_t>(std::floor(p));
      t.hi = static_cast<int64_t>(std::ceil(p));
      t.lerp = p - static_cast<T>(t.lo);
    }
  }
  return taps;
}

// The CPU kernels on channels-last data: each sample mixes four contiguous C-vectors, so the
// inner loops run over channels (vectorised) instead of gathering single values.
template <typename T>
struct CropGeometry {
  int64_t height = 0, width = 0, channels = 0, crop_height = 0, crop_width = 0, boxes = 0;
  const int64_t* index = nullptr;
  std::vector<Tap<T>> ys, xs;  // [boxes * crop_height], [boxes * crop_width]

  CropGeometry(const at::Tensor& boxes_t, const at::Tensor& indices, int64_t h, int64_t w, int64_t c, int64_t ch,
               int64_t cw)
      : height(h),
        width(w),
        channels(c),
        crop_height(ch),
        crop_width(cw),
        boxes(boxes_t.size(0)),
        index(indices.data_ptr<int64_t>()),
        ys(side_taps(boxes_t.data_ptr<T>(), boxes, 0, 2, ch, h)),
        xs(side_taps(boxes_t.data_ptr<T>(), boxes, 1, 3, cw, w)) {}

  // Offset of pixel (y, x) of image `b` in [B, H, W, C].
  int64_t pixel(int64_t b, int64_t y, int64_t x) const { return ((b * height + y) * width + x) * channels; }
};

// Where sample (n, i, j) of channel 0 lies in a crops tensor [N, C, ch, cw] of any strides, and
// the step between its channels.
struct CropStrides {
  int64_t box, channel, row, column;
  explicit CropStrides(const at::Tensor& t)
      : box(t.stride(0)), channel(t.stride(1)), row(t.stride(2)), column(t.stride(3)) {}
  int64_t at(int64_t n, int64_t i, int64_t j) const { return n * box + i * row + j * column; }
};

// Channels per block: a box's crops of one block of channels (64 x ch x cw values) stay in cache
// while its samples are written or read with the crops' strides.
constexpr int64_t kChannelBlock = 64;

// image [B, H, W, C] (contiguous) -> out [N, C, ch, cw] (strides `s`): each sample mixes four
// contiguous channel vectors of the image. Work items are (box, channel block).
template <typename T>
void crop_forward(const CropGeometry<T>& g, const T* image, T extrapolation, T* out, const CropStrides& s) {
  const int64_t ch = g.crop_height, cw = g.crop_width, sc = s.channel;
  const int64_t blocks = (g.channels + kChannelBlock - 1) / kChannelBlock;
  at::parallel_for(0, g.boxes * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / blocks, c0 = item % blocks * kChannelBlock;
      const int64_t c1 = std::min(c0 + kChannelBlock, g.channels);
      for (int64_t i = 0; i < ch; ++i) {
        const auto& y = g.ys[static_cast<size_t>(n * ch + i)];
        for (int64_t j = 0; j < cw; ++j) {
          const auto& x = g.xs[static_cast<size_t>(n * cw + j)];
          T* o = out + s.at(n, i, j);
          if (!y.valid || !x.valid) {
            for (int64_t k = c0; k < c1; ++k) o[k * sc] = extrapolation;
            continue;
          }
          const T* tl = image + g.pixel(g.index[n], y.lo, x.lo);
          const T* tr = image + g.pixel(g.index[n], y.lo, x.hi);
          const T* bl = image + g.pixel(g.index[n], y.hi, x.lo);
          const T* br = image + g.pixel(g.index[n], y.hi, x.hi);
          const T xl = x.lerp, yl = y.lerp;
          for (int64_t k = c0; k < c1; ++k) {
            const T top = tl[k] + (tr[k] - tl[k]) * xl;
            const T bottom = bl[k] + (br[k] - bl[k]) * xl;
            o[k * sc] = top + (bottom - top) * yl;
          }
        }
      }
    }
  });
}

// grad [N, C, ch, cw] (strides `s`) -> grad_image [B, H, W, C] (contiguous, zeroed): each
// sample's gradient split over its four pixels with the bilinear weights (TF's
// CropAndResizeGradImage). Threads own channel blocks, so that boxes of one image never add to
// the same value at once.
template <typename T>
void crop_backward(const CropGeometry<T>& g, const T* grad, const CropStrides& s, T* grad_image) {
  const int64_t ch = g.crop_height, cw = g.crop_width, sc = s.channel;
  const int64_t blocks = (g.channels + kChannelBlock - 1) / kChannelBlock;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t c0 = block * kChannelBlock, c1 = std::min(c0 + kChannelBlock, g.channels);
      for (int64_t n = 0; n < g.boxes; ++n)
        for (int64_t i = 0; i < ch; ++i) {
          const auto& y = g.ys[static_cast<size_t>(n * ch + i)];
          if (!y.valid) continue;
          for (int64_t j = 0; j < cw; ++j) {
            const auto& x = g.xs[static_cast<size_t>(n * cw + j)];
            if (!x.valid) continue;
            const T* d = grad + s.at(n, i, j);
            T* tl = grad_image + g.pixel(g.index[n], y.lo, x.lo);
            T* tr = grad_image + g.pixel(g.index[n], y.lo, x.hi);
            T* bl = grad_image + g.pixel(g.index[n], y.hi, x.lo);
            T* br = grad_image + g.pixel(g.index[n], y.hi, x.hi);
            const T xl = x.lerp, yl = y.lerp;
            for (int64_t k = c0; k < c1; ++k) {
              const T top = (1 - yl) * d[k * sc], bottom = yl * d[k * sc];
              tl[k] += (1 - xl) * top;
              tr[k] += xl * top;
              bl[k] += (1 - xl) * bottom;
              br[k] += xl * bottom;
            }
          }
        }
    }
  });
}

void check_shapes(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& box_indices, int64_t crop_height,
                  int64_t crop_width) {
  if (image.dim() != 4) throw Error("crop_and_resize: image must be [B, C, H, W]");
  if (boxes.dim() != 2 || boxes.size(1) != 4) throw Error("crop_and_resize: boxes must be [N, 4]");
  if (box_indices.dim() != 1 || box_indices.size(0) != boxes.size(0))
    throw Error("crop_and_resize: box_indices must be [N], one per box");
  if (crop_height < 1 || crop_width < 1) throw Error("crop_and_resize: the crop size must be positive");
}

void check_indices(const at::Tensor& indices, int64_t images) {
  const auto* index = indices.data_ptr<int64_t>();
  for (int64_t i = 0; i < indices.size(0); ++i)
    if (index[i] < 0 || index[i] >= images)
      throw Error("crop_and_resize: box " + std::to_string(i) + " names image " + std::to_string(index[i]) + " of " +
                  std::to_string(images));
}

// Differentiable in the image only; the boxes and indices are constants (the OD API stops the
// boxes' gradient).
class CropAndResizeFunction : public torch::autograd::Function<CropAndResizeFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image, const at::Tensor& boxes,
                            const at::Tensor& indices, int64_t crop_height, int64_t crop_width, double extrapolation) {
    const auto nhwc = image.permute({0, 2, 3, 1}).contiguous();  // free when the image is channels-last
    const int64_t n = boxes.size(0);
    // Channels-last crops: written as contiguous channel vectors, and the max pool and block4 after
    // them run faster on them than on NCHW ones (bench/README.md).
    const auto out = at::empty({n, image.size(1), crop_height, crop_width},
                               image.options().memory_format(at::MemoryFormat::ChannelsLast));
    AT_DISPATCH_FLOATING_TYPES(image.scalar_type(), "crop_and_resize", [&] {
      const CropGeometry<scalar_t> g(boxes, indices, image.size(2), image.size(3), image.size(1), crop_height,
                                     crop_width);
      crop_forward(g, nhwc.data_ptr<scalar_t>(), static_cast<scalar_t>(extrapolation), out.data_ptr<scalar_t>(),
                   CropStrides(out));
    });
    ctx->save_for_backward({boxes, indices});
    ctx->saved_data["image_size"] = image.sizes();
    ctx->saved_data["crop"] = std::vector<int64_t>{crop_height, crop_width};
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto size = ctx->saved_data["image_size"].toIntVector();
    const auto crop = ctx->saved_data["crop"].toIntVector();
    const auto& grad = grads[0];
    auto grad_image = at::zeros({size[0], size[2], size[3], size[1]}, grad.options());
    AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "crop_and_resize_backward", [&] {
      const CropGeometry<scalar_t> g(saved[0], saved[1], size[2], size[3], size[1], crop[0], crop[1]);
      crop_backward(g, grad.data_ptr<scalar_t>(), CropStrides(grad), grad_image.data_ptr<scalar_t>());
    });
    return {grad_image.permute({0, 3, 1, 2}).contiguous(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor crop_and_resize(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& box_indices,
                           int64_t crop_height, int64_t crop_width, float extrapolation_value) {
  check_shapes(image, boxes, box_indices, crop_height, crop_width);
  if (!image.device().is_cpu())
    return crop_and_resize_grid_sample(image, boxes, box_indices, crop_height, crop_width, extrapolation_value);
  const auto type = image.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto indices = box_indices.to(torch::kCPU, torch::kLong).contiguous();
  check_indices(indices, image.size(0));
  const auto crops = CropAndResizeFunction::apply(image.to(type), boxes.detach().to(torch::kCPU, type).contiguous(),
                                                  indices, crop_height, crop_width, extrapolation_value);
  return crops.to(image.scalar_type());
}

at::Tensor crop_and_resize_grid_sample(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& box_indices,
                                       int64_t crop_height, int64_t crop_width, float extrapolation_value) {
  check_shapes(image, boxes, box_indices, crop_height, crop_width);
  const int64_t n = boxes.size(0), channels = image.size(1), height = image.size(2), width = image.size(3);
  auto out = image.new_full({n, channels, crop_height, crop_width}, extrapolation_value);
  if (n == 0) return out;
  const auto b =
      boxes.detach().to(image.options().dtype(image.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
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
  check_indices(indices, image.size(0));
  const auto* index = indices.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(image.size(0)));
  for (int64_t i = 0; i < n; ++i) rows_of[static_cast<size_t>(index[i])].push_back(i);
  namespace F = torch::nn::functional;
  const auto options =
      F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kZeros).align_corners(true);
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
  TORCH_CHECK(features.dim() == 4 && features.size(1) % bins == 0,
              "position_sensitive_crop_regions: ", features.size(1), " channels do not split into ", bins, " bins");
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
