#include "orchard/export/tf_graph_export.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <utility>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/export/model_graphs.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/proto/tensorflow/graph.pb.h"

namespace orchard::exporting {
namespace {

using tensorflow::AttrValue;
using tensorflow::NodeDef;

// The GraphDef version the graph declares: later than every op used here (AddV2 the newest).
constexpr int kGraphDefProducer = 134;

// GraphWriter for TensorFlow: NHWC, HWIO filters ([kh, kw, in, multiplier] for depthwise ones),
// every op with its attrs as TensorFlow's op registry names them. It keeps each tensor's shape,
// since 'SAME' depends on the input size.
class TfGraphWriter : public GraphWriter {
 public:
  explicit TfGraphWriter(tensorflow::GraphDef* graph) : graph_(graph) {
    graph_->mutable_versions()->set_producer(kGraphDefProducer);
  }

  std::string placeholder(const std::string& name, int64_t h, int64_t w, int64_t c) {
    auto* n = node("Placeholder", name, {});
    (*n->mutable_attr())["dtype"].set_type(tensorflow::DT_FLOAT);
    auto* shape = (*n->mutable_attr())["shape"].mutable_shape();
    for (int64_t d : {int64_t{-1}, h, w, c}) shape->add_dim()->set_size(d);
    shapes_[name] = {h, w, c};
    return name;
  }

  std::string conv(const std::string& name, const ConvSpec& s, const at::Tensor& weight, const at::Tensor& bias,
                   const std::string& x, const Pads& pads) override {
    const Shape in = shape(x);
    const int64_t out_channels = weight.size(0);
    const bool depthwise = s.groups > 1 && s.groups == in.c && weight.size(1) == 1;
    if (s.groups != 1 && !depthwise)
      throw Error("TensorFlow export: " + name + " is a grouped convolution (" + std::to_string(s.groups) +
                  " groups), which TensorFlow has no standard op for");
    auto [input, padding] = padded(name, x, in, s, pads);
    const auto w = depthwise
                       ? weight.reshape({in.c, out_channels / in.c, s.kernel[0], s.kernel[1]}).permute({2, 3, 0, 1})
                       : weight.permute({2, 3, 1, 0});
    auto* n = node(depthwise ? "DepthwiseConv2dNative" : "Conv2D", name + (depthwise ? "/depthwise" : "/Conv2D"),
                   {input, constant(name + "/weights", w)});
    type(n, "T");
    ints(n, "strides", {1, s.stride[0], s.stride[1], 1});
    ints(n, "dilations", {1, s.dilation[0], s.dilation[1], 1});
    string(n, "padding", padding);
    string(n, "data_format", "NHWC");
    if (!depthwise) (*n->mutable_attr())["use_cudnn_on_gpu"].set_b(true);
    auto* b = node("BiasAdd", name + "/BiasAdd", {n->name(), constant(name + "/biases", bias)});
    type(b, "T");
    string(b, "data_format", "NHWC");
    const auto [out_h, out_w] = conv_output_size(in.h, in.w, s, pads);  // 'SAME' or explicit: the same size
    shapes_[b->name()] = {out_h, out_w, out_channels};
    return b->name();
  }

  std::string relu(const std::string& x) override { return unary("Relu", x + "/Relu", x); }
  std::string relu6(const std::string& x) override { return unary("Relu6", x + "/Relu6", x); }

  std::string add(const std::string& name, const std::string& a, const std::string& b) override {
    type(node("AddV2", name, {a, b}), "T");
    shapes_[name] = shape(a);
    return name;
  }

  std::string concat_channels(const std::string& name, const std::vector<std::string>& inputs) override {
    std::vector<std::string> in = inputs;
    Shape out = shape(inputs.front());
    out.c = 0;
    for (const auto& i : inputs) out.c += shape(i).c;
    in.push_back(int32s(name + "/axis", {3}, {}));
    auto* n = node("ConcatV2", name, in);
    (*n->mutable_attr())["N"].set_i(static_cast<int64_t>(inputs.size()));
    type(n, "T");
    (*n->mutable_attr())["Tidx"].set_type(tensorflow::DT_INT32);
    shapes_[name] = out;
    return name;
  }

  // Padding TensorFlow's 'SAME' does not give is a zero Pad, which never wins on x >= 0 (PadV2
  // with -inf would serve any x, but OpenCV's importer has no PadV2).
  std::string max_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t stride, const Pads& pads,
                       bool nonnegative) override {
    return pool("MaxPool", name, x, kernel, stride, pads, nonnegative);
  }

