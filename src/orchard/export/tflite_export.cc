#include "orchard/export/tflite_export.h"

#include <flatbuffers/flexbuffers.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/export/model_graphs.h"
#include "orchard/layers/conv_norm_activation.h"
#include "schema_generated.h"

namespace orchard::exporting {
namespace {

using Shape = std::vector<int32_t>;

// GraphWriter for TFLite: NHWC, batch 1. Filters as TFLite's kernels read them: CONV_2D
// [out, kh, kw, in], DEPTHWISE_CONV_2D [1, kh, kw, in * multiplier], FULLY_CONNECTED [out, in].
// A ReLU / ReLU6 right after the op that makes its input (nothing else read it yet) becomes that
// op's fused activation, as the converter fuses them.
class TfliteWriter : public GraphWriter {
 public:
  // quantized: uint8 tensors (the ranges quantization-aware training gave, quantization_range),
  // uint8 weights on their own ranges, int32 biases; float32 otherwise.
  explicit TfliteWriter(bool quantized = false) : quantized_(quantized) {
    model_.version = 3;
    model_.description = "Orchard";
    model_.buffers.push_back(std::make_unique<tflite::BufferT>());  // 0: the empty buffer
    model_.subgraphs.push_back(std::make_unique<tflite::SubGraphT>());
    graph_ = model_.subgraphs.back().get();
  }

  std::string input(const std::string& name, const Shape& shape) {
    graph_->inputs.push_back(tensor(name, shape));
    return name;
  }
  void output(const std::string& name) { graph_->outputs.push_back(index(name)); }

  std::string conv(const std::string& name, const ConvSpec& s, const at::Tensor& weight, const at::Tensor& bias,
                   const std::string& x, const Pads& pads) override {
    const Shape in = shape(x);
    const int64_t channels = in[3], out_channels = weight.size(0);
    const bool depthwise = s.groups > 1 && s.groups == channels && weight.size(1) == 1;
    if (s.groups != 1 && !depthwise)
      throw Error("TFLite export: " + name + " is a grouped convolution (" + std::to_string(s.groups) +
                  " groups), which TFLite has no builtin op for");
    auto [input, padding] = padded(name, x, s, pads);
    const auto [h, w] = conv_output_size(in[1], in[2], s, pads);
    const Shape out = {1, static_cast<int32_t>(h), static_cast<int32_t>(w), static_cast<int32_t>(out_channels)};
    const std::string filter =
        constant(name + "/weights", depthwise ? weight.permute({1, 2, 3, 0}) : weight.permute({0, 2, 3, 1}));
    const std::string biases = constant(name + "/biases", bias);
    if (depthwise) {
      tflite::DepthwiseConv2DOptionsT o;
      o.padding = padding;
      o.stride_h = static_cast<int32_t>(s.stride[0]);
      o.stride_w = static_cast<int32_t>(s.stride[1]);
      o.dilation_h_factor = static_cast<int32_t>(s.dilation[0]);
      o.dilation_w_factor = static_cast<int32_t>(s.dilation[1]);
      o.depth_multiplier = static_cast<int32_t>(out_channels / channels);
      return op(tflite::BuiltinOperator_DEPTHWISE_CONV_2D, {input, filter, biases}, name, out, std::move(o));
    }
    tflite::Conv2DOptionsT o;
    o.padding = padding;
    o.stride_h = static_cast<int32_t>(s.stride[0]);
    o.stride_w = static_cast<int32_t>(s.stride[1]);
    o.dilation_h_factor = static_cast<int32_t>(s.dilation[0]);
    o.dilation_w_factor = static_cast<int32_t>(s.dilation[1]);
    return op(tflite::BuiltinOperator_CONV_2D, {input, filter, biases}, name, out, std::move(o));
  }

  std::string relu(const std::string& x) override {
    return activation(x, tflite::ActivationFunctionType_RELU, tflite::BuiltinOperator_RELU, "/Relu");
  }
  std::string relu6(const std::string& x) override {
    return activation(x, tflite::ActivationFunctionType_RELU6, tflite::BuiltinOperator_RELU6, "/Relu6");
  }

