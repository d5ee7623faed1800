// `orchard import-weights` against torchvision itself: Debian's python3-torchvision builds each
// architecture with random weights and batch-norm statistics and saves its state dict as users
// have it (tests/models/make_torchvision_state_dict.py); the imported checkpoint must give
// torchvision's logits for the same input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/test_util.h"
#include "orchard/core/files.h"
#include "orchard/models/registry.h"
#include "orchard/train/checkpoint.h"

namespace orchard {
namespace {

constexpr double kTorchvisionStd[3] = {0.229, 0.224, 0.225};

// Writes arch's reference into dir: state_dict.pt, input.f32, logits.f32.
void make_reference(const std::string& arch, const std::string& dir, int size) {
  const std::string script = std::string(ORCHARD_TEST_FIXTURES) + "/../models/make_torchvision_state_dict.py";
  const std::string cmd = "/usr/bin/python3 " + script + " " + arch + " " + dir + " " + std::to_string(size);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (needs Debian's python3-torchvision: scripts/setup.sh)";
}

torch::Tensor read_f32(const std::string& path, std::vector<int64_t> shape) {
  const std::string bytes = test::read_bytes(path);
  auto t = torch::empty(shape, torch::kFloat);
  EXPECT_EQ(bytes.size(), static_cast<size_t>(t.numel()) * 4) << path;
  std::memcpy(t.data_ptr<float>(), bytes.data(), std::min(bytes.size(), static_cast<size_t>(t.numel()) * 4));
  return t;
}

// The imported model_dir's logits for x.
torch::Tensor imported_logits(const std::string& arch, const std::string& model_dir, const torch::Tensor& x) {
  models::ModelConfig c;
  c.arch = arch;
  c.num_classes = 10;
  auto model = models::build_model(c);
  train::RestoreOptions ro;
  ro.load_optimizer = false;
  ro.load_rng = false;
  ro.expect = {{"task", "classify"}, {"model", arch}, {"num_classes", "10"}};
  train::restore_checkpoint(train::CheckpointManager(model_dir).latest(), *model, nullptr, ro);
  model->eval();
  torch::NoGradGuard no_grad;
  return model->forward(x);
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

class ImportWeights : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(ImportWeights, ReproducesTorchvisionLogits) {
  const auto [arch, size] = GetParam();
  test::TempDir root;
  const std::string ref = root.file("ref"), out = root.file("model");
  make_reference(arch, ref, size);
  auto r = cli::run({"import-weights", "--arch", arch, "--state_dict", ref + "/state_dict.pt", "--out_dir", out}, root);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto config = nlohmann::json::parse(read_file(out + "/config.json"));
  EXPECT_EQ(config.at("task"), "classify");
  EXPECT_EQ(config.at("model"), arch);
  EXPECT_EQ(config.at("num_classes"), 10);  // from fc.weight / classifier.1.weight

  const auto x = read_f32(ref + "/input.f32", {2, 3, size, size});
  const auto expected = read_f32(ref + "/logits.f32", {2, 10});
  if (arch == "inception_v3") {
    // Its weights take [-1, 1], which is what Orchard feeds; AuxLogits.* is left out.
    EXPECT_NE(r.err.find("AuxLogits"), std::string::npos) << r.err;
    EXPECT_LE(max_diff(imported_logits(arch, out, x), expected), 1e-4);
    return;
  }
  // ResNets, MobileNetV2: torchvision's (x / 255 - mean) / std is folded into the first
  // convolution (conv1, features.0.0), so Orchard's input
  // (RGB minus the means, 0-255 scale) x * 255 * std gives torchvision's logits of x.
  const auto scale =
      torch::tensor({255 * kTorchvisionStd[0], 255 * kTorchvisionStd[1], 255 * kTorchvisionStd[2]}, torch::kFloat)
          .view({1, 3, 1, 1});
  // The folding rounds differently (x * s, then w / s): 1e-4 relative to the largest logit.
  const double folded_tol = 1e-4 * std::max(1.0, expected.abs().max().item<double>());
  EXPECT_LE(max_diff(imported_logits(arch, out, x * scale), expected), folded_tol);
  // Without the folding the weights are torchvision's own: 1e-4 absolute.
  const std::string raw = root.file("raw");
  r = cli::run({"import-weights", "--arch", arch, "--state_dict", ref + "/state_dict.pt", "--out_dir", raw,
                "--input_normalization", "none"},
               root);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_LE(max_diff(imported_logits(arch, raw, x), expected), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Torchvision, ImportWeights,
                         ::testing::Values(std::make_pair(std::string("resnet18"), 64),
                                           std::make_pair(std::string("resnet50"), 64),
                                           std::make_pair(std::string("mobilenet_v2"), 64),
                                           std::make_pair(std::string("inception_v3"), 75)),
                         [](const auto& info) { return info.param.first; });

TEST(ImportWeightsErrors, WrongArchitectureNonZipAndUsedDirectory) {
  test::TempDir root;
  const std::string ref = root.file("ref");
  make_reference("resnet18", ref, 32);
  // resnet34 has blocks resnet18 lacks: the missing keys are listed.
  auto r = cli::run(
      {"import-weights", "--arch", "resnet34", "--state_dict", ref + "/state_dict.pt", "--out_dir", root.file("m34")},
      root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("missing keys"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("layer1.2.conv1.weight"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(root.file("m34") + "/config.json"));
  // A wrong class count is a shape mismatch naming fc.weight.
  r = cli::run({"import-weights", "--arch", "resnet18", "--state_dict", ref + "/state_dict.pt", "--out_dir",
                root.file("m5"), "--num_classes", "5"},
               root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("shape mismatches: fc.weight"), std::string::npos) << r.err;
  // Not a torch.save archive.
  test::write_bytes(root.file("bad.pt"), "not a zip");
  r = cli::run(
      {"import-weights", "--arch", "resnet18", "--state_dict", root.file("bad.pt"), "--out_dir", root.file("mbad")},
      root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("not a torch.save zip archive"), std::string::npos) << r.err;
  // An unknown architecture lists the registered ones.
  r = cli::run(
      {"import-weights", "--arch", "vgg16", "--state_dict", ref + "/state_dict.pt", "--out_dir", root.file("mvgg")},
      root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("inception_v3"), std::string::npos) << r.err;
  // Importing twice into one model_dir is refused (no checkpoint is overwritten).
  ASSERT_EQ(cli::run({"import-weights", "--arch", "resnet18", "--state_dict", ref + "/state_dict.pt", "--out_dir",
                      root.file("m")},
                     root)
                .rc,
            0);
  r = cli::run(
      {"import-weights", "--arch", "resnet18", "--state_dict", ref + "/state_dict.pt", "--out_dir", root.file("m")},
      root);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("already holds checkpoints"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace orchard
