// `orchard classify|multilabel export --format onnx`: OpenCV's DNN module (Debian's libopencv-dnn-dev, an
// ONNX consumer Orchard does not share code with) loads each exported file and must reproduce
// Orchard's own outputs for the same input.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <opencv2/dnn.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cli/cli_util.h"
#include "cli/export_models.h"
#include "core/test_util.h"
#include "orchard/core/files.h"
#include "orchard/data/preprocess.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/meta_arch/ssd.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/detect/ops/box_ops.h"
#include "orchard/export/onnx_export.h"
#include "orchard/models/image_model.h"
#include "orchard/models/registry.h"
#include "orchard/proto/tensorflow/graph.pb.h"
#include "orchard/tasks/classify/classification.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/tasks/multilabel/multilabel.h"
#include "orchard/train/checkpoint.h"

namespace orchard {
namespace test {

std::shared_ptr<torch::nn::Module> write_model_dir(const std::string& dir, const std::string& task,
                                                   const std::string& arch, int image_size) {
  models::ModelConfig c;
  c.arch = arch;
  c.num_classes = 10;
  std::shared_ptr<torch::nn::Module> module;
  std::map<std::string, std::string> signature;
  nlohmann::json config = {{"task", task}, {"model", arch}, {"image_size", image_size}};
  if (task == "classify") {
    tasks::ClassificationConfig tc;
    tc.model = c;
    tasks::ClassificationTask t(tc);
    module = t.module(), signature = t.signature();
    config["num_classes"] = 10;
  } else {
    tasks::MultiLabelConfig mc;
    mc.model = c;
    tasks::MultiLabelTask t(mc);
    module = t.module(), signature = t.signature();
    config["class_num"] = 10;
  }
  auto& model = dynamic_cast<models::ImageModelImpl&>(*module);
  torch::manual_seed(3);
  {
    // Random affine batch norms whose statistics are those of one batch of Orchard-scaled
    // input (momentum 1), so that activations stay O(1) through all the layers.
    torch::NoGradGuard no_grad;
    for (auto& m : model.modules(false))
      if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
        bn->weight.uniform_(0.5, 1.5);
        bn->bias.uniform_(-0.2, 0.2);
        bn->options.momentum(1.0);
      }
    model.train();
    model.forward(torch::randn({8, 3, image_size, image_size}) * input_scale(arch));
  }
  train::CheckpointManager(dir).save(0, *module, nullptr, signature);
  atomic_write_file(dir + "/config.json", config.dump());
  model.eval();
  return module;
}

double input_scale(const std::string& arch) { return models::takes_unit_range_inputs(arch) ? 1.0 : 50.0; }

torch::Tensor scale_rgb(const std::string& arch, const torch::Tensor& rgb) {
  if (models::takes_unit_range_inputs(arch)) return rgb * data::kInceptionScale - 1.0f;
  return rgb -
         torch::tensor({data::kChannelMeans[0], data::kChannelMeans[1], data::kChannelMeans[2]}).view({1, 3, 1, 1});
}

}  // namespace test
namespace {

using test::input_scale;
using test::write_model_dir;

torch::Tensor opencv_forward(const std::string& onnx, const torch::Tensor& x) {
  cv::dnn::Net net = cv::dnn::readNetFromONNX(onnx);
  std::vector<int> sizes(x.sizes().begin(), x.sizes().end());
  cv::Mat blob(static_cast<int>(sizes.size()), sizes.data(), CV_32F, x.contiguous().data_ptr<float>());
  net.setInput(blob, "images");
  cv::Mat out = net.forward();
  std::vector<int64_t> shape(out.size.p, out.size.p + out.dims);
  return torch::from_blob(out.ptr<float>(), shape, torch::kFloat).clone();
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

struct ExportCase {
  std::string task, arch;
  int size;
};

class ExportOnnx : public ::testing::TestWithParam<ExportCase> {};

TEST_P(ExportOnnx, OpenCvReproducesLogitsAndFeatures) {
  const auto& [task, arch, size] = GetParam();
  test::TempDir root;
  const std::string dir = root.file("model");
  auto module = write_model_dir(dir, task, arch, size);
  auto& model = dynamic_cast<models::ImageModelImpl&>(*module);
  auto r = cli::run({task, "export", "--model_dir", dir, "--out", root.file("m.onnx")}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = cli::run({task, "export", "--model_dir", dir, "--out", root.file("f.onnx"), "--feature_vector"}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = cli::run({task, "export", "--model_dir", dir, "--out", root.file("p.onnx"), "--include_preprocessing"}, root);
  ASSERT_EQ(r.rc, 0) << r.err;

  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, size, size}) * input_scale(arch);  // Orchard's preprocessed input
  torch::NoGradGuard no_grad;
  const auto logits = model.forward(x), features = model.features(x);
  // Outputs are O(1): 1e-4, or 1e-4 of the largest output where that is larger (two float32
  // implementations of resnet50's 53 convolutions differ by ~5e-5 of the features' scale).
  const auto tol = [](const torch::Tensor& t) { return 1e-4 * std::max(1.0, t.abs().max().item<double>()); };
  const double dl = max_diff(opencv_forward(root.file("m.onnx"), x), logits);
  const double df = max_diff(opencv_forward(root.file("f.onnx"), x), features);
  std::cout << arch << ": max |OpenCV - Orchard| " << dl << " (logits up to " << logits.abs().max().item<double>()
            << "), " << df << " (features up to " << features.abs().max().item<double>() << ")\n";
  EXPECT_LE(dl, tol(logits));
  EXPECT_LE(df, tol(features));

  // --include_preprocessing: RGB values in [0, 255] in; the graph scales them as Orchard's
  // preprocessing does (RGB minus the ImageNet means; Inception: * 2/255 - 1).
  const auto rgb = torch::randint(0, 256, {2, 3, size, size}).to(torch::kFloat);
  const auto scaled = test::scale_rgb(arch, rgb);
  const auto expected = model.forward(scaled);
  const double dp = max_diff(opencv_forward(root.file("p.onnx"), rgb), expected);
  std::cout << arch << " with preprocessing: max |OpenCV - Orchard| " << dp << "\n";
  EXPECT_LE(dp, tol(expected));
}

// resnet_tiny: basic blocks, the small-input stem (no max-pool); resnet50: the ImageNet stem,
// bottlenecks and projection shortcuts; a multi-label tagger (its model_dir holds the class
// counters too); Inception-v3 at its smallest input (all five block types, both pools);
// MobileNetV2 (depthwise convolutions, ReLU6, inverted residuals); TF-Slim's Inception-v3
// (pools without their padding) and MobileNetV2 ('SAME' strided convolutions, odd pixel after);
// TF-Slim's resnet_v1_50 (strides in each stage's last unit, subsampled shortcuts; the Model
// Garden's ResNet-50, the third layout, is run by ExportTf below: the walk is the same).
INSTANTIATE_TEST_SUITE_P(
    ImageModels, ExportOnnx,
    ::testing::Values(ExportCase{"classify", "resnet_tiny", 32}, ExportCase{"classify", "resnet50", 64},
                      ExportCase{"multilabel", "resnet_tiny", 32}, ExportCase{"classify", "inception_v3", 75},
                      ExportCase{"classify", "mobilenet_v2", 64}, ExportCase{"classify", "inception_v3_slim", 75},
                      ExportCase{"classify", "mobilenet_v2_slim", 64}, ExportCase{"classify", "resnet_v1_50", 64}),
    [](const auto& info) { return info.param.task + "_" + info.param.arch; });

// `classify|multilabel export --format frozen_graph | saved_model`: TensorFlow's serving
// formats. OpenCV's TensorFlow importer (cv::dnn::readNetFromTensorflow, which shares no code
// with Orchard) runs the frozen graphs and must reproduce Orchard's outputs; the SavedModel
// must hold the same graph under the "serve" tag, with its signature's tensors in it; and
// every node must be a TensorFlow op with that op's attrs (TensorFlow's op registry, written
// out below for the ops the exporter uses).

// Op -> (inputs, or -1 for ConcatV2's N + 1; the attrs it takes: name -> kind; the attrs it
// needs, those without a default in TensorFlow's op registry).
struct TfOp {
  int inputs;
  std::map<std::string, char> attrs;  // t type, i int, b bool, s string, l list(int), h shape, v tensor
  std::vector<std::string> required;
};
const std::map<std::string, TfOp>& tf_ops() {
  static const std::map<std::string, TfOp> ops = {
      {"Placeholder", {0, {{"dtype", 't'}, {"shape", 'h'}}, {"dtype"}}},
      {"Const", {0, {{"dtype", 't'}, {"value", 'v'}}, {"dtype", "value"}}},
      {"Conv2D",
       {2,
        {{"T", 't'},
         {"strides", 'l'},
         {"use_cudnn_on_gpu", 'b'},
         {"padding", 's'},
         {"explicit_paddings", 'l'},
         {"data_format", 's'},
         {"dilations", 'l'}},
        {"T", "strides", "padding"}}},
      {"DepthwiseConv2dNative",
       {2,
        {{"T", 't'},
         {"strides", 'l'},
         {"padding", 's'},
         {"explicit_paddings", 'l'},
         {"data_format", 's'},
         {"dilations", 'l'}},
        {"T", "strides", "padding"}}},
      {"BiasAdd", {2, {{"T", 't'}, {"data_format", 's'}}, {"T"}}},
      {"Relu", {1, {{"T", 't'}}, {"T"}}},
      {"Relu6", {1, {{"T", 't'}}, {"T"}}},
      {"Softmax", {1, {{"T", 't'}}, {"T"}}},
      {"Sigmoid", {1, {{"T", 't'}}, {"T"}}},
      {"AddV2", {2, {{"T", 't'}}, {"T"}}},
      {"ConcatV2", {-1, {{"N", 'i'}, {"T", 't'}, {"Tidx", 't'}}, {"N", "T"}}},
      {"MaxPool",
       {1,
        {{"T", 't'},
         {"ksize", 'l'},
         {"strides", 'l'},
         {"padding", 's'},
         {"explicit_paddings", 'l'},
         {"data_format", 's'}},
        {"ksize", "strides", "padding"}}},
      {"AvgPool",
       {1,
        {{"T", 't'}, {"ksize", 'l'}, {"strides", 'l'}, {"padding", 's'}, {"data_format", 's'}},
        {"T", "ksize", "strides", "padding"}}},
      {"Mean", {2, {{"keep_dims", 'b'}, {"T", 't'}, {"Tidx", 't'}}, {"T"}}},
      {"MatMul", {2, {{"transpose_a", 'b'}, {"transpose_b", 'b'}, {"T", 't'}}, {"T"}}},
      {"Pad", {2, {{"T", 't'}, {"Tpaddings", 't'}}, {"T"}}},
      {"Cast", {1, {{"SrcT", 't'}, {"DstT", 't'}, {"Truncate", 'b'}}, {"SrcT", "DstT"}}},
      {"ResizeBilinear", {2, {{"T", 't'}, {"align_corners", 'b'}, {"half_pixel_centers", 'b'}}, {"T"}}},
      {"ResizeNearestNeighbor", {2, {{"T", 't'}, {"align_corners", 'b'}, {"half_pixel_centers", 'b'}}, {"T"}}},
      {"Slice", {3, {{"T", 't'}, {"Index", 't'}}, {"T", "Index"}}},
      {"Mul", {2, {{"T", 't'}}, {"T"}}},
      {"Sub", {2, {{"T", 't'}}, {"T"}}},
      {"Exp", {1, {{"T", 't'}}, {"T"}}},
      {"Identity", {1, {{"T", 't'}}, {"T"}}},
      {"Reshape", {2, {{"T", 't'}, {"Tshape", 't'}}, {"T"}}},
      {"Split", {2, {{"num_split", 'i'}, {"T", 't'}}, {"num_split", "T"}}},
      {"Squeeze", {1, {{"T", 't'}, {"squeeze_dims", 'l'}}, {"T"}}},
      {"GatherV2",
       {3,
        {{"batch_dims", 'i'}, {"Tparams", 't'}, {"Tindices", 't'}, {"Taxis", 't'}},
        {"Tparams", "Tindices", "Taxis"}}},
      {"NonMaxSuppressionV3", {5, {{"T", 't'}, {"T_threshold", 't'}}, {}}},
      {"Shape", {1, {{"T", 't'}, {"out_type", 't'}}, {"T"}}},
      {"Fill", {2, {{"T", 't'}, {"index_type", 't'}}, {"T"}}},
      {"Minimum", {2, {{"T", 't'}}, {"T"}}},
      {"Maximum", {2, {{"T", 't'}}, {"T"}}},
      {"Greater", {2, {{"T", 't'}}, {"T"}}},
      {"Where", {1, {{"T", 't'}}, {}}},
      {"Size", {1, {{"T", 't'}, {"out_type", 't'}}, {"T"}}},
      {"TopKV2", {2, {{"sorted", 'b'}, {"T", 't'}, {"index_type", 't'}}, {"T"}}},
      {"Pack", {-1, {{"N", 'i'}, {"T", 't'}, {"axis", 'i'}}, {"N", "T"}}},
      {"ExpandDims", {2, {{"T", 't'}, {"Tdim", 't'}}, {"T"}}},
  };
  return ops;
}

char attr_kind(const tensorflow::AttrValue& v) {
  switch (v.value_case()) {
    case tensorflow::AttrValue::kType: return 't';
    case tensorflow::AttrValue::kI: return 'i';
    case tensorflow::AttrValue::kB: return 'b';
    case tensorflow::AttrValue::kS: return 's';
    case tensorflow::AttrValue::kList: return 'l';
    case tensorflow::AttrValue::kShape: return 'h';
    case tensorflow::AttrValue::kTensor: return 'v';
    default: return '?';
  }
}

// Every node a known op with that op's inputs and attrs; inputs name earlier nodes; names unique.
void expect_valid_tf_graph(const tensorflow::GraphDef& graph) {
  std::set<std::string> seen;
  for (const auto& n : graph.node()) {
    SCOPED_TRACE(n.name() + " (" + n.op() + ")");
    auto op = tf_ops().find(n.op());
    ASSERT_NE(op, tf_ops().end()) << "not an op the exporter's table knows";
    // -1: N inputs (+ the axis for ConcatV2)
    const int inputs =
        op->second.inputs >= 0 ? op->second.inputs : static_cast<int>(n.attr().at("N").i()) + (n.op() == "ConcatV2");
    EXPECT_EQ(n.input_size(), inputs);
    for (const auto& in : n.input())  // "node" or "node:k"
      EXPECT_TRUE(seen.count(in.substr(0, in.find(':')))) << in << " is not an earlier node";
    for (const auto& [name, value] : n.attr()) {
      auto a = op->second.attrs.find(name);
      ASSERT_NE(a, op->second.attrs.end()) << name << " is not an attr of " << n.op();
      EXPECT_EQ(attr_kind(value), a->second) << name;
    }
    for (const auto& r : op->second.required) EXPECT_TRUE(n.attr().count(r)) << "no " << r;
    EXPECT_TRUE(seen.insert(n.name()).second) << "two nodes of this name";
  }
}

// `layer`: OpenCV's name for the output. Its importer fuses a BiasAdd into the MatMul before it
// and names the layer after the MatMul node ("logits/MatMul" computes TensorFlow's "logits").
torch::Tensor opencv_tf_forward(const std::string& pb, const torch::Tensor& nchw, const std::string& layer) {
  cv::dnn::Net net = cv::dnn::readNetFromTensorflow(pb);
  std::vector<int> sizes(nchw.sizes().begin(), nchw.sizes().end());
  cv::Mat blob(static_cast<int>(sizes.size()), sizes.data(), CV_32F, nchw.contiguous().data_ptr<float>());
  net.setInput(blob);  // OpenCV's TensorFlow importer takes NCHW blobs for NHWC graphs
  cv::Mat out = net.forward(layer);
  return torch::from_blob(out.ptr<float>(), {static_cast<int64_t>(out.total())}, torch::kFloat)
      .clone()
      .view({nchw.size(0), -1});
}

tensorflow::GraphDef read_graph(const std::string& path) {
  tensorflow::GraphDef graph;
  EXPECT_TRUE(graph.ParseFromString(read_file(path))) << path;
  return graph;
}

// The float and int32 constants of a GraphDef, and the few ops of the detection graph's
// Postprocessor (Split, Mul, AddV2, Sub, Exp, ConcatV2, Sigmoid, Softmax, Identity), evaluated in
// graph order for the nodes `wanted` selects, with TensorFlow's broadcasting and axes.
void evaluate_tf_nodes(const tensorflow::GraphDef& graph, std::map<std::string, torch::Tensor>& values,
                       const std::function<bool(const std::string&)>& wanted) {
  for (const auto& n : graph.node()) {
    if (n.op() == "Const") {
      const auto& t = n.attr().at("value").tensor();
      std::vector<int64_t> shape;
      for (const auto& d : t.tensor_shape().dim()) shape.push_back(d.size());
      if (t.dtype() == tensorflow::DT_FLOAT) {
        std::vector<float> v(t.tensor_content().size() / 4);
        std::memcpy(v.data(), t.tensor_content().data(), t.tensor_content().size());
        values[n.name()] = torch::tensor(v).view(shape);
      } else {
        values[n.name()] = torch::tensor(std::vector<int64_t>(t.int_val().begin(), t.int_val().end())).view(shape);
      }
      continue;
    }
    if (!wanted(n.name())) continue;
    auto in = [&](int i) { return values.at(n.input(i)); };
    const std::string& op = n.op();
    if (op == "Split") {
      const auto parts = in(1).chunk(n.attr().at("num_split").i(), in(0).item<int64_t>());
      for (size_t k = 0; k < parts.size(); ++k) values[n.name() + (k ? ":" + std::to_string(k) : "")] = parts[k];
    } else if (op == "Mul") {
      values[n.name()] = in(0) * in(1);
    } else if (op == "AddV2") {
      values[n.name()] = in(0) + in(1);
    } else if (op == "Sub") {
      values[n.name()] = in(0) - in(1);
    } else if (op == "Exp") {
      values[n.name()] = in(0).exp();
    } else if (op == "Sigmoid") {
      values[n.name()] = in(0).sigmoid();
    } else if (op == "Softmax") {
      values[n.name()] = in(0).softmax(-1);
    } else if (op == "Identity") {
      values[n.name()] = in(0);
    } else if (op == "ConcatV2") {
      std::vector<torch::Tensor> parts;
      for (int i = 0; i + 1 < n.input_size(); ++i) parts.push_back(in(i));
      values[n.name()] = torch::cat(parts, in(n.input_size() - 1).item<int64_t>());
    } else if (op == "Squeeze") {
      values[n.name()] = in(0).squeeze(n.attr().at("squeeze_dims").list().i(0));
    } else if (op == "GatherV2") {
      const auto idx = in(1).to(torch::kLong);
      const int64_t axis = in(2).item<int64_t>();
      values[n.name()] = idx.dim() == 0 ? in(0).select(axis, idx.item<int64_t>()) : in(0).index_select(axis, idx);
    } else if (op == "NonMaxSuppressionV3") {  // tf.image.non_max_suppression: Orchard's detect::nms
      values[n.name()] = detect::nms(in(0), in(1), in(3).item<float>(), in(2).item<int64_t>(), in(4).item<float>());
    } else if (op == "Shape") {
      values[n.name()] = torch::tensor(in(0).sizes().vec());
    } else if (op == "Fill") {
      const auto shape = in(0).to(torch::kLong).contiguous();
      values[n.name()] =
          torch::full(std::vector<int64_t>(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel()),
                      in(1).item<float>());
    } else if (op == "Minimum") {
      values[n.name()] = torch::minimum(in(0), in(1).to(in(0).dtype()));
    } else if (op == "Maximum") {
      values[n.name()] = torch::maximum(in(0), in(1).to(in(0).dtype()));
    } else if (op == "Greater") {
      values[n.name()] = in(0) > in(1);
    } else if (op == "Where") {
      values[n.name()] = in(0).nonzero();
    } else if (op == "Cast") {
      const bool to_float = n.attr().at("DstT").type() == tensorflow::DT_FLOAT;
      values[n.name()] = in(0).to(to_float ? torch::kFloat : torch::kLong);
    } else if (op == "Reshape") {
      const auto shape = in(1).to(torch::kLong).contiguous();
      values[n.name()] =
          in(0).reshape(std::vector<int64_t>(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel()));
    } else if (op == "Size") {
      values[n.name()] = torch::tensor(in(0).numel());
    } else if (op == "TopKV2") {  // sorted, ties to the lower index
      const auto [sorted, order] = in(0).sort(/*stable=*/true, 0, /*descending=*/true);
      const int64_t k = in(1).item<int64_t>();
      values[n.name()] = sorted.narrow(0, 0, k);
      values[n.name() + ":1"] = order.narrow(0, 0, k);
    } else if (op == "Pack") {
      std::vector<torch::Tensor> parts;
      for (int i = 0; i < n.input_size(); ++i) parts.push_back(in(i).to(torch::kLong));
      values[n.name()] = torch::stack(parts, n.attr().at("axis").i());
    } else if (op == "Pad") {
      const auto pads = in(1).to(torch::kLong).contiguous();  // [rank, 2]
      std::vector<int64_t> torch_pads;                        // last dimension first
      for (int64_t d = pads.size(0) - 1; d >= 0; --d) {
        torch_pads.push_back(pads[d][0].item<int64_t>());
        torch_pads.push_back(pads[d][1].item<int64_t>());
      }
      values[n.name()] = torch::constant_pad_nd(in(0), torch_pads, 0);
    } else if (op == "ExpandDims") {
      values[n.name()] = in(0).unsqueeze(in(1).item<int64_t>());
    } else {
      ADD_FAILURE() << n.name() << ": the test evaluates no " << op;
    }
  }
}

class ExportTf : public ::testing::TestWithParam<ExportCase> {};

TEST_P(ExportTf, OpenCvRunsTheFrozenGraphAndTheSavedModelHoldsIt) {
  const auto& [task, arch, size] = GetParam();
  test::TempDir root;
  const std::string dir = root.file("model");
  auto module = write_model_dir(dir, task, arch, size);
  auto& model = dynamic_cast<models::ImageModelImpl&>(*module);
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> command = {task, "export", "--model_dir", dir};
    command.insert(command.end(), args.begin(), args.end());
    auto r = cli::run(command, root);
    EXPECT_EQ(r.rc, 0) << r.err;
  };
  run({"--format", "frozen_graph", "--out", root.file("m.pb")});
  run({"--format", "frozen_graph", "--out", root.file("f.pb"), "--feature_vector"});
  run({"--format", "frozen_graph", "--out", root.file("p.pb"), "--include_preprocessing"});
  run({"--format", "saved_model", "--out", root.file("saved"), "--include_preprocessing"});

  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, size, size}) * input_scale(arch);
  torch::NoGradGuard no_grad;
  const auto logits = model.forward(x), features = model.features(x);
  const auto tol = [](const torch::Tensor& t) { return 1e-4 * std::max(1.0, t.abs().max().item<double>()); };
  const double dl = max_diff(opencv_tf_forward(root.file("m.pb"), x, "logits/MatMul"), logits);
  const double df = max_diff(opencv_tf_forward(root.file("f.pb"), x, "features"), features);
  const auto probs = task == "classify" ? torch::softmax(logits, 1) : torch::sigmoid(logits);
  const double dpr = max_diff(opencv_tf_forward(root.file("m.pb"), x, "probs"), probs);
  std::cout << arch << ": max |OpenCV (TensorFlow graph) - Orchard| logits " << dl << ", features " << df << ", probs "
            << dpr << "\n";
  EXPECT_LE(dl, tol(logits));
  EXPECT_LE(df, tol(features));
  EXPECT_LE(dpr, tol(logits));  // softmax and sigmoid move less than their inputs

  const auto rgb = torch::randint(0, 256, {2, 3, size, size}).to(torch::kFloat);
  const auto scaled = test::scale_rgb(arch, rgb);
  const auto expected = model.forward(scaled);
  const double dp = max_diff(opencv_tf_forward(root.file("p.pb"), rgb, "logits/MatMul"), expected);
  std::cout << arch << " with preprocessing: " << dp << "\n";
  EXPECT_LE(dp, tol(expected));

  for (const char* file : {"m.pb", "f.pb", "p.pb"}) {
    SCOPED_TRACE(file);
    expect_valid_tf_graph(read_graph(root.file(file)));
  }
  // The SavedModel: the frozen graph OpenCV ran (p.pb), field for field, under "serve", and a
  // serving_default signature whose tensors are in it; variables/ is there (empty).
  tensorflow::SavedModel saved;
  ASSERT_TRUE(saved.ParseFromString(read_file(root.file("saved/saved_model.pb"))));
  EXPECT_TRUE(std::filesystem::is_directory(root.file("saved/variables")));
  EXPECT_EQ(saved.saved_model_schema_version(), 1);
  ASSERT_EQ(saved.meta_graphs_size(), 1);
  const auto& meta = saved.meta_graphs(0);
  ASSERT_EQ(meta.meta_info_def().tags_size(), 1);
  EXPECT_EQ(meta.meta_info_def().tags(0), "serve");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(meta.graph_def(), read_graph(root.file("p.pb"))));
  const auto& signature = meta.signature_def().at("serving_default");
  EXPECT_EQ(signature.method_name(), "tensorflow/serving/predict");
  std::set<std::string> nodes;
  for (const auto& n : meta.graph_def().node()) nodes.insert(n.name());
  EXPECT_EQ(signature.inputs().at("inputs").name(), "images:0");
  EXPECT_EQ(signature.inputs().at("inputs").tensor_shape().dim(1).size(), size);
  for (const char* output : {"logits", "probs"}) {
    ASSERT_TRUE(signature.outputs().count(output)) << output;
    const auto& info = signature.outputs().at(output);
    EXPECT_EQ(info.name(), std::string(output) + ":0");
    EXPECT_TRUE(nodes.count(output));
    EXPECT_EQ(info.dtype(), tensorflow::DT_FLOAT);
    EXPECT_EQ(info.tensor_shape().dim(1).size(), logits.size(1));
  }
  // A second export into the same folder is refused, the first left whole.
  auto r = cli::run({task, "export", "--model_dir", dir, "--format", "saved_model", "--out", root.file("saved")}, root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("a SavedModel is already there"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(root.file("saved/saved_model.pb")).size(), saved.ByteSizeLong());

  // --format tfhub (the Model Garden's tfhub_export.py): classification/ and feature_vector/,
  // RGB in [0, 1] in.
  if (arch != "resnet50_garden") return;
  run({"--format", "tfhub", "--out", root.file("hub")});
  for (const std::string module : {"classification", "feature_vector"}) {
    tensorflow::SavedModel hub;
    ASSERT_TRUE(hub.ParseFromString(read_file(root.file("hub/" + module + "/saved_model.pb")))) << module;
    std::string graph;
    hub.meta_graphs(0).graph_def().SerializeToString(&graph);
    atomic_write_file(root.file(module + ".pb"), graph);
  }
  const double dh = max_diff(opencv_tf_forward(root.file("classification.pb"), rgb / 255, "logits/MatMul"), expected);
  const double dhf =
      max_diff(opencv_tf_forward(root.file("feature_vector.pb"), rgb / 255, "features"), model.features(scaled));
  std::cout << arch << " TF Hub modules: logits " << dh << ", features " << dhf << "\n";
  EXPECT_LE(dh, tol(expected));
  EXPECT_LE(dhf, tol(model.features(scaled)));
}