  // TensorFlow's 'SAME' average leaves the padding out. torch's count_include_pad is the same
  // sum over the zero-padded window divided by k * k always: a depthwise convolution with weights
  // 1 / (k * k) (a zero Pad before a 'VALID' AvgPool would say the same, but OpenCV's importer
  // merges the Pad into the pool and then leaves it out of the averages).
  std::string avg_pool(const std::string& name, const std::string& x, int64_t kernel, int64_t pad,
                       bool count_include_pad) override {
    if (count_include_pad) {
      const int64_t channels = shape(x).c;
      ConvSpec s;
      s.kernel = {kernel, kernel};
      s.groups = channels;
      return conv(name, s, torch::full({channels, 1, kernel, kernel}, 1.0 / static_cast<double>(kernel * kernel)),
                  torch::zeros({channels}), x, Pads{pad, pad, pad, pad});
    }
    ConvSpec s;
    s.kernel = {kernel, kernel};
    if (same_pads(shape(x).h, shape(x).w, s) != Pads{pad, pad, pad, pad})
      throw Error("TensorFlow export: " + name + " averages without its padding where TF's 'SAME' would pad otherwise");
    return pool("AvgPool", name, x, kernel, 1, Pads{pad, pad, pad, pad}, true);
  }

  std::string global_avg_pool(const std::string& name, const std::string& x) override {
    auto* n = node("Mean", name, {x, int32s(name + "/reduction_indices", {1, 2}, {2})});
    type(n, "T");
    (*n->mutable_attr())["Tidx"].set_type(tensorflow::DT_INT32);
    (*n->mutable_attr())["keep_dims"].set_b(false);
    shapes_[name] = {0, 0, shape(x).c};
    return name;
  }

  std::string dense(const std::string& name, const std::string& x, const at::Tensor& weight,
                    const at::Tensor& bias) override {
    auto* m = node("MatMul", name + "/MatMul", {x, constant(name + "/weights", weight.t())});
    type(m, "T");
    (*m->mutable_attr())["transpose_a"].set_b(false);
    (*m->mutable_attr())["transpose_b"].set_b(false);
    auto* b = node("BiasAdd", name, {m->name(), constant(name + "/biases", bias)});
    type(b, "T");
    string(b, "data_format", "NHWC");
    shapes_[name] = {0, 0, weight.size(0)};
    return name;
  }

  // Reshape to [-1, anchors, code]: NHWC is already the anchor generator's order.
  std::string flatten_anchors(const std::string& name, const std::string& x, int64_t anchors, int64_t code) override {
    auto* r = node("Reshape", name,
                   {x, int32s(name + "/shape", {-1, static_cast<int32_t>(anchors), static_cast<int32_t>(code)}, {})});
    type(r, "T");
    (*r->mutable_attr())["Tshape"].set_type(tensorflow::DT_INT32);
    return name;
  }

  // ConcatV2 on axis 1 (one input: an Identity; ConcatV2 takes two or more).
  std::string concat_anchors(const std::string& name, const std::vector<std::string>& inputs) override {
    if (inputs.size() == 1) {
      type(node("Identity", name, inputs), "T");
      return name;
    }
    std::vector<std::string> in = inputs;
    in.push_back(int32s(name + "/axis", {1}, {}));
    auto* c = node("ConcatV2", name, in);
    type(c, "T");
    (*c->mutable_attr())["N"].set_i(static_cast<int64_t>(inputs.size()));
    (*c->mutable_attr())["Tidx"].set_type(tensorflow::DT_INT32);
    return name;
  }

  // ResizeNearestNeighbor to 2h x 2w (no half-pixel centres: pixel i reads i / 2), then a Slice
  // where the map is cropped.
  std::string upsample2x(const std::string& name, const std::string& x, int64_t h, int64_t w, int64_t out_h,
                         int64_t out_w) override {
    const int64_t c = shape(x).c;
    const bool crop = out_h != 2 * h || out_w != 2 * w;
    const std::string full = crop ? name + "/full" : name;
    auto* r = node("ResizeNearestNeighbor", full,
                   {x, int32s(full + "/size", {static_cast<int32_t>(2 * h), static_cast<int32_t>(2 * w)}, {})});
    type(r, "T");
    (*r->mutable_attr())["align_corners"].set_b(false);
    (*r->mutable_attr())["half_pixel_centers"].set_b(false);
    if (crop) {
      auto* sl = node("Slice", name,
                      {full, int32s(name + "/begin", {0, 0, 0, 0}, {}),
                       int32s(name + "/size", {-1, static_cast<int32_t>(out_h), static_cast<int32_t>(out_w), -1}, {})});
      type(sl, "T");
      (*sl->mutable_attr())["Index"].set_type(tensorflow::DT_INT32);
    }
    shapes_[name] = {out_h, out_w, c};
    return name;
  }

