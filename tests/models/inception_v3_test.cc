#include "orchard/models/inception_v3.h"

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
#include "orchard/layers/batch_norm.h"
#include "orchard/models/registry.h"

namespace orchard::models {
namespace {

using Sizes = std::vector<int64_t>;

constexpr int64_t kTorchvisionParameters = 27161264;  // inception_v3(aux_logits=True), num_classes 1000
constexpr int64_t kNumBatchNorms = 96;                // one per BasicConv2d, AuxLogits' 2 included

// "32,3,3,3" ("scalar" for a 0-d tensor), the fixtures' shape format.
std::string shape_string(const at::Tensor& t) {
  if (t.dim() == 0) return "scalar";
  std::string s;
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// tests/fixtures/torchvision_inception_v3.txt (tests/models/make_torchvision_inception_names.py):
// "name shape" lines in state_dict order, then "# key args... values" lines (see the script).
struct Fixture {
  std::vector<std::pair<std::string, std::string>> entries;
  std::map<std::string, int64_t> parameters;          // "# aux_logits A parameters N": A -> N
  std::map<std::string, std::vector<double>> values;  // "eval_logits 80 0", "train_aux 299", ...
};

const Fixture& fixture() {
  static const Fixture f = [] {
    const std::string path = std::string(ORCHARD_TEST_FIXTURES) + "/torchvision_inception_v3.txt";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    Fixture f;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::istringstream ss(line);
      if (line[0] != '#') {
        std::string name, shape;
        ss >> name >> shape;
        f.entries.emplace_back(name, shape);
        continue;
      }
      std::string hash, key;
      ss >> hash >> key;
      if (key == "aux_logits") {
        std::string aux, word;
        int64_t n = 0;
        ss >> aux >> word >> n;
        f.parameters[aux] = n;
        continue;
      }
      // The key with its integer arguments (size, transform_input), then the values.
      const int args = key == "eval_logits" ? 2 : key == "eval_features" || starts_with(key, "train_") ? 1 : -1;
      if (args < 0) continue;  // the header
      for (int i = 0; i < args; ++i) {
        std::string a;
        ss >> a;
        key += " " + a;
      }
      double v = 0;
      while (ss >> v) f.values[key].push_back(v);
    }
    return f;
  }();
  return f;
}

const std::vector<double>& reference(const std::string& key) {
  static const std::vector<double> none;
  auto it = fixture().values.find(key);
  EXPECT_NE(it, fixture().values.end()) << "fixture has no '" << key << "' line";
  return it == fixture().values.end() ? none : it->second;
}

int64_t count_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

std::map<std::string, std::string> state_shapes(torch::nn::Module& m) {
  std::map<std::string, std::string> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = shape_string(p.value());
  for (const auto& b : m.named_buffers()) out[b.key()] = shape_string(b.value());
  return out;
}

InceptionV3Options options(int64_t num_classes, bool aux_logits) {
  InceptionV3Options o;
  o.num_classes = num_classes;
  o.aux_logits = aux_logits;
  return o;
}

// The script's deterministic weights (see make_torchvision_inception_names.py), filled in the
// fixture's state_dict order; the model must have AuxLogits so the entry numbers agree.
void deterministic_fill(InceptionV3Impl& model) {
  auto params = model.named_parameters();
  auto buffers = model.named_buffers();
  torch::NoGradGuard no_grad;
  int filled = 0;
  const auto& entries = fixture().entries;
  for (size_t j = 0; j < entries.size(); ++j) {
    const std::string& name = entries[j].first;
    auto* t = params.find(name);
    if (!t) t = buffers.find(name);
    ASSERT_NE(t, nullptr) << name;
    if (t->dim() == 0) continue;  // num_batches_tracked
    const auto k = torch::arange(t->numel(), torch::kInt64);
    const auto base = torch::sin(torch::remainder(k * k, 65521).to(torch::kFloat64) * 0.731 + static_cast<double>(j))
                          .reshape(t->sizes());
    torch::Tensor v;
    if (ends_with(name, "running_var")) v = 1 + 0.5 * base * base;
    else if (ends_with(name, "running_mean")) v = 0.1 * base;
    else if (t->dim() == 1 && ends_with(name, "weight")) v = 1 + 0.1 * base;
    else if (ends_with(name, "bias")) v = 0.1 * base;
    else v = base * std::sqrt(6.0 / static_cast<double>(t->numel() / t->size(0)));
    t->copy_(v);
    ++filled;
  }
  EXPECT_EQ(filled, kNumBatchNorms * 5 + 2 * 2);  // conv + BN (gamma, beta, mean, var); 2 fc
}

torch::Tensor make_input(int64_t n, int64_t size, torch::Dtype dtype = torch::kFloat) {
  return torch::sin(torch::arange(n * 3 * size * size, torch::kFloat64) * 0.013).reshape({n, 3, size, size}).to(dtype);
}

torch::Tensor reference_tensor(const std::string& key, Sizes shape) {
  return torch::tensor(reference(key), torch::kFloat64).reshape(shape);
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(torch::allclose(got.to(torch::kFloat64), want, tol, tol))
      << what << "\ngot\n"
      << got << "\nwant\n"
      << want << "\nmax |diff| " << (got.to(torch::kFloat64) - want).abs().max().item<double>();
}

// ---------------------------------------------------------------------------------------
// Names, shapes, parameter counts

TEST(InceptionV3, NamesAndShapesMatchTorchvisionWithAux) {
  const auto& f = fixture();
  ASSERT_EQ(f.entries.size(), 580u);  // 96 BasicConv2d x (conv + 5 BN entries) + fc and AuxLogits.fc
  InceptionV3 model(options(1000, true));
  const std::map<std::string, std::string> want(f.entries.begin(), f.entries.end());
  const auto got = state_shapes(*model);
  for (const auto& [name, shape] : want) {
    auto it = got.find(name);
    if (it == got.end()) ADD_FAILURE() << "torchvision has " << name << " [" << shape << "], Orchard does not";
    else EXPECT_EQ(it->second, shape) << name;
  }
  for (const auto& [name, shape] : got)
    if (!want.count(name)) ADD_FAILURE() << "Orchard has " << name << " [" << shape << "], torchvision does not";

  // Parameters and buffers each in torchvision's order (its state_dict order restricted to them).
  const auto params = model->named_parameters();
  const auto buffers = model->named_buffers();
  std::vector<std::string> want_params, got_params, want_buffers, got_buffers;
  for (const auto& [name, shape] : f.entries) (params.contains(name) ? want_params : want_buffers).push_back(name);
  for (const auto& p : params) got_params.push_back(p.key());
  for (const auto& b : buffers) got_buffers.push_back(b.key());
  EXPECT_EQ(got_params, want_params);
  EXPECT_EQ(got_buffers, want_buffers);

  EXPECT_EQ(count_parameters(*model), kTorchvisionParameters);
  EXPECT_EQ(f.parameters.at("1"), kTorchvisionParameters);
}

TEST(InceptionV3, WithoutAuxHasTorchvisionsEntriesMinusAuxLogits) {
  const auto& f = fixture();
  InceptionV3 model(options(1000, false));
  std::map<std::string, std::string> want;
  for (const auto& [name, shape] : f.entries)
    if (!starts_with(name, "AuxLogits.")) want[name] = shape;
  EXPECT_EQ(want.size(), f.entries.size() - 2 * 6 - 2);  // 2 BasicConv2d (6 entries each), fc
  EXPECT_EQ(state_shapes(*model), want);
  EXPECT_EQ(count_parameters(*model), f.parameters.at("0"));
  EXPECT_EQ(f.parameters.at("0"), 23834568);
}

TEST(InceptionV3, FeatureModeHasNoClassifiers) {
  InceptionV3 model(options(0, false));
  for (const auto& p : model->named_parameters()) {
    EXPECT_FALSE(starts_with(p.key(), "fc.")) << p.key();
    EXPECT_FALSE(starts_with(p.key(), "AuxLogits.")) << p.key();
  }
  EXPECT_EQ(count_parameters(*model), 23834568 - 2048 * 1000 - 1000);
  EXPECT_THROW(InceptionV3(options(0, true)), c10::Error);  // the aux classifier needs classes
}

TEST(InceptionV3, TorchvisionInitDrawsConvolutionsWithStd01) {
  InceptionV3Options o = options(10, false);
  InceptionV3 he(o);
  o.torchvision_init = true;
  InceptionV3 tv(o);
  // Mixed_7c.branch3x3dbl_1: a 1x1 convolution over 2048 channels (448 x 2048 weights).
  const auto he_w = he->named_parameters()["Mixed_7c.branch3x3dbl_1.conv.weight"];
  const auto tv_w = tv->named_parameters()["Mixed_7c.branch3x3dbl_1.conv.weight"];
  EXPECT_NEAR(tv_w.std().item<double>(), 0.1, 0.002);
  EXPECT_NEAR(he_w.std().item<double>(), std::sqrt(2.0 / 2048), 0.001);
  EXPECT_NEAR(tv->named_parameters()["Conv2d_1a_3x3.conv.weight"].std().item<double>(), 0.1, 0.02);
  // Batch norms and the classifier are the same either way.
  EXPECT_TRUE(torch::equal(tv->named_parameters()["Mixed_7c.branch3x3dbl_1.bn.weight"], torch::ones({448})));
  EXPECT_NEAR(tv->named_parameters()["fc.weight"].std().item<double>(), 0.1, 0.005);
}

TEST(InceptionV3, BatchNormsUseEps0001AndTheConfiguredMomentum) {
  InceptionV3Options o = options(10, true);
  o.batch_norm_momentum = 0.0003;  // im2txt's decay 0.9997
  InceptionV3 model(o);
  int n = 0;
  for (const auto& m : model->modules(false)) {
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      EXPECT_DOUBLE_EQ(bn->options.eps(), 0.001);
      ASSERT_TRUE(bn->options.momentum().has_value());
      EXPECT_DOUBLE_EQ(*bn->options.momentum(), 0.0003);
      ++n;
    }
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      EXPECT_FALSE(c->bias.defined());
    }
  }
  EXPECT_EQ(n, kNumBatchNorms);
}