// resnet50 (the ImageNet stem: 7x7/2 and 3x3/2 convs and the max pool padded as torch pads,
// which TensorFlow's 'SAME' does not: explicit Pad nodes), a multi-label tagger (sigmoid
// probabilities), Inception-v3 (torchvision's pools counting their padding, concatenations),
// TF-Slim's Inception-v3 and MobileNetV2 ('SAME' pools and depthwise convolutions), the Model
// Garden's ResNet-50 ('SAME' strided convolutions and stem max-pool: no Pad nodes).
INSTANTIATE_TEST_SUITE_P(
    ImageModels, ExportTf,
    ::testing::Values(ExportCase{"classify", "resnet50", 64}, ExportCase{"multilabel", "resnet_tiny", 32},
                      ExportCase{"classify", "inception_v3", 75}, ExportCase{"classify", "inception_v3_slim", 75},
                      ExportCase{"classify", "mobilenet_v2_slim", 64}, ExportCase{"classify", "resnet50_garden", 64}),
    [](const auto& info) { return info.param.task + "_" + info.param.arch; });

// `detect export --format onnx`: the SSD (backbone endpoints, extra layers with TF 'SAME'
// stride-2 convs padded asymmetrically, 3x3 heads; square and non-square inputs) plus score conversion and box decoding
// against the anchors, checked against DetectionTask's own forward, decode_boxes and score
// converter.
struct DetectExportCase {
  std::string score_converter;
  int height, width;     // fixed_shape_resizer
  bool ssdlite = false;  // convolutional_box_predictor.use_depthwise: depthwise 3x3 + BN + ReLU6, then 1x1 heads
  std::string feature_extractor = "ssd_mobilenet_v2";
  // RetinaNet's layout (the *_fpn_shared_box_predictor configs): FPN levels 3..6, the
  // weight-shared predictor (2 tower layers), multiscale anchors; `lite`: FPN-Lite (separable
  // FPN convs, a shared separable tower).
  bool fpn = false, lite = false;
};