  std::string unary(const std::string& op, const std::string& name, const std::string& x) {
    type(node(op, name, {x}), "T");
    shapes_[name] = shape(x);
    return name;
  }

 private:
  struct Shape {
    int64_t h = 0, w = 0, c = 0;  // [N, h, w, c]; h = w = 0: [N, c]
  };

  const Shape& shape(const std::string& x) const {
    auto it = shapes_.find(x);
    if (it == shapes_.end()) throw Error("TensorFlow export: no tensor " + x + " in the graph");
    return it->second;
  }

  // The input and the padding attr for a window with explicit zero `pads`: 'SAME' or 'VALID'
  // where TensorFlow's arithmetic is the same, else an explicit Pad and 'VALID'.
  std::pair<std::string, std::string> padded(const std::string& name, const std::string& x, const Shape& in,
                                             const ConvSpec& s, const Pads& pads) {
    if (pads == Pads{}) return {x, "VALID"};
    if (pads == same_pads(in.h, in.w, s)) return {x, "SAME"};
    const std::string paddings = int32s(name + "/paddings",
                                        {0, 0, static_cast<int32_t>(pads[0]), static_cast<int32_t>(pads[2]),
                                         static_cast<int32_t>(pads[1]), static_cast<int32_t>(pads[3]), 0, 0},
                                        {4, 2});
    auto* n = node("Pad", name + "/Pad", {x, paddings});
    type(n, "T");
    (*n->mutable_attr())["Tpaddings"].set_type(tensorflow::DT_INT32);
    shapes_[n->name()] = {in.h + pads[0] + pads[2], in.w + pads[1] + pads[3], in.c};
    return {n->name(), "VALID"};
  }

  // `zero_pad_ok`: explicit padding may be zeros.
  std::string pool(const std::string& op, const std::string& name, const std::string& x, int64_t kernel, int64_t stride,
                   const Pads& pads, bool zero_pad_ok) {
    const Shape in = shape(x);
    ConvSpec s;
    s.kernel = {kernel, kernel};
    s.stride = {stride, stride};
    // TensorFlow's 'SAME' pools never let the padding win (max) nor count it (average).
    const bool same = pads == same_pads(in.h, in.w, s);
    if (!same && pads != Pads{} && !zero_pad_ok)
      throw Error("TensorFlow export: " + name +
                  " max-pools a map that may be negative with padding TF's 'SAME' does not give");
    auto [input, padding] = same ? std::pair{x, std::string("SAME")} : padded(name, x, in, s, pads);
    auto* n = node(op, name, {input});
    type(n, "T");
    ints(n, "ksize", {1, kernel, kernel, 1});
    ints(n, "strides", {1, stride, stride, 1});
    string(n, "padding", padding);
    string(n, "data_format", "NHWC");
    const auto [h, w] = conv_output_size(in.h, in.w, s, pads);
    shapes_[name] = {h, w, in.c};
    return name;
  }

 public:
  // The raw node and constant calls, for the graphs' own ops (the detector's decoding).
  void set_shape(const std::string& name, int64_t h, int64_t w, int64_t c) { shapes_[name] = {h, w, c}; }

  NodeDef* node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs) {
    if (!names_.insert(name).second) throw Error("TensorFlow export: two nodes named " + name);
    auto* n = graph_->add_node();
    n->set_op(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    return n;
  }

  // A float Const (little-endian tensor_content).
  std::string constant(const std::string& name, const at::Tensor& value) {
    const auto t = value.detach().to(torch::kCPU, torch::kFloat).contiguous();
    auto* n = node("Const", name, {});
    (*n->mutable_attr())["dtype"].set_type(tensorflow::DT_FLOAT);
    auto* tensor = (*n->mutable_attr())["value"].mutable_tensor();
    tensor->set_dtype(tensorflow::DT_FLOAT);
    for (int64_t d : t.sizes()) tensor->mutable_tensor_shape()->add_dim()->set_size(d);
    tensor->set_tensor_content(
        std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * sizeof(float)));
    return name;
  }

  // An int32 Const of `shape` ({}: a vector of the values' length).
  std::string int32s(const std::string& name, const std::vector<int32_t>& values, const std::vector<int64_t>& shape) {
    auto* n = node("Const", name, {});
    (*n->mutable_attr())["dtype"].set_type(tensorflow::DT_INT32);
    auto* tensor = (*n->mutable_attr())["value"].mutable_tensor();
    tensor->set_dtype(tensorflow::DT_INT32);
    auto* dims = tensor->mutable_tensor_shape();
    if (shape.empty() && values.size() != 1) dims->add_dim()->set_size(static_cast<int64_t>(values.size()));
    for (int64_t d : shape) dims->add_dim()->set_size(d);
    for (int32_t v : values) tensor->add_int_val(v);
    return name;
  }

