// `orchard classify|multilabel export --format tflite`: Arm NN's TfLite parser and reference
// backend (Debian's python3-pyarmnn; tests/cli/armnn_tflite.py), a TFLite implementation that
// shares no code with Orchard, runs each exported file and must reproduce Orchard's outputs.
// The SSD's TFLite export is checked beside its other exports (export_cli_test.cc).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/export_models.h"
#include "core/test_util.h"
#include "orchard/core/files.h"
#include "orchard/models/image_model.h"

namespace orchard {
namespace test {

std::vector<at::Tensor> run_tflite_in_armnn(const std::string& tflite, const at::Tensor& input, const std::string& work,
                                            int64_t runs) {
  const auto x = input.contiguous();
  atomic_write_file(work + "/input.bin",
                    std::string(static_cast<const char*>(x.data_ptr()), static_cast<size_t>(x.nbytes())));
  const std::string command = "/usr/bin/python3 " + std::string(ARMNN_TFLITE_SCRIPT) + " " + tflite + " " + work +
                              "/input.bin " + work + " > " + work + "/armnn.log 2>&1";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "Arm NN could not run " << tflite << ":\n" << read_file(work + "/armnn.log");
    return {};
  }
  std::vector<at::Tensor> outputs;
  const auto listing = nlohmann::json::parse(read_file(work + "/outputs.json"));
  for (size_t i = 0; i < listing.size(); ++i) {
    const std::string bytes = read_file(work + "/" + std::to_string(i) + ".bin");
    const auto shape = listing[i]["shape"].get<std::vector<int64_t>>();
    auto value = torch::from_blob(const_cast<char*>(bytes.data()), shape, torch::kFloat).clone();
    outputs.push_back(runs == 1 ? value.squeeze(0) : value);
  }
  return outputs;
}

}  // namespace test
namespace {

struct TfliteCase {
  std::string task, arch;
  int size;
};

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return a.sizes() == b.sizes() ? (a - b).abs().max().item<double>() : 1e9;
}

class ExportTflite : public ::testing::TestWithParam<TfliteCase> {};

TEST_P(ExportTflite, ArmNnReproducesLogitsProbsAndFeatures) {
  const auto& [task, arch, size] = GetParam();
  test::TempDir root;
  const std::string dir = root.file("model");
  auto module = test::write_model_dir(dir, task, arch, size);
  auto& model = dynamic_cast<models::ImageModelImpl&>(*module);
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--out", root.file("m.tflite")},
                                             {"--out", root.file("f.tflite"), "--feature_vector"},
                                             {"--out", root.file("p.tflite"), "--include_preprocessing"}}) {
    std::vector<std::string> command = {task, "export", "--model_dir", dir, "--format", "tflite"};
    command.insert(command.end(), args.begin(), args.end());
    auto r = cli::run(command, root);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  const std::string magic = read_file(root.file("m.tflite")).substr(4, 4);
  EXPECT_EQ(magic, "TFL3");  // the schema's file_identifier

  torch::manual_seed(5);
  const auto x = torch::randn({1, 3, size, size}) * test::input_scale(arch);
  const auto nhwc = [](const torch::Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); };
  torch::NoGradGuard no_grad;
  const auto logits = model.forward(x), features = model.features(x);
  const auto probs = task == "classify" ? torch::softmax(logits, 1) : torch::sigmoid(logits);
  // Float32 arithmetic in another order: within 2e-4 of the output's scale (measured: up to 1.1e-4
  // for Inception-v3's features, whose values reach 24; 3e-5 for the others).
  const auto tol = [](const torch::Tensor& t) { return 2e-4 * std::max(1.0, t.abs().max().item<double>()); };

  const auto m = test::run_tflite_in_armnn(root.file("m.tflite"), nhwc(x), root.path());
  ASSERT_EQ(m.size(), 2u);  // logits, probs
  const auto f = test::run_tflite_in_armnn(root.file("f.tflite"), nhwc(x), root.path());
  ASSERT_EQ(f.size(), 1u);
  const double dl = max_diff(m[0], logits), dp = max_diff(m[1], probs), df = max_diff(f[0], features);

  const auto rgb = torch::randint(0, 256, {1, 3, size, size}).to(torch::kFloat);
  const auto scaled = test::scale_rgb(arch, rgb);
  const auto expected = model.forward(scaled);
  const auto p = test::run_tflite_in_armnn(root.file("p.tflite"), nhwc(rgb), root.path());
  ASSERT_EQ(p.size(), 2u);
  const double dpre = max_diff(p[0], expected);
  std::cout << arch << ": max |Arm NN (TFLite) - Orchard| logits " << dl << " (up to "
            << logits.abs().max().item<double>() << "), probs " << dp << ", features " << df
            << ", logits with preprocessing " << dpre << "\n";
  EXPECT_LE(dl, tol(logits));
  EXPECT_LE(dp, tol(logits));
  EXPECT_LE(df, tol(features));
  EXPECT_LE(dpre, tol(expected));
}

// A multi-label ResNet (torch's stem padding: explicit PAD ops, the max pool, residual ADDs with
// fused ReLUs, LOGISTIC), Inception-v3 (torchvision's count_include_pad pools as depthwise
// convolutions, concatenations), TF-Slim's Inception-v3 ('SAME' average pools) and MobileNetV2
// (depthwise convolutions, fused ReLU6). Arm NN's reference backend is slow (resnet50 at 64x64
// and the Model Garden's ResNet-50, which passed with 6.8e-5 and 6.1e-5 on the logits, took 25 s
// each): these four take ~50 s.
INSTANTIATE_TEST_SUITE_P(ImageModels, ExportTflite,
                         ::testing::Values(TfliteCase{"multilabel", "resnet_tiny", 32},
                                           TfliteCase{"classify", "inception_v3", 75},
                                           TfliteCase{"classify", "inception_v3_slim", 75},
                                           TfliteCase{"classify", "mobilenet_v2_slim", 64}),
                         [](const auto& info) { return info.param.task + "_" + info.param.arch; });

}  // namespace
}  // namespace orchard
