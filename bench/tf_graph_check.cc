// Function, not only structure: does a network built in libtorch from a TensorFlow checkpoint,
// read by Orchard's reader and converted by Orchard's name-map machinery (the path
// fine_tune_checkpoint and import-weights take), compute what TensorFlow's own frozen graph of
// the same checkpoint computes? OpenCV's DNN module runs the frozen graph.
//
// The pair checked is TensorFlow's speech_commands "conv" model (tensorflow/examples/
// speech_commands models.py, create_conv_model): the only real checkpoint + frozen graph pair
// small enough to obtain here (the OD API zoo's are 67 + 70 MB). It has convolutions with
// even kernels under TF 'SAME' padding (asymmetric), a 'SAME' max-pool, a dense layer over
// an NHWC flatten: the layouts TensorFlow's convolution and dense kernels take.
//
//   tf_graph_check --checkpoint DIR_OR_PREFIX --graph freeze_conv.pb
//
// Prints the largest difference of the logits and exits 1 if it exceeds 1e-4 (relative to the
// logits' scale where that is larger). Run by bench/tf_graph_check.sh; docs/import.md records
// the result.
#include <CLI/CLI.hpp>
#include <opencv2/dnn.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "orchard/core/tf_checkpoint.h"
#include "orchard/models/tf_weights.h"

namespace F = torch::nn::functional;

namespace {

// --- The frozen graph, cut to the nodes an output needs (GraphDef, wire format) ---

uint64_t varint(const std::string& b, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
    const auto c = static_cast<uint8_t>(b[i++]);
    v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) return v;
  }
  throw std::runtime_error("GraphDef: a truncated varint");
}

struct Field {
  int number, wire;
  size_t begin, end;    // the whole field's bytes
  std::string payload;  // length-delimited fields
};

std::vector<Field> fields(const std::string& b) {
  std::vector<Field> out;
  for (size_t i = 0; i < b.size();) {
    Field f;
    f.begin = i;
    const uint64_t key = varint(b, i);
    f.number = static_cast<int>(key >> 3), f.wire = static_cast<int>(key & 7);
    if (f.wire == 0) varint(b, i);
    else if (f.wire == 1) i += 8;
    else if (f.wire == 5) i += 4;
    else if (f.wire == 2) {
      const uint64_t n = varint(b, i);
      if (n > b.size() - i) throw std::runtime_error("GraphDef: a field runs past the end");
      f.payload = b.substr(i, n);
      i += n;
    } else throw std::runtime_error("GraphDef: wire type " + std::to_string(f.wire));
    f.end = i;
    out.push_back(std::move(f));
  }
  return out;
}

