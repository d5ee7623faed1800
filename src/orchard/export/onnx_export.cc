#include "orchard/export/onnx_export.h"

#include <onnx/onnx_pb.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/export/model_graphs.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/models/mobilenet_v1.h"
#include "orchard/models/mobilenet_v2.h"

namespace orchard::exporting {
namespace {

// GraphWriter for ONNX (NCHW, torch's weight layout as is), plus the raw node and initializer
// calls the SSD's decoding below is written with.
class OnnxWriter : public GraphWriter {
 public:
  explicit OnnxWriter(onnx::GraphProto* graph) : graph_(graph) {}

  // A float initializer (little-endian raw data) named `name`.
  std::string constant(const std::string& name, const torch::Tensor& value) {
    auto t = value.detach().to(torch::kCPU, torch::kFloat).contiguous();
    auto* init = graph_->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : t.sizes()) init->add_dims(d);
    init->set_raw_data(std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * 4));
    return name;
  }

  // An int64 initializer (shapes, Slice bounds).
  std::string int64s(const std::string& name, const std::vector<int64_t>& values) {
    auto* init = graph_->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::INT64);
    init->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) init->add_int64_data(v);
    return name;
  }

  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output) {
    auto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const auto& i : inputs) n->add_input(i);
    n->add_output(output);
    return n;
  }

  static void ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& values) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }
  static void real(onnx::NodeProto* n, const std::string& name, float value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  static void integer(onnx::NodeProto* n, const std::string& name, int64_t value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }

  std::string conv(const std::string& name, const ConvSpec& s, const at::Tensor& weight, const at::Tensor& bias,
                   const std::string& x, const Pads& pads) override {
    auto* n = node("Conv", {x, constant(name + ".weight", weight), constant(name + ".bias", bias)}, name);
    ints(n, "kernel_shape", {s.kernel[0], s.kernel[1]});
    ints(n, "strides", {s.stride[0], s.stride[1]});
    ints(n, "dilations", {s.dilation[0], s.dilation[1]});
    ints(n, "pads", {pads[0], pads[1], pads[2], pads[3]});
    if (s.groups != 1) integer(n, "group", s.groups);
    return name;
  }

  // ReLU6: Clip to [0, 6] (bounds as attributes, opset < 11).
  std::string relu6(const std::string& x) override {
    auto* n = node("Clip", {x}, x + ".relu6");
    real(n, "min", 0.0f);
    real(n, "max", 6.0f);
    return n->output(0);
  }
  std::string relu(const std::string& x) override { return node("Relu", {x}, x + ".relu")->output(0); }
  std::string add(const std::string& name, const std::string& a, const std::string& b) override {
    return node("Add", {a, b}, name)->output(0);
  }
  std::string concat_channels(const std::string& name, const std::vector<std::string>& inputs) override {
    integer(node("Concat", inputs, name), "axis", 1);
    return name;
  }
  std::string flatten_anchors(const std::string& name, const std::string& x, int64_t anchors, int64_t code) override {
    ints(node("Transpose", {x}, name + ".nhwc"), "perm", {0, 2, 3, 1});
    return node("Reshape", {name + ".nhwc", int64s(name + ".shape", {-1, anchors, code})}, name)->output(0);
  }
  std::string concat_anchors(const std::string& name, const std::vector<std::string>& inputs) override {
    if (inputs.size() == 1) return node("Identity", inputs, name)->output(0);
    integer(node("Concat", inputs, name), "axis", 1);
    return name;
  }
  // Resize (opset 10: X, scales) by 2, nearest; a Slice where the map is cropped.
  std::string upsample2x(const std::string& name, const std::string& x, int64_t h, int64_t w, int64_t out_h,
                         int64_t out_w) override {
    const bool crop = out_h != 2 * h || out_w != 2 * w;
    auto* n = node("Resize", {x, constant(name + ".scales", torch::tensor({1.0f, 1.0f, 2.0f, 2.0f}))},
                   crop ? name + ".full" : name);
    auto* mode = n->add_attribute();
    mode->set_name("mode");
    mode->set_type(onnx::AttributeProto::STRING);
    mode->set_s("nearest");
    if (!crop) return name;
    return node("Slice",
                {name + ".full", int64s(name + ".starts", {0, 0}), int64s(name + ".ends", {out_h, out_w}),
                 int64s(name + ".axes", {2, 3})},
                name)
        ->output(0);
  }
  std::string max_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t stride, const Pads& pads,
                       bool /*nonnegative*/) override {
    return pool("MaxPool", name, x, kernel, stride, pads);
  }
  // torch's count_include_pad: an explicit zero Pad and an unpadded AveragePool, which every
  // consumer reads the same (OpenCV 4.6 ignores count_include_pad); TensorFlow's: AveragePool's
  // own count_include_pad 0 (OpenCV's importer pads that way for any producer but PyTorch).
  std::string avg_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t pad,
                       bool count_include_pad) override {
    if (!count_include_pad) return pool("AveragePool", name, x, kernel, 1, {pad, pad, pad, pad});
    ints(node("Pad", {x}, name + ".pad"), "pads", {0, 0, pad, pad, 0, 0, pad, pad});  // mode constant, value 0
    return pool("AveragePool", name, name + ".pad", kernel, 1, Pads{});
  }
  std::string global_avg_pool(const std::string& name, const std::string& x) override {
    node("GlobalAveragePool", {x}, name + ".pool");
    integer(node("Flatten", {name + ".pool"}, name), "axis", 1);
    return name;
  }
  std::string dense(const std::string& name, const std::string& x, const at::Tensor& weight,
                    const at::Tensor& bias) override {
    integer(node("Gemm", {x, constant(name + ".weight", weight), constant(name + ".bias", bias)}, name), "transB", 1);
    return name;
  }

 private:
  std::string pool(const std::string& op, const std::string& name, const std::string& x, int64_t kernel, int64_t stride,
                   const Pads& pads) {
    auto* n = node(op, {x}, name);
    ints(n, "kernel_shape", {kernel, kernel});
    ints(n, "strides", {stride, stride});
    ints(n, "pads", {pads[0], pads[1], pads[2], pads[3]});
    return name;
  }

  onnx::GraphProto* graph_;
};

