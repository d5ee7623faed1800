#include "orchard/export/onnx_export.h"

#include <onnx/onnx_pb.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <variant>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/layers/conv_norm_activation.h"
#include "orchard/layers/tf_same.h"
#include "orchard/models/inception_v3.h"
#include "orchard/models/mobilenet_v1.h"
#include "orchard/models/mobilenet_v2.h"
#include "orchard/models/resnet.h"

namespace orchard::exporting {
namespace {

using Pads = std::array<int64_t, 4>;  // ONNX order: top, left, bottom, right

class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* graph) : graph_(graph) {}

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

  // An int64 initializer (shapes, Slice bounds).
  std::string int64s(const std::string& name, const std::vector<int64_t>& values) {
    auto* init = graph_->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::INT64);
    init->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) init->add_int64_data(v);
    return name;
  }

  // A convolution with explicit pads {top, left, bottom, right}.
  std::string conv(const std::string& name, const torch::nn::detail::ConvNdOptions<2>& o, const torch::Tensor& weight,
                   const torch::Tensor& bias, const std::string& x, const Pads& pads) {
    auto* n = node("Conv", {x, constant(name + ".weight", weight), constant(name + ".bias", bias)}, name);
    const auto k = o.kernel_size(), s = o.stride(), d = o.dilation();
    ints(n, "kernel_shape", {(*k)[0], (*k)[1]});
    ints(n, "strides", {(*s)[0], (*s)[1]});
    ints(n, "dilations", {(*d)[0], (*d)[1]});
    ints(n, "pads", {pads[0], pads[1], pads[2], pads[3]});
    if (o.groups() != 1) integer(n, "group", o.groups());
    return name;
  }

  // conv (no bias) followed by batch norm, folded: W * g / sqrt(v + eps), b - m * g / sqrt(v + eps).
  std::string conv_bn(const std::string& name, torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn,
                      const std::string& x) {
    return conv_bn(name, conv, bn, x, symmetric_pads(name, conv.options));
  }
  std::string conv_bn(const std::string& name, torch::nn::Conv2dImpl& c, torch::nn::BatchNorm2dImpl& bn,
                      const std::string& x, const Pads& pads) {
    if (c.options.bias()) throw Error("ONNX export: " + name + " is not a bias-free convolution");
    // In double, so that the folded weights are the nearest floats to the exact products.
    const auto inv_std = torch::rsqrt(bn.running_var.to(torch::kDouble) + bn.options.eps());
    const auto g = bn.weight.to(torch::kDouble) * inv_std;
    const auto w = c.weight.to(torch::kDouble) * g.view({-1, 1, 1, 1});
    const auto b = bn.bias.to(torch::kDouble) - bn.running_mean.to(torch::kDouble) * g;
    return conv(name, c.options, w, b, x, pads);
  }

  // The module's own (symmetric, numeric) padding.
  static Pads symmetric_pads(const std::string& name, const torch::nn::detail::ConvNdOptions<2>& o) {
    // libtorch 1.13's padding is a c10::variant, 2.x's a std::variant: the unqualified call
    // finds c10::get_if by argument-dependent lookup on the former, std::get_if on the latter.
    using std::get_if;
    const auto* pad = get_if<torch::ExpandingArray<2>>(&o.padding());
    if (!pad) throw Error("ONNX export: " + name + " uses string padding");
    return {(**pad)[0], (**pad)[1], (**pad)[0], (**pad)[1]};
  }

  // ReLU6: Clip to [0, 6] (bounds as attributes, opset < 11).
  std::string relu6(const std::string& x) {
    auto* n = node("Clip", {x}, x + ".relu6");
    real(n, "min", 0.0f);
    real(n, "max", 6.0f);
    return n->output(0);
  }

  std::string relu(const std::string& x) { return node("Relu", {x}, x + ".relu")->output(0); }

  std::string pool(const std::string& op, const std::string& name, const std::string& x, int64_t kernel, int64_t stride,
                   int64_t pad) {
    auto* n = node(op, {x}, name);
    ints(n, "kernel_shape", {kernel, kernel});
    ints(n, "strides", {stride, stride});
    ints(n, "pads", {pad, pad, pad, pad});
    return name;
  }

  // torch's avg_pool2d with padding and count_include_pad (its default): the zeros count in
  // border averages. Written as an explicit zero Pad and an unpadded AveragePool, which every
  // consumer reads the same (OpenCV 4.6 ignores count_include_pad).
  std::string avg_pool_include_pad(const std::string& name, const std::string& x, int64_t kernel, int64_t pad) {
    zero_pad(name + ".pad", x, pad);
    return pool("AveragePool", name, name + ".pad", kernel, 1, 0);
  }

  std::string zero_pad(const std::string& name, const std::string& x, int64_t pad) {
    ints(node("Pad", {x}, name), "pads", {0, 0, pad, pad, 0, 0, pad, pad});  // mode constant, value 0
    return name;
  }

  std::string concat(const std::string& name, const std::vector<std::string>& inputs) {
    integer(node("Concat", inputs, name), "axis", 1);
    return name;
  }

 private:
  onnx::GraphProto* graph_;
};