// ---------------------------------------------------------------------------------------
// Forward against torchvision with the script's deterministic weights

class InceptionV3Reference : public ::testing::Test {
 protected:
  static InceptionV3 build(bool transform_input = false) {
    InceptionV3Options o = options(10, true);
    o.transform_input = transform_input;
    InceptionV3 model(o);
    deterministic_fill(*model);
    model->eval();
    return model;
  }
};

TEST_F(InceptionV3Reference, EvalLogitsMatchTorchvisionNchwAndChannelsLast) {
  auto model = build();
  torch::NoGradGuard no_grad;
  // 80x80: Mixed_7* run on 1x1 maps; 139x139: on 3x3, so every tap of their 3x3s counts.
  for (int64_t size : {80, 139}) {
    const auto want = reference_tensor("eval_logits " + std::to_string(size) + " 0", {1, 10});
    const auto x = make_input(1, size);
    expect_close(model->forward(x), want, 1e-4, "NCHW " + std::to_string(size));
    expect_close(model->forward(x.contiguous(at::MemoryFormat::ChannelsLast)), want, 1e-4,
                 "channels_last " + std::to_string(size));
  }
}

TEST_F(InceptionV3Reference, TransformInputMatchesTorchvision) {
  auto model = build(/*transform_input=*/true);
  torch::NoGradGuard no_grad;
  expect_close(model->forward(make_input(1, 80)), reference_tensor("eval_logits 80 1", {1, 10}), 1e-4,
               "transform_input");
}