void value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::string>& symbolic,
                const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = t->mutable_shape();
  for (const auto& sym : symbolic) shape->add_dim()->set_dim_param(sym);
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

// A model proto at kOnnxOpset with its graph input "images" [batch, 3, height, width] and,
// with include_preprocessing, pixel * scale - offset[c] as a per-channel (grouped) 1x1
// convolution: one node every consumer runs (OpenCV 4.6 rejects Mul / Add on the graph input
// with [1, 3, 1, 1] constants). Returns the name of the model's input.
std::string begin_model(onnx::ModelProto& proto, OnnxWriter& g, int64_t height, int64_t width,
                        bool include_preprocessing, float scale, const std::array<float, 3>& offset) {
  proto.set_ir_version(onnx::IR_VERSION_2019_3_18);  // IR 5, the opset 10 era
  proto.set_producer_name("orchard");
  proto.set_producer_version("1");
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  value_info(proto.mutable_graph()->add_input(), "images", {"batch"}, {3, height, width});
  if (!include_preprocessing) return "images";
  ConvSpec per_channel;
  per_channel.groups = 3;
  return g.conv("preprocess", per_channel, torch::full({3, 1, 1, 1}, scale),
                -torch::tensor({offset[0], offset[1], offset[2]}), "images", Pads{});
}

void save_model(const onnx::ModelProto& proto, const std::string& path) {
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) throw Error("ONNX export: cannot serialise the model");
  atomic_write_file(path, bytes);
}

}  // namespace

void export_onnx(models::ImageModelImpl& model, const OnnxExportOptions& options, const std::string& path) {
  torch::NoGradGuard no_grad;
  onnx::ModelProto proto;
  auto* graph = proto.mutable_graph();
  graph->set_name("orchard");
  OnnxWriter g(graph);
  const std::string input = begin_model(proto, g, options.image_size, options.image_size, options.include_preprocessing,
                                        options.scale, options.offset);
  const int64_t outputs = image_model_graph(g, model, input, options.image_size, options.feature_vector);
  value_info(graph->add_output(), options.feature_vector ? "features" : "logits", {"batch"}, {outputs});
  save_model(proto, path);
}