  std::string add(const std::string& name, const std::string& a, const std::string& b) override {
    return op(tflite::BuiltinOperator_ADD, {a, b}, name, shape(a), tflite::AddOptionsT{});
  }

  std::string concat_channels(const std::string& name, const std::vector<std::string>& inputs) override {
    return concat(name, inputs, 3);
  }

  std::string concat(const std::string& name, const std::vector<std::string>& inputs, int32_t axis) {
    Shape out = shape(inputs.front());
    out[axis] = 0;
    for (const auto& i : inputs) out[axis] += shape(i)[axis];
    tflite::ConcatenationOptionsT o;
    o.axis = axis;
    return op(tflite::BuiltinOperator_CONCATENATION, inputs, name, out, std::move(o));
  }

  std::string max_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t stride, const Pads& pads,
                       bool nonnegative) override {
    return pool(tflite::BuiltinOperator_MAX_POOL_2D, name, x, kernel, stride, pads, nonnegative);
  }

  // As the TensorFlow graphs: torch's count_include_pad average is a depthwise convolution with
  // weights 1 / (k * k); TensorFlow's (padding left out) is AVERAGE_POOL_2D 'SAME'.
  std::string avg_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t pad,
                       bool count_include_pad) override {
    ConvSpec s;
    s.kernel = {kernel, kernel};
    if (count_include_pad) {
      const int64_t channels = shape(x)[3];
      s.groups = channels;
      return conv(name, s, torch::full({channels, 1, kernel, kernel}, 1.0 / static_cast<double>(kernel * kernel)),
                  torch::zeros({channels}), x, Pads{pad, pad, pad, pad});
    }
    if (same_pads(shape(x)[1], shape(x)[2], s) != Pads{pad, pad, pad, pad})
      throw Error("TFLite export: " + name + " averages without its padding where TF's 'SAME' would pad otherwise");
    return pool(tflite::BuiltinOperator_AVERAGE_POOL_2D, name, x, kernel, 1, Pads{pad, pad, pad, pad}, true);
  }

  std::string global_avg_pool(const std::string& name, const std::string& x) override {
    tflite::ReducerOptionsT o;
    o.keep_dims = false;
    return op(tflite::BuiltinOperator_MEAN, {x, int32s(name + "/reduction_indices", {1, 2})}, name, {1, shape(x)[3]},
              std::move(o));
  }

  std::string dense(const std::string& name, const std::string& x, const at::Tensor& weight,
                    const at::Tensor& bias) override {
    return op(tflite::BuiltinOperator_FULLY_CONNECTED,
              {x, constant(name + "/weights", weight), constant(name + "/biases", bias)}, name,
              {1, static_cast<int32_t>(weight.size(0))}, tflite::FullyConnectedOptionsT{});
  }

  std::string softmax(const std::string& name, const std::string& x) {
    tflite::SoftmaxOptionsT o;
    o.beta = 1.0f;
    return op(tflite::BuiltinOperator_SOFTMAX, {x}, name, shape(x), std::move(o));
  }
  std::string sigmoid(const std::string& name, const std::string& x) {
    return op(tflite::BuiltinOperator_LOGISTIC, {x}, name, shape(x), tflite::BuiltinOptionsUnion{});
  }

  std::string reshape(const std::string& name, const std::string& x, const Shape& to) {
    tflite::ReshapeOptionsT o;
    o.new_shape = to;
    return op(tflite::BuiltinOperator_RESHAPE, {x, int32s(name + "/shape", to)}, name, to, std::move(o));
  }