TEST_F(InceptionV3Reference, FeaturesArePooledMixed7cBeforeDropout) {
  auto model = build();
  torch::NoGradGuard no_grad;
  const auto x = make_input(1, 80);
  const auto features = model->features(x);
  ASSERT_EQ(features.sizes().vec(), (Sizes{1, 2048}));
  expect_close(features.slice(1, 0, 8), reference_tensor("eval_features 80", {1, 8}), 1e-4, "features");
  // The logits are fc applied to exactly these features (dropout is off in eval mode).
  auto fc = model->named_parameters();
  const auto logits = torch::addmm(fc["fc.bias"], features, fc["fc.weight"].t());
  EXPECT_TRUE(torch::allclose(logits, model->forward(x), 1e-5, 1e-5));
}

// Training mode at 299x299 (the smallest size the auxiliary classifier accepts), batch
// statistics, dropout 0: logits and auxiliary logits against torchvision's. In float64: batch
// norm over 2 samples of AuxLogits.conv1's 1x1 map is ill-conditioned (float32 differs from
// float64 by ~1e-3 in Python itself).
TEST_F(InceptionV3Reference, TrainingLogitsAndAuxMatchTorchvision) {
  InceptionV3Options o = options(10, true);
  o.dropout = 0;
  InceptionV3 model(o);
  deterministic_fill(*model);
  model->to(torch::kFloat64);
  model->train();
  torch::NoGradGuard no_grad;
  const auto out = model->forward_with_aux(make_input(2, 299, torch::kFloat64));
  ASSERT_TRUE(out.aux.defined());
  expect_close(out.logits, reference_tensor("train_logits 299", {2, 10}), 1e-6, "training logits");
  expect_close(out.aux, reference_tensor("train_aux 299", {2, 10}), 1e-6, "aux logits");
}