void value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::string>& symbolic,
                const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = t->mutable_shape();
  for (const auto& s : symbolic) shape->add_dim()->set_dim_param(s);
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

// A model's modules by their dotted path (torchvision's names): the writers below walk each
// model by name (the block classes of Inception-v3 and MobileNetV2 live in their .cc files).
class ModuleIndex {
 public:
  explicit ModuleIndex(torch::nn::Module& model) {
    for (const auto& m : model.named_modules()) modules_[m.key()] = m.value();
  }
  template <typename T>
  T& get(const std::string& path) const {
    auto it = modules_.find(path);
    T* t = it == modules_.end() ? nullptr : it->second->as<T>();
    if (!t) throw Error("ONNX export: the model has no " + path + " of the expected type");
    return *t;
  }
  bool has(const std::string& path) const { return modules_.count(path) > 0; }

 private:
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules_;
};

// ResNet body: conv1 .. layer4, returning the last feature map.
std::string resnet_body(GraphBuilder& g, models::ResNetImpl& model, const std::string& input) {
  if (model.options().layout != models::ResNetLayout::kTorchvision)
    throw Error("ONNX export: ResNets with TensorFlow's layout (resnet_v1_*, resnet50_garden) are not exported yet");
  const ModuleIndex modules(model);
  auto conv_bn = [&](const std::string& conv, const std::string& bn, const std::string& x) {
    return g.conv_bn(conv, modules.get<torch::nn::Conv2dImpl>(conv), modules.get<torch::nn::BatchNorm2dImpl>(bn), x);
  };
  std::string x = g.relu(conv_bn("conv1", "bn1", input));
  if (!model.options().small_input) x = g.pool("MaxPool", "maxpool", x, 3, 2, 1);
  for (int l = 1; l <= 4; ++l) {
    for (int i = 0; modules.has("layer" + std::to_string(l) + "." + std::to_string(i)); ++i) {
      const std::string p = "layer" + std::to_string(l) + "." + std::to_string(i) + ".";
      std::string out = conv_bn(p + "conv2", p + "bn2", g.relu(conv_bn(p + "conv1", p + "bn1", x)));
      if (modules.has(p + "conv3")) out = conv_bn(p + "conv3", p + "bn3", g.relu(out));  // bottleneck
      const std::string identity =
          modules.has(p + "downsample") ? conv_bn(p + "downsample.0", p + "downsample.1", x) : x;
      g.node("Add", {out, identity}, p + "add");
      x = g.relu(p + "add");
    }
  }
  return x;
}

// Inception-v3 body (torchvision's module names): the stem, Mixed_5b .. Mixed_7c. The blocks'
// classes live in inception_v3.cc; their structure is walked here by name.
class InceptionWriter {
 public:
  InceptionWriter(GraphBuilder& g, models::InceptionV3Impl& model)
      : g_(g), modules_(model), exclude_pad_(model.options().tf_avg_pool) {}