  std::string flatten_anchors(const std::string& name, const std::string& x, int64_t anchors, int64_t code) override {
    return reshape(name, x, {1, static_cast<int32_t>(anchors), static_cast<int32_t>(code)});
  }
  std::string concat_anchors(const std::string& name, const std::vector<std::string>& inputs) override {
    return inputs.size() == 1 ? reshape(name, inputs.front(), shape(inputs.front())) : concat(name, inputs, 1);
  }
  // RESIZE_NEAREST_NEIGHBOR to 2h x 2w (pixel i reads i / 2), then a SLICE where the map is cropped.
  std::string upsample2x(const std::string& name, const std::string& x, int64_t h, int64_t w, int64_t out_h,
                         int64_t out_w) override {
    const Shape in = shape(x);
    const bool crop = out_h != 2 * h || out_w != 2 * w;
    const auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
    const std::string full = crop ? name + "/full" : name;
    op(tflite::BuiltinOperator_RESIZE_NEAREST_NEIGHBOR, {x, int32s(full + "/size", {i32(2 * h), i32(2 * w)})}, full,
       {1, i32(2 * h), i32(2 * w), in[3]}, tflite::ResizeNearestNeighborOptionsT{});
    if (!crop) return name;
    return op(tflite::BuiltinOperator_SLICE,
              {full, int32s(name + "/begin", {0, 0, 0, 0}), int32s(name + "/size", {1, i32(out_h), i32(out_w), in[3]})},
              name, {1, i32(out_h), i32(out_w), in[3]}, tflite::SliceOptionsT{});
  }

  // A custom op with flexbuffer options and outputs of the given shapes; returns their names.
  std::vector<std::string> custom(const std::string& code, const std::vector<std::string>& inputs,
                                  const std::vector<std::pair<std::string, Shape>>& outputs,
                                  std::vector<uint8_t> options) {
    auto o = std::make_unique<tflite::OperatorT>();
    o->opcode_index = opcode(tflite::BuiltinOperator_CUSTOM, code);
    for (const auto& i : inputs) o->inputs.push_back(use(i));
    std::vector<std::string> names;
    for (const auto& [name, s] : outputs) {
      o->outputs.push_back(tensor(name, s));
      names.push_back(name);
    }
    o->custom_options = std::move(options);
    o->custom_options_format = tflite::CustomOptionsFormat_FLEXBUFFERS;
    graph_->operators.push_back(std::move(o));
    return names;
  }

  // A float constant tensor of value's shape.
  std::string constant(const std::string& name, const at::Tensor& value) {
    const auto t = value.detach().to(torch::kCPU, torch::kFloat).contiguous();
    Shape s;
    for (int64_t d : t.sizes()) s.push_back(static_cast<int32_t>(d));
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    return constant_bytes(name, s, tflite::TensorType_FLOAT32,
                          std::vector<uint8_t>(bytes, bytes + t.numel() * static_cast<int64_t>(sizeof(float))));
  }