  static void type(NodeDef* n, const std::string& attr) { (*n->mutable_attr())[attr].set_type(tensorflow::DT_FLOAT); }
  static void string(NodeDef* n, const std::string& attr, const std::string& value) {
    (*n->mutable_attr())[attr].set_s(value);
  }
  static void ints(NodeDef* n, const std::string& attr, const std::vector<int64_t>& values) {
    auto* list = (*n->mutable_attr())[attr].mutable_list();
    for (int64_t v : values) list->add_i(v);
  }

 private:
  tensorflow::GraphDef* graph_;
  std::map<std::string, Shape> shapes_;
  std::set<std::string> names_;
};

struct ImageGraph {
  tensorflow::GraphDef graph;
  std::string output;
  int64_t width = 0;
};

ImageGraph image_graph(models::ImageModelImpl& model, const TfGraphExportOptions& options) {
  if (!options.probabilities.empty() && options.probabilities != "softmax" && options.probabilities != "sigmoid")
    throw Error("TensorFlow export: probabilities must be softmax, sigmoid or empty, not '" + options.probabilities +
                "'");
  torch::NoGradGuard no_grad;
  model.eval();
  ImageGraph result;
  TfGraphWriter g(&result.graph);
  std::string input = g.placeholder("images", options.image_size, options.image_size, 3);
  if (options.include_preprocessing) {  // pixel * scale - offset[c]: a 1x1 depthwise convolution
    ConvSpec per_channel;
    per_channel.groups = 3;
    input = g.conv("preprocess", per_channel, torch::full({3, 1, 1, 1}, options.scale),
                   -torch::tensor({options.offset[0], options.offset[1], options.offset[2]}), input, Pads{});
  }
  result.width = image_model_graph(g, model, input, options.image_size, options.feature_vector);
  result.output = options.feature_vector ? "features" : "logits";
  if (!options.feature_vector && !options.probabilities.empty())
    g.unary(options.probabilities == "softmax" ? "Softmax" : "Sigmoid", "probs", "logits");
  return result;
}

// Map entries (attrs, signatures) in key order, so that an export is the same bytes every time.
std::string serialize(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    if (!message.SerializeToCodedStream(&coded)) throw Error("TensorFlow export: cannot serialise the graph");
  }
  return bytes;
}

tensorflow::TensorInfo tensor_info(const std::string& node, const std::vector<int64_t>& dims,
                                   tensorflow::DataType dtype = tensorflow::DT_FLOAT) {
  tensorflow::TensorInfo info;
  info.set_name(node + ":0");
  info.set_dtype(dtype);
  for (int64_t d : dims) info.mutable_tensor_shape()->add_dim()->set_size(d);
  return info;
}

// A SavedModel folder as the OD API's exporter writes its frozen ones: saved_model.pb (written
// last, atomically) with `graph` under the "serve" tag and a serving_default signature
// (tensorflow/serving/predict), and an empty variables/ (the weights are constants in the graph).
void write_saved_model(const std::string& dir, tensorflow::GraphDef graph,
                       const std::map<std::string, tensorflow::TensorInfo>& inputs,
                       const std::map<std::string, tensorflow::TensorInfo>& outputs) {
  tensorflow::SavedModel saved;
  saved.set_saved_model_schema_version(1);
  auto* meta = saved.add_meta_graphs();
  meta->mutable_meta_info_def()->add_tags("serve");
  meta->mutable_meta_info_def()->set_meta_graph_version("orchard");
  *meta->mutable_graph_def() = std::move(graph);
  auto& signature = (*meta->mutable_signature_def())["serving_default"];
  signature.set_method_name("tensorflow/serving/predict");
  signature.mutable_inputs()->insert(inputs.begin(), inputs.end());
  signature.mutable_outputs()->insert(outputs.begin(), outputs.end());
  const std::string bytes = serialize(saved);
  ensure_writable_dir(dir);
  ensure_writable_dir(join_path(dir, "variables"));
  atomic_write_file(join_path(dir, "saved_model.pb"), bytes);
}

// A scalar or [n] float Const.
std::string floats(TfGraphWriter& g, const std::string& name, const std::vector<float>& values) {
  return g.constant(name, values.size() == 1 ? torch::tensor(values[0]) : torch::tensor(values));
}

NodeDef* typed(NodeDef* n) {
  (*n->mutable_attr())["T"].set_type(tensorflow::DT_FLOAT);
  return n;
}