// The pipeline.config edits that turn the shapes SSD into the FPN layout of `c`.
std::vector<std::pair<std::string, std::string>> fpn_edits(const DetectExportCase& c) {
  std::vector<std::pair<std::string, std::string>> edits;
  if (c.feature_extractor.rfind("ssd_resnet", 0) == 0)  // depth_multiplier 1, the config's batch norm
    edits = {{"      depth_multiplier: 0.35\n      min_depth: 8\n",
              "      override_base_feature_extractor_hyperparams: true\n"}};
  edits.insert(edits.end(),
               {{"\"" + c.feature_extractor + "\"",
                 "\"" + c.feature_extractor + "_fpn\"\n      fpn {\n        min_level: 3\n        max_level: 6\n" +
                     "        additional_layer_depth: 32\n      }" + (c.lite ? "\n      use_depthwise: true" : "")},
                {"convolutional_box_predictor {\n        min_depth: 0\n        max_depth: 0\n"
                 "        num_layers_before_predictor: 0\n",
                 std::string("weight_shared_convolutional_box_predictor {\n        depth: 32\n"
                             "        num_layers_before_predictor: 2\n") +
                     (c.lite ? "        share_prediction_tower: true\n        use_depthwise: true\n" : "")},
                {"        use_dropout: false\n        dropout_keep_probability: 0.8\n", ""},
                {"        apply_sigmoid_to_scores: false\n", ""},
                {"ssd_anchor_generator {\n        num_layers: 6\n        min_scale: 0.15\n        max_scale: 0.95\n",
                 "multiscale_anchor_generator {\n        min_level: 3\n        max_level: 6\n"
                 "        anchor_scale: 3.0\n        scales_per_octave: 2\n"},
                {"        reduce_boxes_in_lowest_layer: false\n", ""}});
  return edits;
}