// ---------------------------------------------------------------------------------------
// Modes and shapes

TEST(InceptionV3, FeatureModeForwardReturnsPooledFeatures) {
  torch::manual_seed(0);
  InceptionV3 model(options(0, false));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3, 75, 75});
  const auto y = model->forward(x);
  EXPECT_EQ(y.sizes().vec(), (Sizes{2, 2048}));
  EXPECT_TRUE(torch::allclose(y, model->features(x)));  // no dropout in eval mode
  const auto with_aux = model->forward_with_aux(x);
  EXPECT_FALSE(with_aux.aux.defined());
  EXPECT_TRUE(torch::allclose(with_aux.logits, y));

  model->train();  // dropout 0.5 in training: about half the features zeroed, the rest doubled
  const auto dropped = model->forward(x);
  const auto f = model->features(x);
  EXPECT_EQ(dropped.sizes().vec(), (Sizes{2, 2048}));
  const auto kept = dropped != 0;
  const double kept_fraction =
      kept.to(torch::kFloat).mean().item<double>() / (f != 0).to(torch::kFloat).mean().item<double>();
  EXPECT_NEAR(kept_fraction, 0.5, 0.1);
}

// Also: every batch norm goes through layers::batch_norm, so --sync_bn's override covers them
// all (one 299x299 training forward serves both checks).
TEST(InceptionV3, AuxOnlyInTrainingAndEveryBatchNormThroughTheOverride) {
  torch::manual_seed(0);
  InceptionV3 model(options(7, true));
  model->train();
  const auto x = torch::randn({2, 3, 299, 299});
  int calls = 0;
  layers::set_batch_norm_override([&](torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& in) {
    ++calls;
    return bn.forward(in);
  });
  const auto out = model->forward_with_aux(x);
  layers::set_batch_norm_override({});
  EXPECT_EQ(calls, kNumBatchNorms);
  EXPECT_EQ(out.logits.sizes().vec(), (Sizes{2, 7}));
  ASSERT_TRUE(out.aux.defined());
  EXPECT_EQ(out.aux.sizes().vec(), (Sizes{2, 7}));
  // Gradients reach the aux head through its loss alone.
  out.aux.sum().backward();
  EXPECT_GT(model->named_parameters()["AuxLogits.fc.weight"].grad().abs().sum().item<double>(), 0);
  EXPECT_GT(model->named_parameters()["Mixed_6e.branch_pool.conv.weight"].grad().abs().sum().item<double>(), 0);
  EXPECT_FALSE(model->named_parameters()["Mixed_7c.branch_pool.conv.weight"].grad().defined());

  torch::NoGradGuard no_grad;
  model->eval();
  EXPECT_FALSE(model->forward_with_aux(x).aux.defined());
  // Too small for the aux classifier: a clear error in training, fine in eval.
  model->train();
  EXPECT_THROW(model->forward_with_aux(torch::randn({2, 3, 160, 160})), c10::Error);
  EXPECT_EQ(model->forward(torch::randn({2, 3, 160, 160})).sizes().vec(), (Sizes{2, 7}));
}