  std::string body(const std::string& input) {
    std::string x = chain("", {"Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3"}, input);
    x = g_.pool("MaxPool", "maxpool1", x, 3, 2, 0);
    x = g_.pool("MaxPool", "maxpool2", chain("", {"Conv2d_3b_1x1", "Conv2d_4a_3x3"}, x), 3, 2, 0);
    for (const char* name : {"Mixed_5b", "Mixed_5c", "Mixed_5d"}) x = block_a(name, x);
    x = block_b("Mixed_6a", x);
    for (const char* name : {"Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"}) x = block_c(name, x);
    x = block_d("Mixed_7a", x);
    for (const char* name : {"Mixed_7b", "Mixed_7c"}) x = block_e(name, x);
    return x;
  }

 private:
  // BasicConv2d `name`: conv -> batch norm (folded) -> ReLU.
  std::string basic(const std::string& name, const std::string& x) {
    return g_.relu(g_.conv_bn(name, modules_.get<torch::nn::Conv2dImpl>(name + ".conv"),
                              modules_.get<torch::nn::BatchNorm2dImpl>(name + ".bn"), x));
  }
  std::string chain(const std::string& block, const std::vector<std::string>& names, std::string x) {
    for (const auto& n : names) x = basic(block.empty() ? n : block + "." + n, x);
    return x;
  }
  // TF-Slim's pools leave the padding out of the border averages: AveragePool's own
  // count_include_pad 0 (OpenCV's importer pads that way for any producer but PyTorch).
  std::string avg_pool(const std::string& block, const std::string& x) {
    if (exclude_pad_) return g_.pool("AveragePool", block + ".avg_pool", x, 3, 1, 1);
    return g_.avg_pool_include_pad(block + ".avg_pool", x, 3, 1);
  }
  std::string block_a(const std::string& b, const std::string& x) {
    return g_.concat(b, {chain(b, {"branch1x1"}, x), chain(b, {"branch5x5_1", "branch5x5_2"}, x),
                         chain(b, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x),
                         chain(b, {"branch_pool"}, avg_pool(b, x))});
  }
  std::string block_b(const std::string& b, const std::string& x) {
    return g_.concat(b,
                     {chain(b, {"branch3x3"}, x), chain(b, {"branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"}, x),
                      g_.pool("MaxPool", b + ".max_pool", x, 3, 2, 0)});
  }
  std::string block_c(const std::string& b, const std::string& x) {
    return g_.concat(
        b, {chain(b, {"branch1x1"}, x), chain(b, {"branch7x7_1", "branch7x7_2", "branch7x7_3"}, x),
            chain(b, {"branch7x7dbl_1", "branch7x7dbl_2", "branch7x7dbl_3", "branch7x7dbl_4", "branch7x7dbl_5"}, x),
            chain(b, {"branch_pool"}, avg_pool(b, x))});
  }
  std::string block_d(const std::string& b, const std::string& x) {
    return g_.concat(b, {chain(b, {"branch3x3_1", "branch3x3_2"}, x),
                         chain(b, {"branch7x7x3_1", "branch7x7x3_2", "branch7x7x3_3", "branch7x7x3_4"}, x),
                         g_.pool("MaxPool", b + ".max_pool", x, 3, 2, 0)});
  }
  std::string block_e(const std::string& b, const std::string& x) {
    const std::string b3 = chain(b, {"branch3x3_1"}, x);
    const std::string b3dbl = chain(b, {"branch3x3dbl_1", "branch3x3dbl_2"}, x);
    return g_.concat(b, {chain(b, {"branch1x1"}, x), chain(b, {"branch3x3_2a"}, b3), chain(b, {"branch3x3_2b"}, b3),
                         chain(b, {"branch3x3dbl_3a"}, b3dbl), chain(b, {"branch3x3dbl_3b"}, b3dbl),
                         chain(b, {"branch_pool"}, avg_pool(b, x))});
  }
  GraphBuilder& g_;
  ModuleIndex modules_;
  bool exclude_pad_;
};