std::string length_delimited(int number, const std::string& payload) {
  std::string out(1, static_cast<char>(number << 3 | 2));
  for (uint64_t n = payload.size();; n >>= 7) {
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  return out + payload;
}

// GraphDef {node = 1: NodeDef {name = 1, op = 2, input = 3, attr = 5}}: keeps the nodes
// `output` depends on (TensorFlow's extract_sub_graph), so OpenCV never sees the
// training-only nodes, and makes node `input` a float Placeholder (the network's input from
// there on).
std::string sub_graph(const std::string& graph, const std::string& output, const std::string& input) {
  std::map<std::string, std::vector<std::string>> inputs;
  const auto top = fields(graph);
  for (const auto& f : top) {
    if (f.number != 1) continue;
    std::string name;
    std::vector<std::string> in;
    for (const auto& g : fields(f.payload)) {
      if (g.number == 1) name = g.payload;
      if (g.number == 3) {
        std::string s = g.payload;
        if (!s.empty() && s[0] == '^') s = s.substr(1);
        in.push_back(s.substr(0, s.find(':')));
      }
    }
    inputs[name] = name == input ? std::vector<std::string>{} : in;
  }
  std::set<std::string> keep;
  std::vector<std::string> todo{output};
  while (!todo.empty()) {
    const std::string n = todo.back();
    todo.pop_back();
    if (!keep.insert(n).second) continue;
    for (const auto& i : inputs[n]) todo.push_back(i);
  }
  std::string out;
  for (const auto& f : top) {
    if (f.number == 1) {
      std::string name;
      for (const auto& g : fields(f.payload))
        if (g.number == 1) name = g.payload;
      if (!keep.count(name)) continue;
      if (name == input) {  // attr {key: "dtype" value {type: DT_FLOAT}}
        const std::string dtype = length_delimited(1, "dtype") + length_delimited(2, std::string("\x30\x01", 2));
        out += length_delimited(
            1, length_delimited(1, name) + length_delimited(2, "Placeholder") + length_delimited(5, dtype));
        continue;
      }
    }
    out += graph.substr(f.begin, f.end - f.begin);
  }
  return out;
}

// --- The network, as models.py's create_conv_model builds it (inference: no dropout) ---

// TF 'SAME' padding of a stride-1 convolution: the odd pixel at the bottom/right.
torch::Tensor pad_same(const torch::Tensor& x, int64_t kh, int64_t kw) {
  return F::pad(x, F::PadFuncOptions({(kw - 1) / 2, kw / 2, (kh - 1) / 2, kh / 2}));
}

struct SpeechConvImpl : torch::nn::Module {
  torch::nn::Conv2d first{torch::nn::Conv2dOptions(1, 64, {20, 8})};
  torch::nn::Conv2d second{torch::nn::Conv2dOptions(64, 64, {10, 4})};
  torch::nn::Linear final_fc{62720, 12};
  SpeechConvImpl() {
    register_module("first", first);
    register_module("second", second);
    register_module("final_fc", final_fc);
  }
  // `fingerprint`: [batch, 98 * 40] (time x MFCC bins), as the graph's fingerprint_input.
  torch::Tensor forward(const torch::Tensor& fingerprint) {
    auto x = fingerprint.view({-1, 1, 98, 40});  // NHWC [b, 98, 40, 1] == NCHW [b, 1, 98, 40]
    x = torch::relu(first->forward(pad_same(x, 20, 8)));
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2).stride(2));  // 'SAME' on even sizes: no padding
    x = torch::relu(second->forward(pad_same(x, 10, 4)));
    return final_fc->forward(x.permute({0, 2, 3, 1}).flatten(1));  // TF flattens NHWC
  }
};
TORCH_MODULE(SpeechConv);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A TensorFlow checkpoint converted by Orchard vs its frozen graph in OpenCV"};
  std::string checkpoint, graph_path;
  int batch = 8;
  app.add_option("--checkpoint", checkpoint, "the speech_commands conv checkpoint (directory or prefix)")->required();
  app.add_option("--graph", graph_path, "its frozen GraphDef (freeze.py's output)")->required();
  app.add_option("--batch", batch, "inputs to compare");
  CLI11_PARSE(app, argc, argv);
  try {
    using orchard::models::TfLayout;
    using orchard::models::TfName;
    SpeechConv model;
    const std::map<std::string, TfName> names{
        {"first.weight", {"first_weights", TfLayout::kConv}},        {"first.bias", {"first_bias"}},
        {"second.weight", {"second_weights", TfLayout::kConv}},      {"second.bias", {"second_bias"}},
        {"final_fc.weight", {"final_fc_weights", TfLayout::kDense}}, {"final_fc.bias", {"final_fc_bias"}}};
    const auto r = orchard::models::restore_tf_checkpoint(checkpoint, *model, [&](const std::string& n) {
      auto it = names.find(n);
      return it == names.end() ? std::optional<TfName>() : std::optional<TfName>(it->second);
    });
    std::printf("restored %zu variables from %s (left: %zu)\n", r.restored.size(), checkpoint.c_str(), r.unused.size());

    std::ifstream in(graph_path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + graph_path);
    std::stringstream ss;
    ss << in.rdbuf();
    // The graph from its Reshape on: OpenCV mistakes the 2-D placeholder's reshape to NHWC.
    const std::string graph = sub_graph(ss.str(), "add_2", "Reshape");
    cv::dnn::Net net = cv::dnn::readNetFromTensorflow(graph.data(), graph.size());

    torch::manual_seed(0);
    const auto x = torch::randn({batch, 3920}) * 10;  // MFCC-like magnitudes
    torch::NoGradGuard no_grad;
    model->eval();
    const auto ours = model->forward(x).contiguous();
    // The Reshape's output, NHWC [b, 98, 40, 1], given to OpenCV as NCHW [b, 1, 98, 40]: the
    // same values in the same order (one channel).
    const int dims[] = {batch, 1, 98, 40};
    cv::Mat blob(4, dims, CV_32F, x.data_ptr<float>());
    net.setInput(blob);
    cv::Mat out = net.forward();  // the last layer (OpenCV fuses MatMul + add_2)
    if (out.total() != static_cast<size_t>(ours.numel()))
      throw std::runtime_error("OpenCV gave " + std::to_string(out.total()) + " values, Orchard " +
                               std::to_string(ours.numel()));
    const auto theirs = torch::from_blob(out.ptr<float>(), ours.sizes(), torch::kFloat).clone();
    const double diff = (ours - theirs).abs().max().item<double>();
    const double scale = ours.abs().max().item<double>();
    const bool same_class = torch::equal(ours.argmax(1), theirs.argmax(1));
    std::printf(
        "logits up to %.4g; max |OpenCV(frozen graph) - Orchard(checkpoint)| = %.3g; same top class for all %d: %s\n",
        scale, diff, batch, same_class ? "yes" : "no");
    const bool ok = diff <= 1e-4 * std::max(1.0, scale) && same_class;
    std::printf("%s\n", ok ? "MATCH (within 1e-4)" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf_graph_check: %s\n", e.what());
    return 2;
  }
}