// An attr of type `t` (DT_INT32, DT_FLOAT, ...).
void type_attr(NodeDef* n, const std::string& attr, tensorflow::DataType t) { (*n->mutable_attr())[attr].set_type(t); }

// The OD API's post_processing for one image (batch 1), in TensorFlow's own ops, as
// multiclass_non_max_suppression computes it (detect::multiclass_nms): per class c (column c of
// the scores, 1..classes), NonMaxSuppressionV3 with the score threshold, the IoU threshold and
// max_detections_per_class; all classes' boxes clipped to the image, those left without area
// dropped, the best max_total_detections by score (TopKV2: ties to the lower class, then NMS
// order), padded with zeros to max_total_detections. Outputs detection_boxes [1, max_total, 4],
// detection_scores [1, max_total], detection_classes [1, max_total] (1-based, float) and
// num_detections [1] (float), the OD API's names.
void nms_outputs(TfGraphWriter& g, const std::string& boxes, const std::string& scores, int64_t classes,
                 const DetectionGraphOptions& o) {
  const std::string p = "Postprocessor/BatchMultiClassNonMaxSuppression/";
  auto op = [&](const std::string& type, const std::string& name, const std::vector<std::string>& inputs) {
    return g.node(type, p + name, inputs);
  };
  auto i32 = [&](const std::string& name, std::vector<int32_t> v) { return g.int32s(p + name, v, {}); };
  auto squeeze = [&](const std::string& name, const std::string& x) {
    auto* n = typed(op("Squeeze", name, {x}));
    (*n->mutable_attr())["squeeze_dims"].mutable_list()->add_i(0);
    return n->name();
  };
  auto gather = [&](const std::string& name, const std::string& params, const std::string& indices,
                    tensorflow::DataType params_type, const std::string& axis) {
    auto* n = op("GatherV2", name, {params, indices, axis});
    type_attr(n, "Tparams", params_type);
    type_attr(n, "Tindices", tensorflow::DT_INT32);
    type_attr(n, "Taxis", tensorflow::DT_INT32);
    (*n->mutable_attr())["batch_dims"].set_i(0);
    return n->name();
  };
  auto concat = [&](const std::string& name, std::vector<std::string> inputs, tensorflow::DataType t) {
    const size_t n = inputs.size();
    inputs.push_back(i32(name + "/axis", {0}));
    auto* c = op("ConcatV2", name, inputs);
    (*c->mutable_attr())["N"].set_i(static_cast<int64_t>(n));
    type_attr(c, "T", t);
    type_attr(c, "Tidx", tensorflow::DT_INT32);
    return c->name();
  };
  auto binary = [&](const std::string& type, const std::string& name, const std::string& a, const std::string& b,
                    tensorflow::DataType t = tensorflow::DT_FLOAT) {
    auto* n = op(type, name, {a, b});
    type_attr(n, "T", t);
    return n->name();
  };
  const std::string boxes2d = squeeze("boxes", boxes), scores2d = squeeze("scores", scores);
  const std::string zero = i32("zero", {0}), one = i32("one", {1});
  const std::string max_per_class = i32("max_detections_per_class", {static_cast<int32_t>(o.max_detections_per_class)});
  const std::string iou = floats(g, p + "iou_threshold", {o.iou_threshold});
  const std::string score_threshold = floats(g, p + "score_threshold", {o.score_threshold});
  std::vector<std::string> all_boxes, all_scores, all_classes;
  for (int64_t c = 1; c <= classes; ++c) {
    const std::string k = "class_" + std::to_string(c) + "/";
    const std::string sc =
        gather(k + "scores", scores2d, i32(k + "column", {static_cast<int32_t>(c)}), tensorflow::DT_FLOAT, one);
    auto* nms =
        op("NonMaxSuppressionV3", k + "NonMaxSuppressionV3", {boxes2d, sc, max_per_class, iou, score_threshold});
    type_attr(nms, "T", tensorflow::DT_FLOAT);
    all_boxes.push_back(gather(k + "boxes", boxes2d, nms->name(), tensorflow::DT_FLOAT, zero));
    all_scores.push_back(gather(k + "kept_scores", sc, nms->name(), tensorflow::DT_FLOAT, zero));
    auto* shape = op("Shape", k + "Shape", {nms->name()});
    type_attr(shape, "T", tensorflow::DT_INT32);
    type_attr(shape, "out_type", tensorflow::DT_INT32);
    auto* fill = op("Fill", k + "classes", {shape->name(), floats(g, p + k + "class", {static_cast<float>(c)})});
    type_attr(fill, "T", tensorflow::DT_FLOAT);
    type_attr(fill, "index_type", tensorflow::DT_INT32);
    all_classes.push_back(fill->name());
  }
  // Clipped to the image; boxes left without area dropped.
  const std::string clipped =
      binary("Minimum", "clip/min",
             binary("Maximum", "clip/max", concat("concat_boxes", all_boxes, tensorflow::DT_FLOAT),
                    floats(g, p + "clip/zero", {0.0f})),
             floats(g, p + "clip/one", {1.0f}));
  auto* split = typed(op("Split", "area/split", {one, clipped}));
  (*split->mutable_attr())["num_split"].set_i(4);
  const std::string area = binary("Mul", "area", binary("Sub", "area/height", split->name() + ":2", split->name()),
                                  binary("Sub", "area/width", split->name() + ":3", split->name() + ":1"));
  auto* area_flat = op("Reshape", "area/flat", {area, i32("area/flat/shape", {-1})});  // [n, 1] -> [n]
  type_attr(area_flat, "T", tensorflow::DT_FLOAT);
  type_attr(area_flat, "Tshape", tensorflow::DT_INT32);
  const std::string positive =
      binary("Greater", "area/positive", area_flat->name(), floats(g, p + "area/zero", {0.0f}));
  auto* where = op("Where", "area/where", {positive});
  type_attr(where, "T", tensorflow::DT_BOOL);
  auto* cast_where = op("Cast", "area/indices", {where->name()});
  type_attr(cast_where, "SrcT", tensorflow::DT_INT64);
  type_attr(cast_where, "DstT", tensorflow::DT_INT32);
  (*cast_where->mutable_attr())["Truncate"].set_b(false);
  auto* flat = op("Reshape", "area/kept", {cast_where->name(), i32("area/kept/shape", {-1})});
  type_attr(flat, "T", tensorflow::DT_INT32);
  type_attr(flat, "Tshape", tensorflow::DT_INT32);
  const std::string kept_boxes = gather("kept_boxes", clipped, flat->name(), tensorflow::DT_FLOAT, zero);
  const std::string kept_scores = gather("kept_scores", concat("concat_scores", all_scores, tensorflow::DT_FLOAT),
                                         flat->name(), tensorflow::DT_FLOAT, zero);
  const std::string kept_classes = gather("kept_classes", concat("concat_classes", all_classes, tensorflow::DT_FLOAT),
                                          flat->name(), tensorflow::DT_FLOAT, zero);
  // The best max_total_detections.
  auto* size = op("Size", "count", {kept_scores});
  type_attr(size, "T", tensorflow::DT_FLOAT);
  type_attr(size, "out_type", tensorflow::DT_INT32);
  const std::string max_total = i32("max_total_detections", {static_cast<int32_t>(o.max_total_detections)});
  const std::string k = binary("Minimum", "num", size->name(), max_total, tensorflow::DT_INT32);
  auto* top = op("TopKV2", "TopKV2", {kept_scores, k});
  type_attr(top, "T", tensorflow::DT_FLOAT);
  (*top->mutable_attr())["sorted"].set_b(true);
  const std::string order = top->name() + ":1";
  // Padded to max_total_detections, a batch of one.
  const std::string missing = binary("Sub", "missing", max_total, k, tensorflow::DT_INT32);
  auto pack = [&](const std::string& name, const std::vector<std::string>& inputs) {
    auto* n = op("Pack", name, inputs);
    (*n->mutable_attr())["N"].set_i(static_cast<int64_t>(inputs.size()));
    type_attr(n, "T", tensorflow::DT_INT32);
    (*n->mutable_attr())["axis"].set_i(0);
    return n->name();
  };
  const std::string pad_rows = pack("pad_rows", {zero, missing});
  auto output = [&](const std::string& name, const std::string& values, bool rows_of_four) {
    std::string x = gather(name + "/sorted", values, order, tensorflow::DT_FLOAT, zero);
    const std::string paddings = rows_of_four
                                     ? pack(name + "/paddings", {pad_rows, pack(name + "/no_padding", {zero, zero})})
                                     : pack(name + "/paddings", {pad_rows});
    auto* pad = op("Pad", name + "/Pad", {x, paddings});
    type_attr(pad, "T", tensorflow::DT_FLOAT);
    type_attr(pad, "Tpaddings", tensorflow::DT_INT32);
    auto* expand = op("ExpandDims", name + "/ExpandDims", {pad->name(), zero});
    type_attr(expand, "T", tensorflow::DT_FLOAT);
    type_attr(expand, "Tdim", tensorflow::DT_INT32);
    typed(g.node("Identity", name, {expand->name()}));
  };
  output("detection_boxes", kept_boxes, true);
  output("detection_scores", kept_scores, false);
  output("detection_classes", kept_classes, false);
  auto* count = op("Cast", "num_detections/Cast", {k});
  type_attr(count, "SrcT", tensorflow::DT_INT32);
  type_attr(count, "DstT", tensorflow::DT_FLOAT);
  (*count->mutable_attr())["Truncate"].set_b(false);
  auto* expand = op("ExpandDims", "num_detections/ExpandDims", {count->name(), zero});
  type_attr(expand, "T", tensorflow::DT_FLOAT);
  type_attr(expand, "Tdim", tensorflow::DT_INT32);
  typed(g.node("Identity", "num_detections", {expand->name()}));
}

}  // namespace