// MobileNetV2's features under `prefix` (torchvision's names): features.0 (conv-BN-ReLU6), the
// inverted residuals (conv.{0: expansion, if any; next: depthwise; then the projection conv and
// its BN}, with the residual where stride 1 keeps the channels), the last 1x1 conv-BN-ReLU6.
// Written as far as the deepest of `wanted` (TF-Slim's endpoints); returns their outputs.
Pads same_pads(int64_t h, int64_t w, const torch::nn::detail::ConvNdOptions<2>& o);

// The layers::ConvNormActivation `name` on x, an h x w map (TF 'SAME' padding depends on it);
// h and w become the output's size.
std::string conv_bn_relu6(GraphBuilder& g, const ModuleIndex& modules, const std::string& name, const std::string& x,
                          int64_t& h, int64_t& w) {
  auto& cna = modules.get<layers::ConvNormActivationImpl>(name);
  const auto& o = cna.conv->options;
  const Pads pads = cna.options.tf_same_padding() ? same_pads(h, w, o) : GraphBuilder::symmetric_pads(name, o);
  h = (h + pads[0] + pads[2] - ((*o.kernel_size())[0] - 1) * (*o.dilation())[0] - 1) / (*o.stride())[0] + 1;
  w = (w + pads[1] + pads[3] - ((*o.kernel_size())[1] - 1) * (*o.dilation())[1] - 1) / (*o.stride())[1] + 1;
  return g.relu6(g.conv_bn(name, *cna.conv, *cna.bn, x, pads));
}

// MobileNetV1's features under `prefix` (models::MobileNetV1): features.0, then features.N.0
// (depthwise) and features.N.1 (pointwise), each conv-BN-ReLU6; returns the outputs of `layers`.
std::vector<std::string> mobilenet_v1_features(GraphBuilder& g, const ModuleIndex& modules, const std::string& prefix,
                                               const std::string& input, int64_t height, int64_t width,
                                               const std::vector<int64_t>& layers) {
  const int64_t deepest = layers.empty() ? 0 : *std::max_element(layers.begin(), layers.end());
  std::vector<std::string> outputs;
  std::string x = input;
  for (int64_t i = 0; i <= deepest; ++i) {
    const std::string layer = prefix + "features." + std::to_string(i);
    if (i == 0) {
      x = conv_bn_relu6(g, modules, layer, x, height, width);
    } else {
      x = conv_bn_relu6(g, modules, layer + ".0", x, height, width);
      x = conv_bn_relu6(g, modules, layer + ".1", x, height, width);
    }
    outputs.push_back(x);
  }
  std::vector<std::string> result;
  for (int64_t l : layers) result.push_back(outputs.at(static_cast<size_t>(l)));
  return result;
}

// `height` x `width`: the input's size (TF 'SAME' convolutions are padded for the size each sees).
std::vector<std::string> mobilenet_v2_features(GraphBuilder& g, const ModuleIndex& modules, const std::string& prefix,
                                               const std::string& input, int64_t height, int64_t width,
                                               const std::vector<models::MobileNetV2Endpoint>& wanted) {
  int64_t h_in = height, w_in = width;
  auto conv_bn_relu6 = [&](const std::string& p, const std::string& x) {
    return orchard::exporting::conv_bn_relu6(g, modules, p, x, h_in, w_in);
  };
  int64_t deepest = 0;
  for (const auto& e : wanted) deepest = std::max(deepest, e.index);
  std::map<std::pair<int64_t, bool>, std::string> outputs;
  std::string x = outputs[{0, false}] = conv_bn_relu6(prefix + "features.0", input);
  for (int64_t i = 1; i <= deepest; ++i) {
    const std::string block = prefix + "features." + std::to_string(i);
    if (!modules.has(block + ".conv")) {  // the last 1x1 conv
      x = outputs[{i, false}] = conv_bn_relu6(block, x);
      continue;
    }
    const std::string p = block + ".conv.";
    const bool expansion = modules.has(p + "3");  // conv.0 expand, .1 depthwise, .2 project, .3 BN
    std::string h = x;
    int c = 0;
    if (expansion) h = outputs[{i, true}] = conv_bn_relu6(p + std::to_string(c++), h);
    auto& depthwise = modules.get<layers::ConvNormActivationImpl>(p + std::to_string(c));
    h = conv_bn_relu6(p + std::to_string(c++), h);
    auto& project = modules.get<torch::nn::Conv2dImpl>(p + std::to_string(c));
    h = g.conv_bn(p + std::to_string(c), project, modules.get<torch::nn::BatchNorm2dImpl>(p + std::to_string(c + 1)),
                  h);
    const int64_t in = expansion ? modules.get<layers::ConvNormActivationImpl>(p + "0").options.in_channels()
                                 : depthwise.options.in_channels();
    if (depthwise.options.stride() == 1 && in == project.options.out_channels()) {
      g.node("Add", {h, x}, p + "add");
      h = p + "add";
    }
    x = outputs[{i, false}] = h;
  }
  std::vector<std::string> result;
  for (const auto& e : wanted) {
    auto it = outputs.find({e.index, e.expansion_output});
    if (it == outputs.end())
      throw Error("ONNX export: MobileNetV2 has no such endpoint (features." + std::to_string(e.index) +
                  (e.expansion_output ? " expansion)" : ")"));
    result.push_back(it->second);
  }
  return result;
}

