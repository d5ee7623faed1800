#include "orchard/models/resnet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/models/registry.h"

namespace orchard::models {
namespace {

// "64,3,7,7" ("scalar" for a 0-d tensor), the fixtures' shape format.
std::string shape_string(const at::Tensor& t) {
  if (t.dim() == 0) return "scalar";
  std::string s;
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s;
}

// (name, shape) lines of a fixture written by tests/models/make_torchvision_names.py.
std::vector<std::pair<std::string, std::string>> read_fixture(const std::string& file) {
  const std::string path = std::string(ORCHARD_TEST_FIXTURES) + "/" + file;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string name, shape;
    ss >> name >> shape;
    out.emplace_back(name, shape);
  }
  return out;
}

ResNet build(const std::string& arch, int64_t num_classes = 1000, bool zero_init_residual = false, int64_t width = 0) {
  ModelConfig c;
  c.arch = arch;
  c.num_classes = num_classes;
  c.zero_init_residual = zero_init_residual;
  c.width = width;
  return build_resnet(c);
}

bool is_buffer_name(const std::string& name) {
  for (const char* suffix : {".running_mean", ".running_var", ".num_batches_tracked"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

// Orchard's parameters + buffers must be torchvision's state_dict, name for name and shape
// for shape, so torchvision weights import by name.
void expect_matches_torchvision(const std::string& arch) {
  torch::manual_seed(0);
  auto model = build(arch);
  const auto expected = read_fixture("torchvision_" + arch + ".txt");
  ASSERT_GT(expected.size(), 100u);

  std::map<std::string, std::string> want(expected.begin(), expected.end());
  std::map<std::string, std::string> got;
  for (const auto& p : model->named_parameters()) got[p.key()] = shape_string(p.value());
  for (const auto& b : model->named_buffers()) got[b.key()] = shape_string(b.value());
  for (const auto& [name, shape] : want) {
    auto it = got.find(name);
    if (it == got.end())
      ADD_FAILURE() << arch << ": torchvision has " << name << " [" << shape << "], Orchard does not";
    else EXPECT_EQ(it->second, shape) << arch << ": " << name;
  }
  for (const auto& [name, shape] : got)
    if (!want.count(name))
      ADD_FAILURE() << arch << ": Orchard has " << name << " [" << shape << "], torchvision does not";

  // Parameters come in torchvision's order too (state_dict order restricted to parameters).
  std::vector<std::string> want_params, got_params;
  for (const auto& [name, shape] : expected)
    if (!is_buffer_name(name)) want_params.push_back(name);
  for (const auto& p : model->named_parameters()) got_params.push_back(p.key());
  EXPECT_EQ(got_params, want_params) << arch;
}

TEST(ResNet, Resnet18NamesAndShapesMatchTorchvision) { expect_matches_torchvision("resnet18"); }
TEST(ResNet, Resnet50NamesAndShapesMatchTorchvision) { expect_matches_torchvision("resnet50"); }

// Every depth's block type and blocks per stage are torchvision's; the parameter count is
// checked where building is cheap (resnet101/152 differ from resnet50 only in the table).
TEST(ResNet, ConfigurationsMatchTorchvision) {
  std::ifstream in(std::string(ORCHARD_TEST_FIXTURES) + "/torchvision_resnet_configs.txt");
  ASSERT_TRUE(in.good());
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string arch, block, layers;
    int64_t count = 0;
    ss >> arch >> block >> layers >> count;
    for (const std::string& name : {arch, arch + "_small"}) {
      ModelConfig c;
      c.arch = name;
      const auto o = resnet_options(c);
      EXPECT_EQ(o.block, block) << name;
      std::string got;
      for (size_t i = 0; i < o.layers.size(); ++i) got += (i ? "," : "") + std::to_string(o.layers[i]);
      EXPECT_EQ(got, layers) << name;
      EXPECT_EQ(o.base_width, 64) << name;
      EXPECT_EQ(o.num_classes, 1000) << name;
      EXPECT_EQ(o.small_input, name != arch) << name;
    }
    if (arch == "resnet18" || arch == "resnet34" || arch == "resnet50") {
      auto model = build(arch);
      int64_t n = 0;
      for (const auto& p : model->parameters()) n += p.numel();
      EXPECT_EQ(n, count) << arch;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

TEST(ResNet, RegistryNames) {
  const auto names = model_names();
  for (const char* n : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet18_small",
                        "resnet50_small", "resnet152_small", "resnet_tiny"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

TEST(ResNet, UnknownModelListsRegisteredNames) {
  ModelConfig c;
  c.arch = "resnet51";
  try {
    build_model(c);
    FAIL() << "no error for an unknown model";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("resnet51"), std::string::npos) << msg;
    for (const auto& n : model_names()) EXPECT_NE(msg.find(n), std::string::npos) << n << " not in: " << msg;
  }
  c.arch = "resnet18";
  c.num_classes = 0;
  EXPECT_THROW(build_model(c), Error);
}

TEST(ResNet, SmallVariantAt28Pixels) {
  torch::manual_seed(0);
  for (const std::string arch : {"resnet18_small", "resnet50_small", "resnet_tiny"}) {
    auto model = build(arch, 10, false, arch == "resnet_tiny" ? 0 : 16);
    model->eval();
    torch::NoGradGuard no_grad;
    auto x = torch::randn({2, 3, 28, 28});
    auto y = model->forward(x);
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 10})) << arch;
    EXPECT_TRUE(torch::isfinite(y).all().item<bool>()) << arch;
  }
  // The small stem is one 3x3 stride-1 conv; the ImageNet stem a 7x7 stride-2 conv.
  auto small = build("resnet18_small", 10, false, 16);
  auto big = build("resnet18", 10, false, 16);
  EXPECT_EQ(small->named_parameters()["conv1.weight"].sizes(), (std::vector<int64_t>{16, 3, 3, 3}));
  EXPECT_EQ(big->named_parameters()["conv1.weight"].sizes(), (std::vector<int64_t>{16, 3, 7, 7}));
  // Both pool 8 x width features, whatever the input size.
  small->eval();
  big->eval();
  torch::NoGradGuard no_grad;
  auto x = torch::randn({1, 3, 28, 28});
  EXPECT_EQ(small->features(x).sizes(), (std::vector<int64_t>{1, 128}));
  EXPECT_EQ(big->features(x).sizes(), (std::vector<int64_t>{1, 128}));
}

TEST(ResNet, ZeroInitResidualZeroesEachBlocksLastBn) {
  for (const std::string arch : {"resnet18", "resnet50"}) {
    const std::string last = arch == "resnet18" ? "bn2" : "bn3";
    for (bool zero : {false, true}) {
      auto model = build(arch, 10, zero, /*width=*/16);  // the structure of the full width, 1/16 the weights
      int last_bns = 0;
      for (const auto& p : model->named_parameters()) {
        const std::string& name = p.key();
        const bool is_bn_weight =
            name.find("bn") != std::string::npos && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
        const bool is_downsample_bn = name.find("downsample.1.weight") != std::string::npos;
        if (!is_bn_weight && !is_downsample_bn) continue;
        const bool block_last = name.rfind("layer", 0) == 0 && name.find("." + last + ".weight") != std::string::npos;
        if (block_last) ++last_bns;
        const double want = zero && block_last ? 0.0 : 1.0;
        EXPECT_TRUE(torch::all(p.value() == want).item<bool>()) << arch << " " << name << " zero=" << zero;
      }
      EXPECT_EQ(last_bns, arch == "resnet18" ? 8 : 16) << arch;
      for (const auto& p : model->named_parameters())
        if (p.key().find("bn") != std::string::npos && p.key().find(".bias") != std::string::npos) {
          EXPECT_TRUE(torch::all(p.value() == 0).item<bool>()) << p.key();
        }
    }
  }
}

TEST(ResNet, ConvInitIsTruncatedHeNormalFanIn) {
  torch::manual_seed(1);
  auto model = build("resnet18");
  int convs = 0;
  for (const auto& p : model->named_parameters()) {
    const auto& w = p.value();
    if (w.dim() != 4) continue;
    ++convs;
    const double fan_in = static_cast<double>(w.size(1) * w.size(2) * w.size(3));
    const double want = std::sqrt(2.0 / fan_in);  // Keras he_normal: the truncated sample's stddev
    const double std = w.std().item<double>();
    EXPECT_NEAR(std / want, 1.0, 0.10) << p.key() << " fan_in " << fan_in;
    EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.1 * want) << p.key();
    // Truncated at two stddevs of the underlying normal (want / 0.8796): no value beyond.
    EXPECT_LE(w.abs().max().item<double>(), 2.0 * want / 0.87962566 * (1 + 1e-6)) << p.key();
  }
  EXPECT_EQ(convs, 20);  // 17 3x3/7x7 convs + 3 downsample 1x1 convs

  auto fc_w = model->named_parameters()["fc.weight"];
  auto fc_b = model->named_parameters()["fc.bias"];
  EXPECT_NEAR(fc_w.std().item<double>(), 0.01, 0.001);
  EXPECT_NEAR(fc_w.mean().item<double>(), 0.0, 0.001);
  EXPECT_GT(fc_w.abs().max().item<double>(), 0.04);  // a plain (untruncated) normal: 4+ sigma values exist
  EXPECT_TRUE(torch::all(fc_b == 0).item<bool>());
  for (const auto& p : model->named_parameters()) EXPECT_TRUE(p.value().requires_grad()) << p.key();
}

TEST(ResNet, BatchNormMomentumAndEpsilon) {
  auto model = build("resnet_tiny", 10);
  int bns = 0;
  for (const auto& m : model->modules(/*include_self=*/false)) {
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      ++bns;
      ASSERT_TRUE(bn->options.momentum().has_value());
      EXPECT_DOUBLE_EQ(*bn->options.momentum(), 0.1);  // TF's 0.9 as torch's convention
      EXPECT_DOUBLE_EQ(bn->options.eps(), 1e-5);
    }
  }
  EXPECT_EQ(bns, 1 + 4 * 2 + 3);  // stem, two per block, downsample of layers 2-4
}

// TF-Slim's store_non_strided_activations: each stage's last unit computed at stride 1; taking
// every other pixel of it is the strided network, so the last stage's output averages to the
// classifier's features.
TEST(ResNet, SlimStageOutputsBeforeSubsamplingAreTheStridedNetwork) {
  ResNetOptions o;
  o.layout = ResNetLayout::kSlim;
  o.layers = {1, 2, 2, 1};
  o.base_width = 8;
  o.include_top = false;
  ResNet net(o);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3, 70, 50});
  const auto stages = net->slim_stage_outputs(x);
  ASSERT_EQ(stages.size(), 4u);
  // Stem: stride 4 -> 18 x 13; stages 1-3 keep their input size, stage 4 is at stride 32.
  EXPECT_EQ(stages[0].sizes().vec(), (std::vector<int64_t>{2, 32, 18, 13}));
  EXPECT_EQ(stages[1].sizes().vec(), (std::vector<int64_t>{2, 64, 9, 7}));
  EXPECT_EQ(stages[2].sizes().vec(), (std::vector<int64_t>{2, 128, 5, 4}));
  EXPECT_EQ(stages[3].sizes().vec(), (std::vector<int64_t>{2, 256, 3, 2}));
  EXPECT_TRUE(torch::allclose(stages[3].mean({2, 3}), net->features(x), 1e-4, 1e-5));
  EXPECT_EQ(net->slim_stage_outputs(x, 2).size(), 2u);
  EXPECT_THROW(net->forward(x), c10::Error);  // no classifier
}

}  // namespace
}  // namespace orchard::models