  std::string int32s(const std::string& name, const std::vector<int32_t>& values) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    return constant_bytes(name, {static_cast<int32_t>(values.size())}, tflite::TensorType_INT32,
                          std::vector<uint8_t>(bytes, bytes + values.size() * sizeof(int32_t)));
  }

  const Shape& shape(const std::string& x) const { return graph_->tensors[index(x)]->shape; }

  void quantization_range(const std::string& x, float min, float max) override { ranges_[x] = {min, max}; }

  std::string bytes() {
    if (quantized_) quantize();
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(tflite::Model::Pack(fbb, &model_), tflite::ModelIdentifier());
    return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
  }

 private:
  int32_t index(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error("TFLite export: no tensor " + name + " in the graph");
    return it->second;
  }

  int32_t tensor(const std::string& name, const Shape& shape, tflite::TensorType type = tflite::TensorType_FLOAT32,
                 uint32_t buffer = 0) {
    if (tensors_.count(name)) throw Error("TFLite export: two tensors named " + name);
    auto t = std::make_unique<tflite::TensorT>();
    t->name = name;
    t->shape = shape;
    t->type = type;
    t->buffer = buffer;
    graph_->tensors.push_back(std::move(t));
    const auto i = static_cast<int32_t>(graph_->tensors.size() - 1);
    tensors_[name] = i;
    return i;
  }

  std::string constant_bytes(const std::string& name, const Shape& shape, tflite::TensorType type,
                             std::vector<uint8_t> data) {
    auto b = std::make_unique<tflite::BufferT>();
    b->data = std::move(data);
    model_.buffers.push_back(std::move(b));
    tensor(name, shape, type, static_cast<uint32_t>(model_.buffers.size() - 1));
    return name;
  }

  uint32_t opcode(tflite::BuiltinOperator builtin, const std::string& custom = "") {
    const auto key = std::pair{static_cast<int>(builtin), custom};
    auto it = opcodes_.find(key);
    if (it != opcodes_.end()) return it->second;
    auto c = std::make_unique<tflite::OperatorCodeT>();
    c->builtin_code = builtin;
    c->custom_code = custom;
    c->version = 1;
    model_.operator_codes.push_back(std::move(c));
    return opcodes_[key] = static_cast<uint32_t>(model_.operator_codes.size() - 1);
  }

  int32_t use(const std::string& name) {
    ++uses_[name];
    return index(name);
  }

  template <typename Options>
  std::string op(tflite::BuiltinOperator builtin, const std::vector<std::string>& inputs, const std::string& name,
                 const Shape& out, Options&& options) {
    auto o = std::make_unique<tflite::OperatorT>();
    o->opcode_index = opcode(builtin);
    for (const auto& i : inputs) o->inputs.push_back(use(i));
    o->outputs.push_back(tensor(name, out));
    if constexpr (!std::is_same_v<std::decay_t<Options>, tflite::BuiltinOptionsUnion>)
      o->builtin_options.Set(std::forward<Options>(options));
    producers_[name] = graph_->operators.size();
    graph_->operators.push_back(std::move(o));
    return name;
  }

  // The producing op's fused activation where it has one and nothing read x yet, else an op.
  std::string activation(const std::string& x, tflite::ActivationFunctionType fused, tflite::BuiltinOperator builtin,
                         const std::string& suffix) {
    auto it = producers_.find(x);
    if (it != producers_.end() && uses_[x] == 0) {
      auto& options = graph_->operators[it->second]->builtin_options;
      tflite::ActivationFunctionType* f = nullptr;
      if (auto* c = options.AsConv2DOptions()) f = &c->fused_activation_function;
      if (auto* d = options.AsDepthwiseConv2DOptions()) f = &d->fused_activation_function;
      if (auto* a = options.AsAddOptions()) f = &a->fused_activation_function;
      if (auto* fc = options.AsFullyConnectedOptions()) f = &fc->fused_activation_function;
      if (f && *f == tflite::ActivationFunctionType_NONE) {
        *f = fused;
        return x;
      }
    }
    return op(builtin, {x}, x + suffix, shape(x), tflite::BuiltinOptionsUnion{});
  }

  // As the TensorFlow graphs: 'SAME' or 'VALID' where TFLite's arithmetic is the same, else an
  // explicit PAD and 'VALID'.
  std::pair<std::string, tflite::Padding> padded(const std::string& name, const std::string& x, const ConvSpec& s,
                                                 const Pads& pads) {
    const Shape in = shape(x);
    if (pads == Pads{}) return {x, tflite::Padding_VALID};
    if (pads == same_pads(in[1], in[2], s)) return {x, tflite::Padding_SAME};
    const auto p = [&](int k) { return static_cast<int32_t>(pads[k]); };
    const std::string paddings = int32s(name + "/paddings", {0, 0, p(0), p(2), p(1), p(3), 0, 0});
    graph_->tensors[index(paddings)]->shape = {4, 2};
    const std::string out = op(tflite::BuiltinOperator_PAD, {x, paddings}, name + "/Pad",
                               {1, in[1] + p(0) + p(2), in[2] + p(1) + p(3), in[3]}, tflite::PadOptionsT{});
    return {out, tflite::Padding_VALID};
  }

  std::string pool(tflite::BuiltinOperator builtin, const std::string& name, const std::string& x, int64_t kernel,
                   int64_t stride, const Pads& pads, bool zero_pad_ok) {
    const Shape in = shape(x);
    ConvSpec s;
    s.kernel = {kernel, kernel};
    s.stride = {stride, stride};
    const bool same = pads == same_pads(in[1], in[2], s);
    if (!same && pads != Pads{} && !zero_pad_ok)
      throw Error("TFLite export: " + name + " max-pools a map that may be negative with padding 'SAME' does not give");
    auto [input, padding] = same ? std::pair{x, tflite::Padding_SAME} : padded(name, x, s, pads);
    tflite::Pool2DOptionsT o;
    o.padding = padding;
    o.stride_h = o.stride_w = static_cast<int32_t>(stride);
    o.filter_height = o.filter_width = static_cast<int32_t>(kernel);
    const auto [h, w] = conv_output_size(in[1], in[2], s, pads);
    return op(builtin, {input}, name, {1, static_cast<int32_t>(h), static_cast<int32_t>(w), in[3]}, std::move(o));
  }

  // uint8 throughout: each tensor's scale and zero point from its range (TF's nudging, as the
  // converter does with the FakeQuant ops' min and max); where training gave none, as TFLite's
  // kernels want them: the input's for reshapes, pads and pools, the union of the inputs' for a
  // concatenation, [0, 1) in 256 steps for sigmoid and softmax. Weights on their own range (narrow,
  // as contrib.quantize's weights_quant), biases int32 at input scale x weight scale.
  void quantize() {
    std::map<int32_t, layers::QuantRange> params;
    auto from_range = [&](const std::string& name) {
      auto it = ranges_.find(name);
      if (it == ranges_.end()) return std::optional<layers::QuantRange>();
      return std::optional<layers::QuantRange>(layers::nudge_range(it->second.first, it->second.second, 8, false));
    };
    for (int32_t i : graph_->inputs) {
      const auto r = from_range(graph_->tensors[i]->name);
      if (!r) throw Error("TFLite export: no quantization range for the input " + graph_->tensors[i]->name);
      params[i] = *r;
    }
    for (auto& op : graph_->operators) {
      const auto builtin = model_.operator_codes[op->opcode_index]->builtin_code;
      if (builtin == tflite::BuiltinOperator_CUSTOM) continue;  // float outputs (the detection op)
      const int32_t out = op->outputs.at(0);
      const std::string& name = graph_->tensors[out]->name;
      auto r = from_range(name);
      auto input = [&](size_t k) { return params.at(op->inputs.at(k)); };
      if (!r) {
        switch (builtin) {
          case tflite::BuiltinOperator_RESHAPE:
          case tflite::BuiltinOperator_RESIZE_NEAREST_NEIGHBOR:
          case tflite::BuiltinOperator_SLICE:
          case tflite::BuiltinOperator_PAD:
          case tflite::BuiltinOperator_MAX_POOL_2D:
          case tflite::BuiltinOperator_AVERAGE_POOL_2D:
          case tflite::BuiltinOperator_MEAN: r = input(0); break;
          case tflite::BuiltinOperator_LOGISTIC:
          case tflite::BuiltinOperator_SOFTMAX: r = layers::nudge_range(0.0f, 255.0f / 256.0f, 8, false); break;
          case tflite::BuiltinOperator_CONCATENATION: {
            float lo = 0, hi = 0;
            for (size_t k = 0; k < op->inputs.size(); ++k)
              lo = std::min(lo, input(k).min), hi = std::max(hi, input(k).max);
            r = layers::nudge_range(lo, hi, 8, false);
            break;
          }
          default:
            throw Error("TFLite export: no quantization range for " + name +
                        " (quantization-aware training gave none: is the model trained with graph_rewriter?)");
        }
      }
      params[out] = *r;
      if (builtin == tflite::BuiltinOperator_CONV_2D || builtin == tflite::BuiltinOperator_DEPTHWISE_CONV_2D ||
          builtin == tflite::BuiltinOperator_FULLY_CONNECTED) {
        const int32_t w = op->inputs.at(1), b = op->inputs.at(2);
        params[w] = quantize_weights(w);
        quantize_bias(b, input(0).scale * params[w].scale);
      }
    }
    for (const auto& [i, r] : params) {
      auto& t = *graph_->tensors[i];
      t.type = tflite::TensorType_UINT8;
      t.quantization = std::make_unique<tflite::QuantizationParametersT>();
      t.quantization->scale = {r.scale};
      t.quantization->zero_point = {r.zero_point};
      t.quantization->min = {r.min};
      t.quantization->max = {r.max};
    }
  }

  // A float constant as uint8 on the nudged grid of its own range (narrow: 1..255).
  layers::QuantRange quantize_weights(int32_t i) {
    auto& data = model_.buffers[graph_->tensors[i]->buffer]->data;
    const auto w = torch::from_blob(data.data(), {static_cast<int64_t>(data.size() / sizeof(float))}, torch::kFloat);
    const auto r = layers::nudge_range(std::min(0.0f, w.min().item<float>()), std::max(0.0f, w.max().item<float>()), 8,
                                       /*narrow_range=*/true);
    const auto q = (torch::floor((w.clamp(r.min, r.max) - r.min) / r.scale + 0.5) + r.quant_min).to(torch::kUInt8);
    data.assign(q.data_ptr<uint8_t>(), q.data_ptr<uint8_t>() + q.numel());
    return r;
  }

  // A float bias as int32 at `scale`, zero point 0.
  void quantize_bias(int32_t i, float scale) {
    auto& t = *graph_->tensors[i];
    auto& data = model_.buffers[t.buffer]->data;
    const auto b = torch::from_blob(data.data(), {static_cast<int64_t>(data.size() / sizeof(float))}, torch::kFloat);
    const auto q = torch::round(b.to(torch::kDouble) / scale).to(torch::kInt).contiguous();
    const auto* bytes = reinterpret_cast<const uint8_t*>(q.data_ptr<int32_t>());
    data.assign(bytes, bytes + q.numel() * static_cast<int64_t>(sizeof(int32_t)));
    t.type = tflite::TensorType_INT32;
    t.quantization = std::make_unique<tflite::QuantizationParametersT>();
    t.quantization->scale = {scale};
    t.quantization->zero_point = {0};
  }

  bool quantized_;
  std::map<std::string, std::pair<float, float>> ranges_;
  tflite::ModelT model_;
  tflite::SubGraphT* graph_ = nullptr;
  std::map<std::string, int32_t> tensors_;
  std::map<std::string, int> uses_;
  std::map<std::string, size_t> producers_;
  std::map<std::pair<int, std::string>, uint32_t> opcodes_;
};

}  // namespace