class ExportOnnxDetect : public ::testing::TestWithParam<DetectExportCase> {};

// The NMS of Arm NN 20.08's reference TFLite_Detection_PostProcess (DetectionPostProcess.cpp):
// greedy in score order over the scores >= the threshold, at most `max` kept, where every box,
// kept or already suppressed, suppresses the later ones it overlaps with IoU > the threshold.
// TFLite's (and Orchard's detect::nms) suppress by kept boxes only; the two differ where a
// suppressed box overlaps a later one. Returns the kept indices, best first.
std::vector<int64_t> armnn_reference_nms(const torch::Tensor& boxes, const torch::Tensor& scores, double iou,
                                         int64_t max, double score_threshold) {
  const auto s = scores.contiguous();
  const auto score = s.accessor<float, 1>();
  std::vector<int64_t> candidates;
  for (int64_t i = 0; i < s.size(0); ++i)
    if (score[i] >= score_threshold) candidates.push_back(i);
  std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  const auto iou_matrix = detect::pairwise_iou(boxes, boxes).contiguous();
  const auto overlap = iou_matrix.accessor<float, 2>();
  std::vector<bool> suppressed(candidates.size(), false);
  std::vector<int64_t> kept;
  for (size_t i = 0; i < candidates.size() && static_cast<int64_t>(kept.size()) < max; ++i) {
    if (!suppressed[i]) kept.push_back(candidates[i]);
    for (size_t j = i + 1; j < candidates.size(); ++j)
      if (overlap[candidates[i]][candidates[j]] > iou) suppressed[j] = true;
  }
  return kept;
}