// `image_size`: the input's (TF 'SAME' padding depends on it).
std::string mobilenet_v2_body(GraphBuilder& g, models::MobileNetV2Impl& model, const std::string& input,
                              int64_t image_size) {
  if (!model.options().include_top) throw Error("ONNX export: MobileNetV2 without its classifier");
  const ModuleIndex modules(model);
  int64_t last = 1;
  while (modules.has("features." + std::to_string(last + 1))) ++last;
  return mobilenet_v2_features(g, modules, "", input, image_size, image_size,
                               {models::MobileNetV2Endpoint{last, false}})
      .front();
}

// TF 'SAME' padding of `o` over an input of h x w, as layers::conv2d_tf_same pads: the odd
// pixel after.
Pads same_pads(int64_t h, int64_t w, const torch::nn::detail::ConvNdOptions<2>& o) {
  Pads pads{};
  const int64_t in[2] = {h, w};
  for (int d = 0; d < 2; ++d) {
    const int64_t s = (*o.stride())[d], k = ((*o.kernel_size())[d] - 1) * (*o.dilation())[d] + 1;
    const int64_t total = std::max<int64_t>(((in[d] + s - 1) / s - 1) * s + k - in[d], 0);
    pads[d] = total / 2;
    pads[d + 2] = total - total / 2;
  }
  return pads;
}

// A model proto at kOnnxOpset with its graph input "images" [batch, 3, height, width] and,
// with include_preprocessing, pixel * scale - offset[c] as a per-channel (grouped) 1x1
// convolution: one node every consumer runs (OpenCV 4.6 rejects Mul / Add on the graph input
// with [1, 3, 1, 1] constants). Returns the name of the model's input.
std::string begin_model(onnx::ModelProto& proto, GraphBuilder& g, int64_t height, int64_t width,
                        bool include_preprocessing, float scale, const std::array<float, 3>& offset) {
  proto.set_ir_version(onnx::IR_VERSION_2019_3_18);  // IR 5, the opset 10 era
  proto.set_producer_name("orchard");
  proto.set_producer_version("1");
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  value_info(proto.mutable_graph()->add_input(), "images", {"batch"}, {3, height, width});
  if (!include_preprocessing) return "images";
  const auto weight = torch::full({3, 1, 1, 1}, scale);
  const auto bias = -torch::tensor({offset[0], offset[1], offset[2]});
  auto* n = g.node("Conv", {"images", g.constant("preprocess.weight", weight), g.constant("preprocess.bias", bias)},
                   "preprocess");
  GraphBuilder::ints(n, "kernel_shape", {1, 1});
  GraphBuilder::integer(n, "group", 3);
  return "preprocess";
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
  GraphBuilder g(graph);
  const std::string input = begin_model(proto, g, options.image_size, options.image_size, options.include_preprocessing,
                                        options.scale, options.offset);
  std::string x;
  if (auto* resnet = dynamic_cast<models::ResNetImpl*>(&model)) {
    graph->set_name("resnet");
    x = resnet_body(g, *resnet, input);
  } else if (auto* inception = dynamic_cast<models::InceptionV3Impl*>(&model)) {
    if (inception->options().transform_input) throw Error("ONNX export: Inception-v3 with transform_input");
    graph->set_name("inception_v3");
    x = InceptionWriter(g, *inception).body(input);
  } else if (auto* mobilenet = dynamic_cast<models::MobileNetV2Impl*>(&model)) {
    graph->set_name("mobilenet_v2");
    x = mobilenet_v2_body(g, *mobilenet, input, options.image_size);
  } else {
    throw Error("ONNX export supports the ResNets, MobileNetV2 and Inception-v3");
  }
  g.node("GlobalAveragePool", {x}, "avgpool");
  auto* flatten = g.node("Flatten", {"avgpool"}, options.feature_vector ? "features" : "pooled");
  GraphBuilder::integer(flatten, "axis", 1);
  const ModuleIndex modules(model);
  auto& fc = modules.get<torch::nn::LinearImpl>(modules.has("fc") ? "fc" : "classifier.1");
  std::string output = flatten->output(0);
  int64_t outputs = fc.weight.size(1);
  if (!options.feature_vector) {  // (dropout before fc is the identity at inference)
    auto* gemm = g.node(
        "Gemm", {output, g.constant("classifier.weight", fc.weight), g.constant("classifier.bias", fc.bias)}, "logits");
    GraphBuilder::integer(gemm, "transB", 1);
    output = "logits";
    outputs = fc.weight.size(0);
  }
  value_info(graph->add_output(), output, {"batch"}, {outputs});
  save_model(proto, path);
}