void export_detection_frozen_graph(detect::SsdModelImpl& model, const at::Tensor& anchors,
                                   const DetectionGraphOptions& options, const std::string& path,
                                   const std::string& saved_model_dir) {
  torch::NoGradGuard no_grad;
  check_ssd_exportable(model, options.height, options.width, options.score_converter, "TensorFlow");
  model.eval();
  const auto& mo = model.options();
  tensorflow::GraphDef graph;
  TfGraphWriter g(&graph);

  // export_inference_graph.py's image_tensor: uint8 [1, height, width, 3], any size; cast,
  // resized to the fixed_shape_resizer's size, scaled as the feature extractor's preprocess.
  auto* input = g.node("Placeholder", "image_tensor", {});
  (*input->mutable_attr())["dtype"].set_type(tensorflow::DT_UINT8);
  for (int64_t d : {int64_t{1}, int64_t{-1}, int64_t{-1}, int64_t{3}})  // one image: the NMS is per image
    (*input->mutable_attr())["shape"].mutable_shape()->add_dim()->set_size(d);
  auto* cast = g.node("Cast", "ToFloat", {"image_tensor"});
  (*cast->mutable_attr())["SrcT"].set_type(tensorflow::DT_UINT8);
  (*cast->mutable_attr())["DstT"].set_type(tensorflow::DT_FLOAT);
  (*cast->mutable_attr())["Truncate"].set_b(false);
  auto* resize = typed(
      g.node("ResizeBilinear", "Preprocessor/ResizeBilinear",
             {"ToFloat", g.int32s("Preprocessor/ResizeBilinear/size",
                                  {static_cast<int32_t>(options.height), static_cast<int32_t>(options.width)}, {})}));
  (*resize->mutable_attr())["align_corners"].set_b(false);
  (*resize->mutable_attr())["half_pixel_centers"].set_b(false);
  typed(g.node("Mul", "Preprocessor/mul",
               {"Preprocessor/ResizeBilinear", floats(g, "Preprocessor/mul/y", {options.scale})}));
  const bool one_offset = options.offset[0] == options.offset[1] && options.offset[1] == options.offset[2];
  typed(g.node(
      "Sub", "Preprocessor/sub",
      {"Preprocessor/mul", floats(g, "Preprocessor/sub/y",
                                  one_offset ? std::vector<float>{options.offset[0]}
                                             : std::vector<float>(options.offset.begin(), options.offset.end()))}));
  g.set_shape("Preprocessor/sub", options.height, options.width, 3);

  const auto maps = ssd_feature_maps(g, model, "Preprocessor/sub", options.height, options.width);
  // The box predictor by the OD API's names (BoxPredictor_i/..., WeightSharedConvolutionalBoxPredictor_i/...),
  // its outputs concatenated over the maps as "concat" (box encodings) and "concat_1" (class logits).
  const int64_t num_anchors =
      ssd_box_predictor(g, model, maps, options.height, options.width, "concat", "concat_1").num_anchors;
  auto concat = [&](const std::string& name, std::vector<std::string> inputs, int32_t axis) {
    const size_t n = inputs.size();
    inputs.push_back(g.int32s(name + "/axis", {axis}, {}));
    auto* c = typed(g.node("ConcatV2", name, inputs));
    (*c->mutable_attr())["N"].set_i(static_cast<int64_t>(n));
    (*c->mutable_attr())["Tidx"].set_type(tensorflow::DT_INT32);
    return name;
  };
  auto identity = [&](const std::string& name, const std::string& x) {
    typed(g.node("Identity", name, {x}));
    return name;
  };

  // Score conversion, then the FasterRcnnBoxCoder decoding against the anchors
  // (ymin, xmin, ymax, xmax), with [A, 2] constants:
  //   (yc, xc) = (ty, tx) * (ha / y_scale, wa / x_scale) + (yc_a, xc_a)
  //   (h, w) / 2 = exp((th, tw) / (height_scale, width_scale)) * (ha, wa) / 2
  std::string scores = "concat_1";
  if (options.score_converter == "SIGMOID")
    scores = typed(g.node("Sigmoid", "Postprocessor/convert_scores", {scores}))->name();
  if (options.score_converter == "SOFTMAX")
    scores = typed(g.node("Softmax", "Postprocessor/convert_scores", {scores}))->name();
  identity("raw_detection_scores", scores);

  const auto an = anchors.to(torch::kCPU, torch::kFloat).contiguous();
  if (an.dim() != 2 || an.size(0) != num_anchors || an.size(1) != 4)
    throw Error("TensorFlow export: " + std::to_string(num_anchors) + " anchors expected for " +
                std::to_string(options.height) + "x" + std::to_string(options.width) + " input");
  const auto ha = an.select(1, 2) - an.select(1, 0), wa = an.select(1, 3) - an.select(1, 1);
  const auto yc = an.select(1, 0) + ha / 2, xc = an.select(1, 1) + wa / 2;
  const auto& sc = options.box_coder_scales;
  const std::string d = "Postprocessor/Decode/";
  auto* split = typed(g.node("Split", d + "split", {g.int32s(d + "split/axis", {2}, {}), "concat"}));
  (*split->mutable_attr())["num_split"].set_i(2);
  auto binary = [&](const std::string& op, const std::string& name, const std::string& a, const std::string& b) {
    return typed(g.node(op, d + name, {a, b}))->name();
  };
  const std::string center = binary("AddV2", "center",
                                    binary("Mul", "center_scaled", d + "split",
                                           g.constant(d + "center_scale", torch::stack({ha / sc[0], wa / sc[1]}, 1))),
                                    g.constant(d + "anchor_centers", torch::stack({yc, xc}, 1)));
  const std::string log_size =
      binary("Mul", "log_size", d + "split:1",
             g.constant(d + "size_scale",
                        torch::stack({torch::full_like(ha, 1 / sc[2]), torch::full_like(wa, 1 / sc[3])}, 1)));
  typed(g.node("Exp", d + "size_ratio", {log_size}));
  const std::string half = binary("Mul", "half_size", d + "size_ratio",
                                  g.constant(d + "anchor_half_sizes", torch::stack({ha / 2, wa / 2}, 1)));
  const std::string lo = binary("Sub", "min", center, half), hi = binary("AddV2", "max", center, half);
  identity("raw_detection_boxes", concat(d + "concat", {lo, hi}, 2));
  nms_outputs(g, "raw_detection_boxes", "raw_detection_scores", mo.num_classes, options);
  if (!path.empty()) atomic_write_file(path, serialize(graph));
  if (saved_model_dir.empty()) return;
  // export_inference_graph.py's saved_model/: input "inputs" (image_tensor), the detection outputs.
  const int64_t total = options.max_total_detections, anchors_count = anchors.size(0);
  write_saved_model(
      saved_model_dir, std::move(graph),
      {{"inputs", tensor_info("image_tensor", {1, -1, -1, 3}, tensorflow::DT_UINT8)}},
      {{"detection_boxes", tensor_info("detection_boxes", {1, total, 4})},
       {"detection_scores", tensor_info("detection_scores", {1, total})},
       {"detection_classes", tensor_info("detection_classes", {1, total})},
       {"num_detections", tensor_info("num_detections", {1})},
       {"raw_detection_boxes", tensor_info("raw_detection_boxes", {1, anchors_count, 4})},
       {"raw_detection_scores", tensor_info("raw_detection_scores", {1, anchors_count, mo.num_classes + 1})}});
}

std::string tf_graph_def(models::ImageModelImpl& model, const TfGraphExportOptions& options) {
  return serialize(image_graph(model, options).graph);
}

void export_frozen_graph(models::ImageModelImpl& model, const TfGraphExportOptions& options, const std::string& path) {
  atomic_write_file(path, tf_graph_def(model, options));
}

void export_saved_model(models::ImageModelImpl& model, const TfGraphExportOptions& options, const std::string& dir,
                        bool replace) {
  const std::string pb = join_path(dir, "saved_model.pb");
  if (!replace && file_exists(pb)) throw Error(pb + ": a SavedModel is already there");
  ImageGraph g = image_graph(model, options);
  std::map<std::string, tensorflow::TensorInfo> outputs = {{g.output, tensor_info(g.output, {-1, g.width})}};
  if (!options.feature_vector && !options.probabilities.empty()) outputs["probs"] = tensor_info("probs", {-1, g.width});
  write_saved_model(dir, std::move(g.graph),
                    {{"inputs", tensor_info("images", {-1, options.image_size, options.image_size, 3})}}, outputs);
}

}  // namespace orchard::exporting
