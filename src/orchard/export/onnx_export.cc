#include "orchard/export/onnx_export.h"

#include <onnx/onnx_pb.h>
#include <torch/torch.h>

#include "orchard/core/error.h"
#include "orchard/core/files.h"

namespace orchard::exporting {
namespace {

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
  static void integer(onnx::NodeProto* n, const std::string& name, int64_t value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }

  // conv (no bias) followed by batch norm, folded: W * g / sqrt(v + eps), b - m * g / sqrt(v + eps).
  std::string conv_bn(const std::string& name, torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn,
                      const std::string& x) {
    const auto& o = conv.options;
    if (o.groups() != 1 || o.bias()) throw Error("ONNX export: " + name + " is not a plain bias-free convolution");
    const auto* pad = c10::get_if<torch::ExpandingArray<2>>(&o.padding());
    if (!pad) throw Error("ONNX export: " + name + " uses string padding");
    // In double, so that the folded weights are the nearest floats to the exact products.
    const auto inv_std = torch::rsqrt(bn.running_var.to(torch::kDouble) + bn.options.eps());
    const auto g = bn.weight.to(torch::kDouble) * inv_std;
    const auto w = conv.weight.to(torch::kDouble) * g.view({-1, 1, 1, 1});
    const auto b = bn.bias.to(torch::kDouble) - bn.running_mean.to(torch::kDouble) * g;
    const std::string weight = constant(name + ".weight", w), bias = constant(name + ".bias", b);
    auto* n = node("Conv", {x, weight, bias}, name);
    const auto k = o.kernel_size(), s = o.stride(), d = o.dilation();
    ints(n, "kernel_shape", {(*k)[0], (*k)[1]});
    ints(n, "strides", {(*s)[0], (*s)[1]});
    ints(n, "dilations", {(*d)[0], (*d)[1]});
    ints(n, "pads", {(**pad)[0], (**pad)[1], (**pad)[0], (**pad)[1]});
    return name;
  }

  std::string relu(const std::string& x) { return node("Relu", {x}, x + ".relu")->output(0); }

 private:
  onnx::GraphProto* graph_;
};

template <typename T>
T& child(torch::nn::Module& m, const std::string& name) {
  for (const auto& c : m.named_children())
    if (c.key() == name)
      if (auto* t = c.value()->as<T>()) return *t;
  throw Error("ONNX export: the model has no " + name);
}

bool has_child(torch::nn::Module& m, const std::string& name) {
  for (const auto& c : m.named_children())
    if (c.key() == name) return true;
  return false;
}

void value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::string>& symbolic,
                const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = t->mutable_shape();
  for (const auto& s : symbolic) shape->add_dim()->set_dim_param(s);
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

}  // namespace

void export_resnet_onnx(models::ResNetImpl& model, const OnnxExportOptions& options, const std::string& path) {
  torch::NoGradGuard no_grad;
  onnx::ModelProto proto;
  proto.set_ir_version(onnx::IR_VERSION_2019_9_19);  // IR 6 (opset 11-13 era): what OpenCV 4.6 reads
  proto.set_producer_name("orchard");
  proto.set_producer_version("1");
  auto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  auto* graph = proto.mutable_graph();
  graph->set_name("resnet");
  GraphBuilder g(graph);

  value_info(graph->add_input(), "images", {"batch"}, {3, options.image_size, options.image_size});
  std::string x = g.relu(g.conv_bn("conv1", child<torch::nn::Conv2dImpl>(model, "conv1"),
                                   child<torch::nn::BatchNorm2dImpl>(model, "bn1"), "images"));
  if (!model.options().small_input) {
    auto* n = g.node("MaxPool", {x}, "maxpool");
    GraphBuilder::ints(n, "kernel_shape", {3, 3});
    GraphBuilder::ints(n, "strides", {2, 2});
    GraphBuilder::ints(n, "pads", {1, 1, 1, 1});
    x = "maxpool";
  }
  for (int l = 1; l <= 4; ++l) {
    const std::string layer_name = "layer" + std::to_string(l);
    auto& layer = child<torch::nn::SequentialImpl>(model, layer_name);
    int64_t i = 0;
    for (const auto& block : layer.children()) {
      const std::string p = layer_name + "." + std::to_string(i++) + ".";
      const bool bottleneck = has_child(*block, "conv3");
      std::string out = g.relu(g.conv_bn(p + "conv1", child<torch::nn::Conv2dImpl>(*block, "conv1"),
                                         child<torch::nn::BatchNorm2dImpl>(*block, "bn1"), x));
      out = g.conv_bn(p + "conv2", child<torch::nn::Conv2dImpl>(*block, "conv2"),
                      child<torch::nn::BatchNorm2dImpl>(*block, "bn2"), out);
      if (bottleneck)
        out = g.conv_bn(p + "conv3", child<torch::nn::Conv2dImpl>(*block, "conv3"),
                        child<torch::nn::BatchNorm2dImpl>(*block, "bn3"), g.relu(out));
      std::string identity = x;
      if (has_child(*block, "downsample")) {
        auto& down = child<torch::nn::SequentialImpl>(*block, "downsample");
        identity = g.conv_bn(p + "downsample", *down[0]->as<torch::nn::Conv2dImpl>(),
                             *down[1]->as<torch::nn::BatchNorm2dImpl>(), x);
      }
      g.node("Add", {out, identity}, p + "add");
      x = g.relu(p + "add");
    }
  }
  g.node("GlobalAveragePool", {x}, "avgpool");
  auto* flatten = g.node("Flatten", {"avgpool"}, options.feature_vector ? "features" : "pooled");
  GraphBuilder::integer(flatten, "axis", 1);
  int64_t outputs = 0;
  std::string output = flatten->output(0);
  if (options.feature_vector) {
    outputs = child<torch::nn::LinearImpl>(model, "fc").weight.size(1);
  } else {
    auto& fc = child<torch::nn::LinearImpl>(model, "fc");
    auto* gemm = g.node("Gemm", {output, g.constant("fc.weight", fc.weight), g.constant("fc.bias", fc.bias)}, "logits");
    GraphBuilder::integer(gemm, "transB", 1);
    output = "logits";
    outputs = fc.weight.size(0);
  }
  value_info(graph->add_output(), output, {"batch"}, {outputs});

  std::string bytes;
  if (!proto.SerializeToString(&bytes)) throw Error("ONNX export: cannot serialise the model");
  atomic_write_file(path, bytes);
}

}  // namespace orchard::exporting