void export_tflite(models::ImageModelImpl& model, const TfGraphExportOptions& options, const std::string& path) {
  if (!options.probabilities.empty() && options.probabilities != "softmax" && options.probabilities != "sigmoid")
    throw Error("TFLite export: probabilities must be softmax, sigmoid or empty, not '" + options.probabilities + "'");
  torch::NoGradGuard no_grad;
  model.eval();
  TfliteWriter g;
  const auto size = static_cast<int32_t>(options.image_size);
  std::string input = g.input("images", {1, size, size, 3});
  if (options.include_preprocessing) {  // pixel * scale - offset[c]: a 1x1 depthwise convolution
    ConvSpec per_channel;
    per_channel.groups = 3;
    input = g.conv("preprocess", per_channel, torch::full({3, 1, 1, 1}, options.scale),
                   -torch::tensor({options.offset[0], options.offset[1], options.offset[2]}), input, Pads{});
  }
  image_model_graph(g, model, input, options.image_size, options.feature_vector);
  const std::string output = options.feature_vector ? "features" : "logits";
  g.output(output);
  if (!options.feature_vector && !options.probabilities.empty()) {
    options.probabilities == "softmax" ? g.softmax("probs", output) : g.sigmoid("probs", output);
    g.output("probs");
  }
  atomic_write_file(path, g.bytes());
}