TEST_P(ExportOnnxDetect, OpenCvReproducesBoxesAndScores) {
  const auto& [converter, height, width, ssdlite, feature_extractor, fpn, lite] = GetParam();
  test::TempDir root;
  const std::string data = root.file("shapes"), dir = root.file("model");
  auto r = cli::run(
      {"data", "shapes", "--task", "detection", "--out_dir", data, "--num_train", "4", "--num_validation", "4"}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string text = read_file(data + "/pipeline.config");
  text = std::regex_replace(text, std::regex("score_converter: SIGMOID"), "score_converter: " + converter);
  text = std::regex_replace(text, std::regex("height: 96"), "height: " + std::to_string(height));
  text = std::regex_replace(text, std::regex("width: 96"), "width: " + std::to_string(width));
  if (ssdlite)
    text = std::regex_replace(text, std::regex("kernel_size: 3"), "kernel_size: 3\n        use_depthwise: true");
  text = std::regex_replace(text, std::regex("\"ssd_mobilenet_v2\""), "\"" + feature_extractor + "\"");
  if (fpn) {
    for (const auto& [from, to] : fpn_edits(GetParam())) {
      const auto at = text.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      text.replace(at, from.size(), to);
    }
  }
  // More room than the classes fill (3 x 20 < 70): the exported NMS pads its outputs.
  text = std::regex_replace(text, std::regex("max_total_detections: 20"), "max_total_detections: 70");
  std::filesystem::create_directories(dir);
  atomic_write_file(dir + "/pipeline.config", text);

  const auto pipeline = detect::parse_pipeline_config(text, "pipeline.config", /*strict=*/true);
  torch::manual_seed(3);  // the model's initial weights too
  tasks::DetectionTask task(tasks::detection_config(pipeline, /*channels_last=*/false));
  auto& ssd = dynamic_cast<tasks::SsdMetaArchitecture&>(task.meta_architecture());
  ASSERT_EQ(ssd.config().score_converter, converter);
  ASSERT_EQ(task.config().input.height, height);
  ASSERT_EQ(task.config().input.width, width);
  auto& model = *ssd.model();
  ASSERT_EQ(model.options().depthwise_heads, ssdlite);
  ASSERT_EQ(model.options().feature_extractor, feature_extractor);
  ASSERT_EQ(model.options().fpn.enabled, fpn);
  ASSERT_EQ(model.options().weight_shared.has_value(), fpn);
  ASSERT_EQ(model.options().use_depthwise, lite);
  torch::manual_seed(3);
  {
    // Random head weights and biases, random affine batch norms (the heads' too) with one
    // batch's statistics.
    torch::NoGradGuard no_grad;
    // (FPN-Lite's heads are a depthwise then a 1x1 conv: larger weights spread their scores as
    // much, away from ties the NMS would order either way.)
    for (const auto& p : model.named_parameters())
      if (detect::is_prediction_head_parameter(p.key())) p.value().normal_(0, lite ? 0.3 : 0.05);
    for (auto& m : model.modules(false)) {
      if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
        bn->weight.uniform_(0.5, 1.5);
        bn->bias.uniform_(-0.2, 0.2);
        bn->options.momentum(1.0);
      }
    }
    model.train();
    model.forward(torch::rand({4, 3, height, width}) * 2 - 1);
  }
  train::CheckpointManager(dir).save(0, model, nullptr, task.signature());
  model.eval();
  r = cli::run({"detect", "export", "--model_dir", dir, "--format", "onnx", "--out", root.file("d.onnx")}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = cli::run({"detect", "export", "--model_dir", dir, "--format", "onnx", "--out", root.file("p.onnx"),
                "--include_preprocessing"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;

  torch::manual_seed(5);
  const auto rgb = torch::randint(0, 256, {2, 3, height, width}).to(torch::kFloat);
  const auto x = rgb * data::kInceptionScale - 1.0f;  // the detector's [-1, 1] input
  torch::NoGradGuard no_grad;
  const auto out = model.forward(x);
  const auto boxes = detect::decode_boxes(out.narrow(2, 0, 4), ssd.anchors(), ssd.config().loss.coder);
  auto scores = out.narrow(2, 4, out.size(2) - 4);
  if (converter == "SIGMOID") scores = scores.sigmoid();
  if (converter == "SOFTMAX") scores = scores.softmax(2);

  for (const auto& [file, input] : {std::pair{root.file("d.onnx"), x}, std::pair{root.file("p.onnx"), rgb}}) {
    cv::dnn::Net net = cv::dnn::readNetFromONNX(file);
    std::vector<int> sizes(input.sizes().begin(), input.sizes().end());
    cv::Mat blob(4, sizes.data(), CV_32F, input.contiguous().data_ptr<float>());
    net.setInput(blob, "images");
    std::vector<cv::Mat> outs;
    net.forward(outs, std::vector<std::string>{"raw_detection_boxes", "raw_detection_scores"});
    ASSERT_EQ(outs.size(), 2u);
    auto tensor = [](const cv::Mat& m) {
      return torch::from_blob(const_cast<float*>(m.ptr<float>()), std::vector<int64_t>(m.size.p, m.size.p + m.dims),
                              torch::kFloat)
          .clone();
    };
    const double db = max_diff(tensor(outs[0]), boxes), ds = max_diff(tensor(outs[1]), scores);
    std::cout << converter << " " << height << "x" << width << " " << file << ": max |OpenCV - Orchard| boxes " << db
              << " (up to " << boxes.abs().max().item<double>() << "), scores " << ds << "\n";
    EXPECT_LE(db, 1e-4);
    EXPECT_LE(ds, 1e-4);
  }
  // --format frozen_graph: the OD API's layout (image_tensor uint8 in, the preprocessing in the
  // graph, BoxPredictor_i heads, concat / concat_1, the Postprocessor's decoding).
  r = cli::run({"detect", "export", "--model_dir", dir, "--format", "frozen_graph", "--out", root.file("d.pb")}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto graph = read_graph(root.file("d.pb"));
  expect_valid_tf_graph(graph);
  {
    // The score conversion and box decoding, evaluated node by node from the graph (OpenCV's
    // importer does not run an OD API graph's Postprocessor; its script below replaces it) on
    // Orchard's own head outputs: Orchard's scores and decoded boxes.
    std::map<std::string, torch::Tensor> values = {{"concat", out.narrow(0, 0, 1).narrow(2, 0, 4)},
                                                   {"concat_1", out.narrow(0, 0, 1).narrow(2, 4, out.size(2) - 4)}};
    evaluate_tf_nodes(graph, values, [](const std::string& name) {
      return name.rfind("Postprocessor/", 0) == 0 || name.rfind("raw_detection_", 0) == 0 ||
             name.rfind("detection_", 0) == 0 || name.rfind("num_detections", 0) == 0;
    });
    const double db = max_diff(values.at("raw_detection_boxes"), boxes.narrow(0, 0, 1));
    const double ds = max_diff(values.at("raw_detection_scores"), scores.narrow(0, 0, 1));
    // The NMS in the graph: multiclass_nms's detections, padded to max_total_detections.
    const auto expected =
        detect::multiclass_nms(boxes[0], scores[0].narrow(1, 1, scores.size(2) - 1), ssd.config().nms);
    const int64_t k = expected.scores.size(0), total = ssd.config().nms.max_total_detections;
    ASSERT_EQ(values.at("num_detections").item<float>(), static_cast<float>(k));
    ASSERT_EQ(values.at("detection_boxes").sizes(), (std::vector<int64_t>{1, total, 4}));
    const double dd = max_diff(values.at("detection_boxes")[0].narrow(0, 0, k), expected.boxes);
    EXPECT_TRUE(values.at("detection_scores")[0].narrow(0, 0, k).equal(expected.scores));
    EXPECT_TRUE(values.at("detection_classes")[0].narrow(0, 0, k).equal(expected.classes.to(torch::kFloat)));
    EXPECT_EQ(values.at("detection_scores")[0].narrow(0, k, total - k).abs().sum().item<float>(), 0.0f);
    std::cout << converter << " " << height << "x" << width << " frozen graph's Postprocessor: raw boxes " << db
              << ", scores " << ds << "; " << k << " detections, boxes " << dd << "\n";
    EXPECT_LE(db, 1e-5);
    EXPECT_LE(ds, 1e-6);
    EXPECT_LE(dd, 1e-5);
  }

  // --format tflite, as export_tflite_ssd_graph.py + the TFLite converter write it, run in Arm NN
  // (its TfLite parser and reference backend, which implements TFLite_Detection_PostProcess):
  // without the op, the head outputs after the score converter; with it, the op's fast
  // (class-agnostic) and regular (per-class) NMS on boxes decoded by Arm NN against the anchors
  // the file carries: Orchard's decoding and NMS on its own outputs give the same detections.
  {
    auto tflite = [&](const std::string& file, std::vector<std::string> args) {
      std::vector<std::string> command = {"detect", "export", "--model_dir", dir, "--format", "tflite", "--out", file};
      command.insert(command.end(), args.begin(), args.end());
      auto t = cli::run(command, root);
      EXPECT_EQ(t.rc, 0) << t.err;
    };
    tflite(root.file("raw.tflite"), {"--add_postprocessing_op", "false"});
    tflite(root.file("fast.tflite"), {});
    tflite(root.file("regular.tflite"), {"--use_regular_nms", "true", "--max_detections", "15"});
    const auto input = x.narrow(0, 0, 1).permute({0, 2, 3, 1}).contiguous();  // normalized_input_image_tensor
    const auto raw = test::run_tflite_in_armnn(root.file("raw.tflite"), input, root.path());
    ASSERT_EQ(raw.size(), 2u);
    const auto encodings = out.narrow(0, 0, 1).narrow(2, 0, 4);
    const double de = max_diff(raw[0], encodings), encodings_scale = encodings.abs().max().item<double>();
    const double dc = max_diff(raw[1], scores.narrow(0, 0, 1));
    const auto candidates = scores[0].narrow(1, 1, scores.size(2) - 1);
    const auto& nms = ssd.config().nms;
    for (const bool regular : {false, true}) {
      SCOPED_TRACE(regular ? "regular NMS" : "fast NMS");
      const auto got =
          test::run_tflite_in_armnn(root.file(regular ? "regular.tflite" : "fast.tflite"), input, root.path());
      ASSERT_EQ(got.size(), 4u);  // boxes, classes, scores, num_detections
      // Orchard's decoded boxes and scores through Arm NN's NMS (above): its fast NMS (each
      // anchor's best class, one class-agnostic NMS, the best 10) and regular NMS (per class, at
      // most --detections_per_class 100 each, then the best 15).
      torch::Tensor want_boxes, want_classes, want_scores;
      if (regular) {
        std::vector<std::tuple<float, int64_t, int64_t>> kept;  // score, anchor, class
        for (int64_t c = 0; c < candidates.size(1); ++c)
          for (int64_t i :
               armnn_reference_nms(boxes[0], candidates.select(1, c), nms.iou_threshold, 100, nms.score_threshold))
            kept.emplace_back(candidates[i][c].item<float>(), i, c);
        std::stable_sort(kept.begin(), kept.end(),
                         [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
        kept.resize(std::min<size_t>(kept.size(), 15));
        std::vector<int64_t> anchors_kept, classes_kept;
        std::vector<float> scores_kept;
        for (const auto& [score, anchor, cls] : kept)
          scores_kept.push_back(score), anchors_kept.push_back(anchor), classes_kept.push_back(cls);
        want_boxes = boxes[0].index_select(0, torch::tensor(anchors_kept));
        want_classes = torch::tensor(classes_kept), want_scores = torch::tensor(scores_kept);
      } else {
        const auto [best, cls] = candidates.max(1);
        const auto keep =
            torch::tensor(armnn_reference_nms(boxes[0], best, nms.iou_threshold, 10, nms.score_threshold));
        want_boxes = boxes[0].index_select(0, keep), want_classes = cls.index_select(0, keep),
        want_scores = best.index_select(0, keep);
      }
      const int64_t k = want_scores.size(0);
      ASSERT_EQ(got[3].item<float>(), static_cast<float>(k));
      const double dbox = max_diff(got[0][0].narrow(0, 0, k), want_boxes);
      EXPECT_TRUE(got[1][0].narrow(0, 0, k).equal(want_classes.to(torch::kFloat))) << got[1] << want_classes;
      const double dscore = max_diff(got[2][0].narrow(0, 0, k), want_scores);
      std::cout << converter << " " << height << "x" << width << " TFLite in Arm NN: box encodings " << de << " (up to "
                << encodings_scale << "), class predictions " << dc << "; " << (regular ? "regular" : "fast")
                << " NMS: " << k << " detections, boxes " << dbox << ", scores " << dscore << "\n";
      EXPECT_LE(dbox, 1e-4);
      EXPECT_LE(dscore, 1e-4);
    }
    // float32 sums in another order; ResNet-50's activations are in RGB units (up to ~1e3) through
    // 50 layers: 2e-4 of the scale, as the classifiers'.
    const double relative = feature_extractor.rfind("ssd_resnet", 0) == 0 ? 2e-4 : 1e-4;
    EXPECT_LE(de, relative * std::max(1.0, encodings_scale));
    EXPECT_LE(dc, 1e-4);
  }

  // OpenCV's own tf_text_graph_ssd.py (tests/third_party/opencv, run by Debian's python3-opencv)
  // reads the frozen graph as an OD API graph (image_tensor, the Preprocessor, the
  // BoxPredictor_i heads) and the pipeline.config; OpenCV then runs the graph with its own prior
  // boxes, decoding and NMS (its DetectionOutput): its best detections must be Orchard's. The
  // script's priors and sigmoid hold for square inputs with SIGMOID scores only.
  if (height == width && converter == "SIGMOID") {
    const std::string command = std::string("cd ") + OPENCV_SAMPLES_DIR +
                                " && /usr/bin/python3 tf_text_graph_ssd.py --input " + root.file("d.pb") +
                                " --output " + root.file("d.pbtxt") + " --config " + dir + "/pipeline.config > " +
                                root.file("script.log") + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << read_file(root.file("script.log"));
    cv::dnn::Net net = cv::dnn::readNetFromTensorflow(root.file("d.pb"), root.file("d.pbtxt"));
    const auto one = rgb.narrow(0, 0, 1).contiguous();
    std::vector<int> sizes(one.sizes().begin(), one.sizes().end());
    net.setInput(cv::Mat(4, sizes.data(), CV_32F, one.data_ptr<float>()));
    const cv::Mat out = net.forward();  // [1, 1, N, 7]: image, class, score, xmin, ymin, xmax, ymax
    const auto opencv = torch::from_blob(const_cast<float*>(out.ptr<float>()), {out.size[2], 7}, torch::kFloat).clone();
    const auto expected =
        detect::multiclass_nms(boxes[0], scores[0].narrow(1, 1, scores.size(2) - 1), ssd.config().nms);
    // OpenCV's top_k caps each class's candidates before its NMS, the OD API's
    // max_detections_per_class after: the best max_detections_per_class detections agree.
    const int64_t k = std::min(expected.scores.size(0), ssd.config().nms.max_detections_per_class);
    ASSERT_GE(opencv.size(0), k);
    for (int64_t i = 0; i < k; ++i) {
      SCOPED_TRACE("detection " + std::to_string(i));
      EXPECT_EQ(opencv[i][1].item<int64_t>(), expected.classes[i].item<int64_t>());
      EXPECT_NEAR(opencv[i][2].item<double>(), expected.scores[i].item<double>(), 1e-4);
      // OpenCV's corners (x, y) unclipped; Orchard's (y, x) clipped to the image.
      const auto corners = opencv[i].narrow(0, 3, 4).index({torch::tensor({1, 0, 3, 2})}).clamp(0, 1);
      EXPECT_LE((corners - expected.boxes[i]).abs().max().item<double>(), 1e-4);
    }
    std::cout << "tf_text_graph_ssd.py: OpenCV's best " << k << " detections are Orchard's\n";
  }

  // The decoded boxes are what predict feeds NMS: different codes must give different boxes.
  EXPECT_GT(
      (boxes - detect::decode_boxes(torch::zeros_like(out.narrow(2, 0, 4)), ssd.anchors(), ssd.config().loss.coder))
          .abs()
          .max()
          .item<double>(),
      1e-3);
}

INSTANTIATE_TEST_SUITE_P(Ssd, ExportOnnxDetect,
                         ::testing::Values(DetectExportCase{"SIGMOID", 96, 96}, DetectExportCase{"SOFTMAX", 128, 80},
                                           DetectExportCase{"SIGMOID", 96, 96, true},
                                           DetectExportCase{"SIGMOID", 112, 80, false, "ssd_mobilenet_v1"},
                                           // 128 / 8 .. 128 / 64: the FPN's 2x upsampling exact.
                                           DetectExportCase{"SIGMOID", 128, 128, false, "ssd_mobilenet_v1", true},
                                           DetectExportCase{"SIGMOID", 128, 128, false, "ssd_mobilenet_v2", true, true},
                                           // 80 / 32 = 3 upsampled to 80 / 16 = 5: the crop.
                                           DetectExportCase{"SOFTMAX", 96, 80, false, "ssd_mobilenet_v2", true, true},
                                           // RetinaNet: TF-Slim's ResNet-50 stage outputs.
                                           DetectExportCase{"SIGMOID", 128, 128, false, "ssd_resnet50_v1", true}),
                         [](const auto& info) {
                           return info.param.score_converter + "_" + std::to_string(info.param.height) + "x" +
                                  std::to_string(info.param.width) + (info.param.ssdlite ? "_ssdlite" : "") + "_" +
                                  info.param.feature_extractor + (info.param.fpn ? "_fpn" : "") +
                                  (info.param.lite ? "lite" : "");
                         });

// Quantization-aware training of the FPN-Lite layout (ssd_mobilenet_v2_fpnlite_quantized_*'s:
// separable FPN and bottom-up layers, the shared separable tower with a batch norm per map, focal
// loss) on the shapes set, quantized from step 150 of 300, and its uint8 TFLite run by Arm NN on
// the validation images: the AP50 of the integer kernels is the fake-quantized evaluation's.
TEST(ExportTfliteDetect, QuantizationAwareFpnLiteKeepsItsApAsUint8) {
  test::TempDir root;
  const std::string data = root.file("shapes"), dir = root.file("model"), stats = root.file("stats.json");
  auto r = cli::run(
      {"data", "shapes", "--task", "detection", "--out_dir", data, "--num_train", "200", "--num_validation", "100"},
      root);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string text = read_file(data + "/pipeline.config");
  auto edits = fpn_edits(DetectExportCase{"SIGMOID", 96, 96, false, "ssd_mobilenet_v2", true, true});
  edits.push_back({"        share_prediction_tower: true\n",
                   "        share_prediction_tower: true\n        class_prediction_bias_init: -4.6\n"});
  edits.push_back({"weighted_sigmoid {\n        }",
                   "weighted_sigmoid_focal {\n          alpha: 0.25\n          gamma: 2.0\n        }"});
  edits.push_back(
      {"      hard_example_miner {\n        num_hard_examples: 3000\n        iou_threshold: 0.99\n"
       "        loss_type: CLASSIFICATION\n        max_negatives_per_positive: 3\n"
       "        min_negatives_per_image: 3\n      }\n",
       ""});
  edits.push_back({"train_config {\n", "graph_rewriter {\n  quantization {\n    delay: 150\n  }\n}\ntrain_config {\n"});
  for (const auto& [from, to] : edits) {
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  }
  atomic_write_file(root.file("fpnlite.config"), text);
  r = cli::run({"detect", "train", "--pipeline_config_path", root.file("fpnlite.config"), "--model_dir", dir,
                "--num_train_steps", "300", "--log_steps", "100", "--seed", "1", "--stats_file", stats,
                "--num_preprocess_threads", "1"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("graph_rewriter: quantization-aware training"), std::string::npos) << r.err;
  const double qat_ap50 =
      nlohmann::json::parse(read_file(stats)).at("eval_DetectionBoxes_Precision/mAP@.50IOU").get<double>();

  // The ranges are in the TensorFlow checkpoint under contrib.quantize's names: the FPN's
  // projections and sums, each map's run of the shared tower and heads (its depthwise conv too).
  r = cli::run({"checkpoint", "inspect", dir + "/export/300/model.ckpt"}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* name :
       {"FeatureExtractor/MobilenetV2/fpn/projection_1/weights_quant/min",
        "FeatureExtractor/MobilenetV2/fpn/top_down_1/add_quant/max/biased",
        "FeatureExtractor/MobilenetV2/fpn/smoothing_1/depthwise/act_quant/max",
        "FeatureExtractor/MobilenetV2/fpn/smoothing_1/act_quant/min/local_step",
        "FeatureExtractor/MobilenetV2/fpn/bottom_up_Conv2d_20/weights_quant/max",
        "WeightSharedConvolutionalBoxPredictor/PredictionTower/conv2d_1/act_quant/max",
        "WeightSharedConvolutionalBoxPredictor_3/PredictionTower/conv2d_0/depthwise/weights_quant/min",
        "WeightSharedConvolutionalBoxPredictor_2/ClassPredictor/act_quant/min"})
    EXPECT_NE(r.out.find(std::string(name) + " "), std::string::npos) << name;

  const std::string tflite = root.file("q.tflite");
  r = cli::run({"detect", "export", "--model_dir", dir, "--format", "tflite", "--out", tflite, "--use_regular_nms",
                "true", "--max_detections", "100"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("uint8 TFLite"), std::string::npos) << r.err;
  const double uint8_ap50 =
      test::tflite_detection_ap50(tflite, data + "/validation-00000-of-00001", 96, 3, root.path().string());
  std::cout << "FPN-Lite AP50: quantization-aware (fake quantization) " << qat_ap50 << ", uint8 TFLite in Arm NN "
            << uint8_ap50 << "\n";
  EXPECT_GE(qat_ap50, 0.2);  // it learned
  EXPECT_NEAR(uint8_ap50, qat_ap50, 0.03);
}

TEST(ExportOnnxErrors, FormatAndArchitecture) {
  test::TempDir root;
  const std::string dir = root.file("model");
  write_model_dir(dir, "classify", "resnet_tiny", 32);
  auto r = cli::run({"classify", "export", "--model_dir", dir, "--out", root.file("m.pt"), "--format", "pt"}, root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--format must be onnx, frozen_graph, saved_model, tfhub, tflite or tf"), std::string::npos)
      << r.err;
  r = cli::run({"classify", "export", "--model_dir", root.file("missing"), "--out", root.file("m.onnx")}, root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
  r = cli::run({"detect", "export", "--model_dir", dir, "--format", "onnx"}, root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--format onnx needs --out"), std::string::npos) << r.err;
  r = cli::run({"detect", "export", "--model_dir", dir, "--format", "pt", "--out", root.file("d.pt")}, root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--format must be dir, onnx, frozen_graph, tflite or tf"), std::string::npos) << r.err;
}

// Feature extractors the ONNX graph writer does not know are refused by name, never written as
// another network (MnasFPN runs on a MobileNetV2 base: it must not pass for plain SSD).
TEST(ExportOnnxErrors, UnsupportedFeatureExtractorsAreRefused) {
  test::TempDir root;
  for (const std::string type : {"mnasfpn", "ssd_inception_v2", "ssd_mobiledet_cpu", "ssd_mobilenet_edgetpu"}) {
    detect::SsdModelOptions o;
    if (type == "mnasfpn") {
      o.mnasfpn = true;
      o.fpn.min_level = 3;
      o.fpn.max_level = 6;
      o.anchors_per_location = {9, 9, 9, 9};
    } else {
      o.feature_extractor = type;
    }
    detect::SsdModel model(o);
    exporting::DetectionOnnxOptions eo;
    eo.height = eo.width = 128;
    try {
      exporting::export_detection_onnx(*model, torch::zeros({10, 4}), eo, root.file(type + ".onnx"));
      ADD_FAILURE() << type << ": exported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not implemented yet"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(root.file(type + ".onnx")));
  }
}

}  // namespace
}  // namespace orchard
