// The layers Orchard's exported graphs are made of, one interface for every graph format: each
// model is walked once (model_graphs.h) into a GraphWriter, and each format implements the
// writer (ONNX in NCHW, onnx_export.cc; TensorFlow GraphDef in NHWC, tf_graph_export.cc).
//
// Tensors are named by strings the writer returns. A walk speaks PyTorch's terms: feature maps
// [N, C, H, W], convolution weights [out, in / groups, kh, kw], explicit paddings; a writer
// translates (TensorFlow: HWIO filters, 'SAME' / 'VALID' where they are the same arithmetic).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace orchard::exporting {

using Pads = std::array<int64_t, 4>;  // top, left, bottom, right

struct ConvSpec {
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, dilation{1, 1};
  int64_t groups = 1;
};

class GraphWriter {
 public:
  virtual ~GraphWriter() = default;

  // A convolution of x zero-padded by `pads`, plus `bias` [out].
  virtual std::string conv(const std::string& name, const ConvSpec& spec, const at::Tensor& weight,
                           const at::Tensor& bias, const std::string& x, const Pads& pads) = 0;
  virtual std::string relu(const std::string& x) = 0;
  virtual std::string relu6(const std::string& x) = 0;
  virtual std::string add(const std::string& name, const std::string& a, const std::string& b) = 0;
  virtual std::string concat_channels(const std::string& name, const std::vector<std::string>& inputs) = 0;
  // kernel x kernel max pool of x padded by `pads` (padding never wins, as torch's).
  // `nonnegative`: x >= 0 (after a ReLU), so that zero padding never wins either.
  virtual std::string max_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t stride,
                               const Pads& pads, bool nonnegative) = 0;
  // kernel x kernel stride-1 average pool, `pad` on every side; the padding counted in the
  // border averages (torch's count_include_pad) or left out (TensorFlow's).
  virtual std::string avg_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t pad,
                               bool count_include_pad) = 0;
  // [N, C, H, W] -> [N, C], the mean over H and W.
  virtual std::string global_avg_pool(const std::string& name, const std::string& x) = 0;
  // [N, in] -> [N, out]: x weight^T + bias, weight [out, in] (torch::nn::Linear's).
  virtual std::string dense(const std::string& name, const std::string& x, const at::Tensor& weight,
                            const at::Tensor& bias) = 0;
  // An SSD head's output x [N, anchors_per_cell * code, h, w] as [N, anchors, code] (anchors =
  // h * w * anchors_per_cell, in the anchor generator's order: row, column, then the cell's).
  virtual std::string flatten_anchors(const std::string& name, const std::string& x, int64_t anchors, int64_t code) = 0;
  // [N, A_i, code] tensors concatenated along the anchors (one input: the same tensor, renamed).
  virtual std::string concat_anchors(const std::string& name, const std::vector<std::string>& inputs) = 0;
  // The 2x nearest-neighbour upsampling of x, an h x w map (each value repeated 2 x 2; the OD
  // API's ops.nearest_neighbor_upsampling), cropped at the bottom / right to out_h x out_w.
  virtual std::string upsample2x(const std::string& name, const std::string& x, int64_t h, int64_t w, int64_t out_h,
                                 int64_t out_w) = 0;
  // The range quantization-aware training gave tensor x (its fake-quantization's nudged min and
  // max): a quantized format's (uint8 TFLite) scale and zero point. Float formats ignore it.
  virtual void quantization_range(const std::string& /*x*/, float /*min*/, float /*max*/) {}
};

}  // namespace orchard::exporting