TEST(InceptionV3, RejectsInputsBelow75Pixels) {
  InceptionV3 model(options(0, false));
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_THROW(model->features(torch::zeros({1, 3, 74, 80})), c10::Error);
  EXPECT_THROW(model->features(torch::zeros({1, 1, 80, 80})), c10::Error);
  EXPECT_EQ(model->features(torch::zeros({1, 3, 75, 75})).sizes().vec(), (Sizes{1, 2048}));
  EXPECT_EQ(model->features(torch::zeros({1, 3, 75, 120})).sizes().vec(), (Sizes{1, 2048}));
}

// ---------------------------------------------------------------------------------------
// Initialisation

TEST(InceptionV3, HeInitialisation) {
  torch::manual_seed(0);
  InceptionV3 model(options(1000, true));
  auto params = model->named_parameters();
  for (const char* name : {"Conv2d_1a_3x3.conv.weight", "Mixed_6e.branch7x7dbl_2.conv.weight",
                           "Mixed_7c.branch3x3dbl_2.conv.weight", "AuxLogits.conv1.conv.weight"}) {
    const auto w = params[name];
    const double fan_in = static_cast<double>(w.numel() / w.size(0));
    EXPECT_NEAR(w.std().item<double>() / std::sqrt(2.0 / fan_in), 1.0, 0.1) << name;
  }
  EXPECT_NEAR(params["fc.weight"].std().item<double>(), 0.1, 0.005);
  EXPECT_NEAR(params["AuxLogits.fc.weight"].std().item<double>(), 0.001, 0.0001);
  EXPECT_TRUE(torch::all(params["fc.bias"] == 0).item<bool>());
  EXPECT_TRUE(torch::all(params["Mixed_5b.branch1x1.bn.weight"] == 1).item<bool>());
  EXPECT_TRUE(torch::all(params["Mixed_5b.branch1x1.bn.bias"] == 0).item<bool>());
}

// A frozen random encoder (eval mode, untrained batch-norm statistics) must still give finite
// O(1) features: im2txt's tests and smoke runs rely on it.
TEST(InceptionV3, HeInitialisedFeaturesAreOrderOneInEvalMode) {
  torch::manual_seed(0);
  InceptionV3 model(options(0, false));
  model->eval();
  torch::NoGradGuard no_grad;
  for (int64_t size : {75, 299}) {
    const auto x = torch::rand({2, 3, size, size}) * 2 - 1;  // im2txt's [-1, 1] images
    const auto f = model->features(x);
    ASSERT_TRUE(torch::isfinite(f).all().item<bool>()) << size;
    const double std = f.std().item<double>(), mean = f.mean().item<double>();
    std::cout << "He-initialised features at " << size << "x" << size << ": mean " << mean << " std " << std
              << std::endl;
    EXPECT_GT(std, 0.01) << size;
    EXPECT_LT(std, 100.0) << size;
    // Different images give different features.
    EXPECT_GT((f[0] - f[1]).abs().max().item<double>(), 1e-3 * std) << size;
  }
}

// The classify / multilabel tasks build it by name: a classifier without the auxiliary head,
// torchvision's state dict names, logits and pooled features through the ImageModel interface.
TEST(InceptionV3, RegisteredAsAnImageModel) {
  const auto names = model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "inception_v3"), names.end());
  ModelConfig c;
  c.arch = "inception_v3";
  c.num_classes = 7;
  ImageModel m = build_model(c);
  ASSERT_NE(dynamic_cast<InceptionV3Impl*>(m.get()), nullptr);
  const auto params = m->named_parameters();
  EXPECT_TRUE(params.contains("Conv2d_1a_3x3.conv.weight"));
  EXPECT_EQ(params["fc.weight"].sizes(), (std::vector<int64_t>{7, 2048}));
  for (const auto& p : params) EXPECT_EQ(p.key().rfind("AuxLogits", 0), std::string::npos) << p.key();
  m->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3, 75, 75});
  EXPECT_EQ(m->forward(x).sizes(), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(m->features(x).sizes(), (std::vector<int64_t>{2, 2048}));
  c.width = 32;
  EXPECT_THROW(build_model(c), Error);  // --width is a ResNet option
  c.width = 0;
  EXPECT_THROW(build_resnet(c), Error);  // not a ResNet
}