void export_detection_onnx(detect::SsdModelImpl& model, const at::Tensor& anchors, const DetectionOnnxOptions& options,
                           const std::string& path) {
  torch::NoGradGuard no_grad;
  if (options.score_converter != "SIGMOID" && options.score_converter != "SOFTMAX" &&
      options.score_converter != "IDENTITY_WITH_LOGITS")
    throw Error("ONNX export: unknown score_converter '" + options.score_converter + "'");
  const auto& mo = model.options();
  if (mo.box_code_size != 4) throw Error("ONNX export: the box coder needs box_code_size 4");
  if (mo.pad_to_multiple > 1 && (options.height % mo.pad_to_multiple || options.width % mo.pad_to_multiple))
    throw Error("ONNX export: the input " + std::to_string(options.height) + "x" + std::to_string(options.width) +
                " is not a multiple of feature_extractor.pad_to_multiple " + std::to_string(mo.pad_to_multiple));
  // The base networks with an ONNX graph here, by the feature extractor's TF-Slim scope (its
  // endpoints name the maps in the base network's own terms).
  const std::string& base = model.layout().scope;
  if (mo.fpn.enabled || mo.weight_shared || mo.ppn || mo.mnasfpn ||
      (mo.feature_extractor != "ssd_mobilenet_v1" && mo.feature_extractor != "ssd_mobilenet_v2"))
    throw Error("ONNX export of " + mo.feature_extractor +
                (mo.fpn.enabled ? "_fpn"
                 : mo.ppn       ? "_ppn"
                 : mo.mnasfpn   ? "_mnasfpn"
                                : "") +
                (mo.weight_shared ? " with the weight-shared box predictor" : "") +
                " is not implemented yet (ssd_mobilenet_v1 and ssd_mobilenet_v2 with convolutional_box_predictor are); "
                "`detect export --format tf` writes the model as a TensorFlow checkpoint");
  onnx::ModelProto proto;
  auto* graph = proto.mutable_graph();
  graph->set_name(mo.feature_extractor);
  GraphBuilder g(graph);
  std::string x = begin_model(proto, g, options.height, options.width, options.include_preprocessing, options.scale,
                              options.offset);
  const ModuleIndex modules(model);
  const auto sizes = model.feature_map_sizes(options.height, options.width);
  const size_t n = mo.anchors_per_location.size();

  // Feature maps: the backbone's endpoints, then the extra layers (TF 'SAME' stride-2 convs,
  // padded for the size each one sees).
  std::vector<int64_t> v1_layers;
  std::vector<models::MobileNetV2Endpoint> v2_endpoints;
  for (const auto& e : model.feature_extractor().endpoints()) {
    if (base == "MobilenetV1") v1_layers.push_back(models::parse_mobilenet_v1_endpoint(e.name));
    else v2_endpoints.push_back(models::parse_mobilenet_v2_endpoint(e.name));
  }
  std::vector<std::string> maps =
      base == "MobilenetV1"
          ? mobilenet_v1_features(g, modules, "backbone.", x, options.height, options.width, v1_layers)
          : mobilenet_v2_features(g, modules, "backbone.", x, options.height, options.width, v2_endpoints);
  for (size_t k = 0; maps.size() < n; ++k) {
    const std::string layer = "extras." + std::to_string(k);
    auto [h, w] = sizes[maps.size() - 1];
    x = maps.back();
    for (int j = 0; modules.has(layer + "." + std::to_string(j)); ++j)
      x = conv_bn_relu6(g, modules, layer + "." + std::to_string(j), x, h, w);
    maps.push_back(x);
  }

  // Heads: [B, a * code, h, w] -> [B, h, w, a * code] -> [B, h * w * a, code], concatenated
  // over the feature maps in the anchor generator's order.
  int64_t num_anchors = 0;
  std::vector<std::string> boxes, classes;
  for (size_t i = 0; i < n; ++i) {
    const auto [h, w] = sizes[i];
    const int64_t a = h * w * mo.anchors_per_location[i];
    num_anchors += a;
    for (auto [head, outputs] : {std::pair{"box_heads.", &boxes}, std::pair{"class_heads.", &classes}}) {
      const std::string name = head + std::to_string(i);
      std::string in = maps[i];
      // SSDLite: the depthwise conv + BN + ReLU6 before the 1x1 head.
      const std::string depthwise =
          std::string(head == std::string("box_heads.") ? "box_depthwise." : "class_depthwise.") + std::to_string(i);
      if (modules.has(depthwise)) {
        auto& cna = modules.get<layers::ConvNormActivationImpl>(depthwise);
        in = g.relu6(g.conv_bn(depthwise, *cna.conv, *cna.bn, in, same_pads(h, w, cna.conv->options)));
      }
      auto& conv = modules.get<torch::nn::Conv2dImpl>(name);
      const int64_t code = conv.options.out_channels() / mo.anchors_per_location[i];
      g.conv(name, conv.options, conv.weight, conv.bias, in, same_pads(h, w, conv.options));
      GraphBuilder::ints(g.node("Transpose", {name}, name + ".nhwc"), "perm", {0, 2, 3, 1});
      g.node("Reshape", {name + ".nhwc", g.int64s(name + ".shape", {-1, a, code})}, name + ".flat");
      outputs->push_back(name + ".flat");
    }
  }
  const bool identity = options.score_converter == "IDENTITY_WITH_LOGITS";
  auto concat = [&](const std::vector<std::string>& parts, const std::string& name, int64_t axis) {
    if (parts.size() == 1) return parts.front() == name ? name : g.node("Identity", parts, name)->output(0);
    GraphBuilder::integer(g.node("Concat", parts, name), "axis", axis);
    return name;
  };
  concat(boxes, "box_encodings", 1);
  concat(classes, identity ? "raw_detection_scores" : "class_predictions", 1);
  if (options.score_converter == "SIGMOID") g.node("Sigmoid", {"class_predictions"}, "raw_detection_scores");
  if (options.score_converter == "SOFTMAX")
    GraphBuilder::integer(g.node("Softmax", {"class_predictions"}, "raw_detection_scores"), "axis", 2);

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
  GraphBuilder::integer(g.node("Concat", {"decode.min", "decode.max"}, "raw_detection_boxes"), "axis", 2);

  value_info(graph->add_output(), "raw_detection_boxes", {"batch"}, {num_anchors, 4});
  value_info(graph->add_output(), "raw_detection_scores", {"batch"}, {num_anchors, mo.num_classes + 1});
  save_model(proto, path);
}

}  // namespace orchard::exporting