void export_detection_onnx(detect::SsdModelImpl& model, const at::Tensor& anchors, const DetectionOnnxOptions& options,
                           const std::string& path) {
  torch::NoGradGuard no_grad;
  check_ssd_exportable(model, options.height, options.width, options.score_converter, "ONNX");
  const auto& mo = model.options();
  onnx::ModelProto proto;
  auto* graph = proto.mutable_graph();
  graph->set_name(mo.feature_extractor);
  OnnxWriter g(graph);
  const std::string input = begin_model(proto, g, options.height, options.width, options.include_preprocessing,
                                        options.scale, options.offset);
  const std::vector<std::string> maps = ssd_feature_maps(g, model, input, options.height, options.width);
  // The heads, [B, A_i, code] each, concatenated over the maps in the anchor generator's order.
  const bool identity = options.score_converter == "IDENTITY_WITH_LOGITS";
  const SsdPredictions predictions = ssd_box_predictor(g, model, maps, options.height, options.width, "box_encodings",
                                                       identity ? "raw_detection_scores" : "class_predictions");
  const int64_t num_anchors = predictions.num_anchors;
  if (options.score_converter == "SIGMOID") g.node("Sigmoid", {"class_predictions"}, "raw_detection_scores");
  if (options.score_converter == "SOFTMAX")
    OnnxWriter::integer(g.node("Softmax", {"class_predictions"}, "raw_detection_scores"), "axis", 2);

  // FasterRcnnBoxCoder decoding against the anchors (ymin, xmin, ymax, xmax):
  //   (yc, xc) = (ty, tx) * (ha / y_scale, wa / x_scale) + (yc_a, xc_a)
  //   (h, w) / 2 = exp((th, tw) / (height_scale, width_scale)) * (ha, wa) / 2
  //   box = (yc, xc) -+ (h, w) / 2
  // Every constant is [A, 2], the shape every consumer broadcasts the same way.
  const auto an = anchors.to(torch::kCPU, torch::kFloat).contiguous();
  if (an.dim() != 2 || an.size(0) != num_anchors || an.size(1) != 4)
    throw Error("ONNX export: " + std::to_string(num_anchors) + " anchors expected for " +
                std::to_string(options.height) + "x" + std::to_string(options.width) + " input");
  const auto ha = an.select(1, 2) - an.select(1, 0), wa = an.select(1, 3) - an.select(1, 1);
  const auto yc = an.select(1, 0) + ha / 2, xc = an.select(1, 1) + wa / 2;
  const auto& sc = options.box_coder_scales;
  auto slice = [&](const std::string& name, int64_t begin) {
    return g
        .node("Slice",
              {"box_encodings", g.int64s(name + ".starts", {begin}), g.int64s(name + ".ends", {begin + 2}),
               g.int64s(name + ".axes", {2})},
              name)
        ->output(0);
  };
  auto mul = [&](const std::string& name, const std::string& v, const torch::Tensor& c) {
    return g.node("Mul", {v, g.constant(name + ".factor", c)}, name)->output(0);
  };
  const std::string center_scaled =
      mul("decode.center_scaled", slice("decode.center_codes", 0), torch::stack({ha / sc[0], wa / sc[1]}, 1));
  const std::string center =
      g.node("Add", {center_scaled, g.constant("decode.anchor_centers", torch::stack({yc, xc}, 1))}, "decode.center")
          ->output(0);
  const std::string log_size = mul("decode.log_size", slice("decode.size_codes", 2),
                                   torch::stack({torch::full_like(ha, 1 / sc[2]), torch::full_like(wa, 1 / sc[3])}, 1));
  const std::string half = mul("decode.half_size", g.node("Exp", {log_size}, "decode.size_ratio")->output(0),
                               torch::stack({ha / 2, wa / 2}, 1));
  g.node("Sub", {center, half}, "decode.min");
  g.node("Add", {center, half}, "decode.max");
  OnnxWriter::integer(g.node("Concat", {"decode.min", "decode.max"}, "raw_detection_boxes"), "axis", 2);

  value_info(graph->add_output(), "raw_detection_boxes", {"batch"}, {num_anchors, 4});
  value_info(graph->add_output(), "raw_detection_scores", {"batch"}, {num_anchors, mo.num_classes + 1});
  save_model(proto, path);
}

}  // namespace orchard::exporting