void export_tflite_ssd(detect::SsdModelImpl& model, const at::Tensor& anchors, const TfliteDetectionOptions& options,
                       const std::string& path) {
  torch::NoGradGuard no_grad;
  check_ssd_exportable(model, options.height, options.width, options.score_converter, "TFLite");
  if (options.max_detections <= 0 || options.max_classes_per_detection <= 0 || options.detections_per_class <= 0)
    throw Error("TFLite export: max_detections, max_classes_per_detection and detections_per_class must be positive");
  model.eval();
  const auto& mo = model.options();
  if (options.quantized && !model.quantization())
    throw Error(
        "TFLite export: a uint8 model needs the ranges of quantization-aware training (graph_rewriter "
        "{ quantization { ... } } in the pipeline.config the model was trained with)");
  TfliteWriter g(options.quantized);
  const auto h = static_cast<int32_t>(options.height), w = static_cast<int32_t>(options.width);
  const std::string input = g.input("normalized_input_image_tensor", {1, h, w, 3});
  // The converter's --mean_values 128 --std_dev_values 128: uint8 q is (q - 128) / 128.
  g.quantization_range(input, -1.0f, 127.0f / 128.0f);
  const auto maps = ssd_feature_maps(g, model, input, options.height, options.width);
  // The box predictor as in the TensorFlow graph, [1, A, code] per map, concatenated.
  const SsdPredictions predictions =
      ssd_box_predictor(g, model, maps, options.height, options.width, "raw_outputs/box_encodings", "concat_1");
  const std::string box_encodings = predictions.box_encodings;
  std::string scores = predictions.class_logits;
  const int64_t num_anchors = predictions.num_anchors;
  if (options.score_converter == "SIGMOID") scores = g.sigmoid("raw_outputs/class_predictions", scores);
  else if (options.score_converter == "SOFTMAX") scores = g.softmax("raw_outputs/class_predictions", scores);
  else scores = g.reshape("raw_outputs/class_predictions", scores, g.shape(scores));

  const auto an = anchors.to(torch::kCPU, torch::kFloat).contiguous();
  if (an.dim() != 2 || an.size(0) != num_anchors || an.size(1) != 4)
    throw Error("TFLite export: " + std::to_string(num_anchors) + " anchors expected for " +
                std::to_string(options.height) + "x" + std::to_string(options.width) + " input");
  if (!options.add_postprocessing_op) {
    g.output(box_encodings);
    g.output(scores);
    atomic_write_file(path, g.bytes());
    return;
  }
  // The anchors as the op reads them (export_tflite_ssd_graph's get_const_center_size_encoded_anchors).
  const auto ha = an.select(1, 2) - an.select(1, 0), wa = an.select(1, 3) - an.select(1, 1);
  const std::string center_size =
      g.constant("anchors", torch::stack({an.select(1, 0) + ha / 2, an.select(1, 1) + wa / 2, ha, wa}, 1));
  flexbuffers::Builder fbb;
  fbb.Map([&] {
    fbb.Int("max_detections", options.max_detections);
    fbb.Int("max_classes_per_detection", options.max_classes_per_detection);
    fbb.Int("detections_per_class", options.detections_per_class);
    fbb.Bool("use_regular_nms", options.use_regular_nms);
    fbb.Float("nms_score_threshold", options.nms_score_threshold);
    fbb.Float("nms_iou_threshold", options.nms_iou_threshold);
    fbb.Int("num_classes", mo.num_classes);
    fbb.Float("y_scale", options.box_coder_scales[0]);
    fbb.Float("x_scale", options.box_coder_scales[1]);
    fbb.Float("h_scale", options.box_coder_scales[2]);
    fbb.Float("w_scale", options.box_coder_scales[3]);
  });
  fbb.Finish();
  const auto n = static_cast<int32_t>(options.max_detections);
  const std::string op = "TFLite_Detection_PostProcess";
  for (const auto& out :
       g.custom(op, {box_encodings, scores, center_size},
                {{op, {1, n, 4}}, {op + ":1", {1, n}}, {op + ":2", {1, n}}, {op + ":3", {1}}}, fbb.GetBuffer()))
    g.output(out);
  atomic_write_file(path, g.bytes());
}

}  // namespace orchard::exporting