// TF-Slim's inception_v3(depth_multiplier, min_depth=16): every convolution's channels
// max(int(c * multiplier), 16), the concatenations following: at 0.25 Mixed_5b takes
// d(192) = 48, Mixed_7c gives d(320) + 4 d(384) + d(192) = 80 + 384 + 48 = 512 features.
TEST(InceptionV3, DepthMultiplierThinsEveryConvolutionAsTfSlim) {
  InceptionV3Options o = options(7, true);
  o.depth_multiplier = 0.25;
  InceptionV3 thin(o);
  const auto shapes = state_shapes(*thin);
  EXPECT_EQ(shapes.at("Conv2d_1a_3x3.conv.weight"), "16,3,3,3");  // d(32) = max(8, 16)
  EXPECT_EQ(shapes.at("Conv2d_4a_3x3.conv.weight"), "48,20,3,3");
  EXPECT_EQ(shapes.at("Mixed_5b.branch1x1.conv.weight"), "16,48,1,1");
  EXPECT_EQ(shapes.at("Mixed_5b.branch_pool.conv.weight"), "16,48,1,1");  // d(32) pool features
  EXPECT_EQ(shapes.at("Mixed_5c.branch1x1.conv.weight"), "16,72,1,1");    // 16 + 16 + 24 + 16
  EXPECT_EQ(shapes.at("Mixed_6a.branch3x3.conv.weight"), "96,72,3,3");
  EXPECT_EQ(shapes.at("Mixed_6b.branch7x7_2.conv.weight"), "32,32,1,7");  // c7 128 -> 32
  EXPECT_EQ(shapes.at("Mixed_6b.branch1x1.conv.weight"), "48,192,1,1");   // 96 + 24 + 72
  EXPECT_EQ(shapes.at("Mixed_7a.branch3x3_2.conv.weight"), "80,48,3,3");
  EXPECT_EQ(shapes.at("Mixed_7b.branch1x1.conv.weight"), "80,320,1,1");  // 80 + 48 + 192
  EXPECT_EQ(shapes.at("Mixed_7c.branch3x3dbl_1.conv.weight"), "112,512,1,1");
  EXPECT_EQ(shapes.at("AuxLogits.conv1.conv.weight"), "192,32,5,5");
  EXPECT_EQ(shapes.at("AuxLogits.fc.weight"), "7,192");
  EXPECT_EQ(shapes.at("fc.weight"), "7,512");
  EXPECT_EQ(thin->num_features(), 512);
  EXPECT_LT(count_parameters(*thin) * 12, kTorchvisionParameters);  // about 1/16 of the weights

  thin->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 3, 107, 107});
  EXPECT_EQ(thin->features(x).sizes(), (Sizes{2, 512}));
  EXPECT_EQ(thin->forward(x).sizes(), (Sizes{2, 7}));
  EXPECT_EQ(InceptionV3(options(0, false))->num_features(), 2048);

  // By name: inception_v3 only, a multiplier in (0, 1].
  ModelConfig c;
  c.arch = "inception_v3";
  c.num_classes = 3;
  c.depth_multiplier = 0.5;
  EXPECT_EQ(build_model(c)->named_parameters()["fc.weight"].sizes(), (Sizes{3, 1024}));
  for (double bad : {0.0, 1.5}) {
    c.depth_multiplier = bad;
    EXPECT_THROW(build_model(c), Error) << bad;
  }
  c.arch = "resnet18";
  c.depth_multiplier = 0.5;
  EXPECT_THROW(build_model(c), Error);
}

}  // namespace
}  // namespace orchard::models
