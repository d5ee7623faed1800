// Orchard models from and to TensorFlow checkpoints: layout conversions checked against
// TensorFlow's definitions of convolution, depthwise convolution and dense layers; each name
// map against the real checkpoint it describes; write -> read restores every variable.
#include "orchard/models/tf_weights.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <set>

#include "core/test_util.h"
#include "orchard/core/error.h"
#include "orchard/core/tf_checkpoint.h"
#include "orchard/detect/meta_arch/faster_rcnn_model.h"
#include "orchard/detect/meta_arch/ssd_model.h"
#include "orchard/models/inception_v3.h"
#include "orchard/models/mobilenet_v2.h"
#include "orchard/models/registry.h"
#include "orchard/models/resnet.h"
#include "orchard/models/resnet_ml_images.h"

namespace orchard::models {
namespace {

namespace stdfs = std::filesystem;
namespace F = torch::nn::functional;
const stdfs::path kTf = stdfs::path(ORCHARD_TEST_FIXTURES) / "tf";

tf::Tensor as_tf(const torch::Tensor& t) {
  tf::Tensor out;
  out.dtype = tf::kFloat;
  out.shape = t.sizes().vec();
  const auto c = t.contiguous();
  out.data.assign(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * 4);
  return out;
}

// TensorFlow's VALID convolution on NHWC with an HWIO kernel, by its definition.
torch::Tensor tf_conv(const torch::Tensor& x, const torch::Tensor& w) {
  const int64_t kh = w.size(0), kw = w.size(1), oh = x.size(1) - kh + 1, ow = x.size(2) - kw + 1;
  auto out = torch::zeros({x.size(0), oh, ow, w.size(3)});
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t b = 0; b < kw; ++b)
      out += torch::matmul(x.slice(1, a, a + oh).slice(2, b, b + ow), w[a][b]);  // [N,oh,ow,in] x [in,out]
  return out;
}

// tf.nn.depthwise_conv2d (VALID): output channel c * multiplier + m.
torch::Tensor tf_depthwise(const torch::Tensor& x, const torch::Tensor& w) {
  const int64_t kh = w.size(0), kw = w.size(1), oh = x.size(1) - kh + 1, ow = x.size(2) - kw + 1;
  const int64_t in = w.size(2), mult = w.size(3);
  auto out = torch::zeros({x.size(0), oh, ow, in, mult});
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t b = 0; b < kw; ++b)
      out += x.slice(1, a, a + oh).slice(2, b, b + ow).unsqueeze(-1) * w[a][b];  // [.., in, 1] * [in, m]
  return out.reshape({x.size(0), oh, ow, in * mult});
}

TEST(TfLayout, ConvolutionsAndDenseComputeWhatTensorFlowComputes) {
  torch::manual_seed(1);
  const auto x = torch::randn({2, 6, 7, 4});  // NHWC
  const auto nchw = x.permute({0, 3, 1, 2});
  {
    const auto w = torch::randn({3, 2, 4, 5});  // HWIO
    const auto torch_w = tf_to_torch(as_tf(w), TfLayout::kConv);
    EXPECT_EQ(torch_w.sizes(), (c10::IntArrayRef{5, 4, 3, 2}));
    EXPECT_TRUE(torch::allclose(F::conv2d(nchw, torch_w).permute({0, 2, 3, 1}), tf_conv(x, w), 1e-4, 1e-5));
    EXPECT_TRUE(torch::equal(torch_to_tf(torch_w, TfLayout::kConv), w));
    EXPECT_EQ(torch_to_tf_shape(torch_w.sizes().vec(), TfLayout::kConv), w.sizes().vec());
  }
  {
    const auto w = torch::randn({3, 3, 4, 2});  // [H, W, in, multiplier]
    const auto torch_w = tf_to_torch(as_tf(w), TfLayout::kDepthwise);
    EXPECT_EQ(torch_w.sizes(), (c10::IntArrayRef{8, 1, 3, 3}));
    const auto y = F::conv2d(nchw, torch_w, F::Conv2dFuncOptions().groups(4)).permute({0, 2, 3, 1});
    EXPECT_TRUE(torch::allclose(y, tf_depthwise(x, w), 1e-4, 1e-5));
    // Back to TensorFlow with the multiplier (Inception-v2's separable first layer has 8).
    EXPECT_TRUE(torch::equal(torch_to_tf(torch_w, TfLayout::kDepthwise, 2), w));
    EXPECT_EQ(torch_to_tf_shape(torch_w.sizes().vec(), TfLayout::kDepthwise, 2), w.sizes().vec());
    EXPECT_NE(torch_to_tf_shape(torch_w.sizes().vec(), TfLayout::kDepthwise), w.sizes().vec());
    // Multiplier 1 (most depthwise convolutions Orchard builds).
    const auto w1 = w.slice(3, 0, 1).contiguous();
    const auto torch_w1 = tf_to_torch(as_tf(w1), TfLayout::kDepthwise);
    EXPECT_TRUE(torch::equal(torch_to_tf(torch_w1, TfLayout::kDepthwise), w1));
    EXPECT_EQ(torch_to_tf_shape(torch_w1.sizes().vec(), TfLayout::kDepthwise), w1.sizes().vec());
  }
  {
    const auto v = torch::randn({3, 4});
    const auto w = torch::randn({4, 6});  // tf.layers.dense: y = x W
    const auto torch_w = tf_to_torch(as_tf(w), TfLayout::kDense);
    EXPECT_TRUE(torch::allclose(F::linear(v, torch_w), torch::matmul(v, w), 1e-5, 1e-6));
    EXPECT_TRUE(torch::equal(torch_to_tf(torch_w, TfLayout::kDense), w));
    // TF-Slim's logits: a 1x1 convolution [1, 1, in, out].
    const auto conv_w = w.reshape({1, 1, 4, 6});
    const auto from_conv = tf_to_torch(as_tf(conv_w), TfLayout::kConvDense);
    EXPECT_TRUE(torch::equal(from_conv, torch_w));
    EXPECT_TRUE(torch::equal(torch_to_tf(from_conv, TfLayout::kConvDense), conv_w));
    EXPECT_EQ(torch_to_tf_shape(from_conv.sizes().vec(), TfLayout::kConvDense), conv_w.sizes().vec());
  }
}

// Every variable has one TensorFlow name, no two the same.
void expect_complete_and_distinct(torch::nn::Module& model, const TfNameMap& map) {
  std::set<std::string> seen;
  for (const auto& p : model.named_parameters()) {
    const auto n = map(p.key());
    ASSERT_TRUE(n.has_value()) << p.key();
    EXPECT_TRUE(seen.insert(n->name).second) << n->name;
  }
  for (const auto& b : model.named_buffers()) {
    const auto n = map(b.key());
    if (b.key().find("num_batches_tracked") != std::string::npos) {
      EXPECT_FALSE(n.has_value());
      continue;
    }
    ASSERT_TRUE(n.has_value()) << b.key();
    EXPECT_TRUE(seen.insert(n->name).second) << n->name;
  }
  EXPECT_THROW(map("no.such.variable"), std::invalid_argument);
}

detect::SsdModelOptions zoo_ssd_options() {
  // ssd_mobilenet_v2_coco_2018_03_29's pipeline.config: 90 classes, use_depthwise, 3x3 box predictor.
  detect::SsdModelOptions o;
  o.num_classes = 90;
  o.kernel_size = 3;
  o.use_depthwise = true;
  return o;
}

TEST(TfNameMaps, SsdMatchesTheModelZoosCheckpointByNameAndShape) {
  detect::SsdModel model(zoo_ssd_options());
  const TfNameMap map = [&](const std::string& n) { return model->tf_name(n); };
  expect_complete_and_distinct(*model, map);
  const tf::CheckpointReader zoo((kTf / "ssd_mobilenet_v2_coco_2018_03_29" / "model.ckpt").string());
  const TfMapping m = match_tf_checkpoint(zoo, *model, map);
  EXPECT_EQ(m.count(TfMatch::kMatched), 344);
  EXPECT_EQ(m.count(TfMatch::kMissing), 0);
  EXPECT_EQ(m.count(TfMatch::kShapeMismatch), 0);
  EXPECT_EQ(m.unused, std::vector<std::string>{"global_step"});
  // A classification checkpoint of the backbone: TF-Slim's MobilenetV2/ scope.
  EXPECT_EQ(model->tf_name("backbone.features.0.0.weight", "MobilenetV2")->name, "MobilenetV2/Conv/weights");
  // The sample config's model (no depthwise extras, 1x1 predictor) differs and says where.
  detect::SsdModel sample(detect::SsdModelOptions{});
  const TfMapping other = match_tf_checkpoint(zoo, *sample, [&](const std::string& n) { return sample->tf_name(n); });
  EXPECT_GT(other.count(TfMatch::kShapeMismatch), 0);
}

// ssd_mobilenet_v1_coco_2018_01_28 (its pipeline.config: 90 classes, 1x1 predictor, no
// depthwise extras): every one of the zoo checkpoint's 199 variables by name and shape.
TEST(TfNameMaps, SsdMobileNetV1MatchesTheModelZoosCheckpointByNameAndShape) {
  detect::SsdModelOptions o;
  o.feature_extractor = "ssd_mobilenet_v1";
  detect::SsdModel model(o);
  const TfNameMap map = [&](const std::string& n) { return model->tf_name(n); };
  expect_complete_and_distinct(*model, map);
  const tf::CheckpointReader zoo((kTf / "ssd_mobilenet_v1_coco_2018_01_28" / "model.ckpt").string());
  const TfMapping m = match_tf_checkpoint(zoo, *model, map);
  EXPECT_EQ(m.count(TfMatch::kMatched), 199);
  EXPECT_EQ(m.count(TfMatch::kMissing), 0);
  EXPECT_EQ(m.count(TfMatch::kShapeMismatch), 0);
  EXPECT_EQ(m.unused, std::vector<std::string>{"global_step"});
  EXPECT_EQ(model->tf_name("backbone.features.13.0.0.weight")->name,
            "FeatureExtractor/MobilenetV1/Conv2d_13_depthwise/depthwise_weights");
  EXPECT_EQ(model->tf_name("backbone.features.13.0.0.weight")->layout, TfLayout::kDepthwise);
  EXPECT_EQ(model->tf_name("extras.0.1.0.weight")->name,
            "FeatureExtractor/MobilenetV1/Conv2d_13_pointwise_2_Conv2d_2_3x3_s2_512/weights");
  // A TF-Slim classification checkpoint (mobilenet_v1_1.0_224.ckpt): the MobilenetV1/ scope.
  EXPECT_EQ(model->tf_name("backbone.features.0.1.weight", "MobilenetV1")->name,
            "MobilenetV1/Conv2d_0/BatchNorm/gamma");
  EXPECT_THROW(model->tf_name("backbone.features.14.0.0.weight"), std::invalid_argument);
  EXPECT_THROW(model->tf_name("backbone.features.3.2.0.weight"), std::invalid_argument);
}

// The OD API zoo's two-stage checkpoints (faster_rcnn_resnet50_coco_2018_01_28 and
// faster_rcnn_inception_v2_coco_2018_01_28, their sample configs' models: 90 classes, 12 anchors
// per location): every model variable by name and shape. TF-Slim's resnet_v1_50 builds all four
// blocks in the first stage too; its block4 there (50 variables) feeds nothing, and the OD API's
// model leaves it unused as Orchard does.
TEST(TfNameMaps, FasterRcnnMatchesTheModelZoosCheckpointsByNameAndShape) {
  for (const std::string extractor : {"faster_rcnn_resnet50", "faster_rcnn_inception_v2"}) {
    detect::FasterRcnnModelOptions o;
    o.feature_extractor = extractor;
    o.num_classes = 90;
    o.anchors_per_location = 12;
    o.initialize = false;
    detect::FasterRcnnModel model(o);
    const TfNameMap map = [&](const std::string& n) { return model->tf_name(n, false); };
    const bool resnet = extractor == "faster_rcnn_resnet50";
    const auto dir =
        kTf / (resnet ? "faster_rcnn_resnet50_coco_2018_01_28" : "faster_rcnn_inception_v2_coco_2018_01_28");
    const tf::CheckpointReader zoo((dir / "model.ckpt").string());
    const TfMapping m = match_tf_checkpoint(zoo, *model, map);
    EXPECT_EQ(m.count(TfMatch::kMatched), resnet ? 275 : 356) << extractor;
    EXPECT_EQ(m.count(TfMatch::kMissing), 0) << extractor;
    EXPECT_EQ(m.count(TfMatch::kShapeMismatch), 0) << extractor;
    std::set<std::string> unused(m.unused.begin(), m.unused.end());
    EXPECT_EQ(unused.erase("global_step"), 1u);
    for (const auto& name : unused)
      EXPECT_EQ(name.rfind("FirstStageFeatureExtractor/resnet_v1_50/block4/", 0), 0u) << name;
    EXPECT_EQ(unused.size(), resnet ? 50u : 0u) << extractor;
  }
}

TEST(TfNameMaps, MobileNetV2AndInceptionV3FollowTfSlim) {
  ModelConfig c;
  c.arch = "mobilenet_v2";
  c.num_classes = 1001;
  auto mobilenet = build_model(c);
  expect_complete_and_distinct(*mobilenet, tf_name_map("mobilenet_v2"));
  const auto mn = tf_name_map("mobilenet_v2");
  EXPECT_EQ(mn("features.1.conv.0.0.weight")->name, "MobilenetV2/expanded_conv/depthwise/depthwise_weights");
  EXPECT_EQ(mn("features.1.conv.0.0.weight")->layout, TfLayout::kDepthwise);
  EXPECT_EQ(mn("features.2.conv.0.1.running_var")->name,
            "MobilenetV2/expanded_conv_1/expand/BatchNorm/moving_variance");
  EXPECT_EQ(mn("features.17.conv.3.bias")->name, "MobilenetV2/expanded_conv_16/project/BatchNorm/beta");
  EXPECT_EQ(mn("features.18.0.weight")->name, "MobilenetV2/Conv_1/weights");
  EXPECT_EQ(mn("classifier.1.weight")->layout, TfLayout::kConvDense);

  c.arch = "inception_v3";
  auto inception = build_model(c);
  const auto in = tf_name_map("inception_v3");
  expect_complete_and_distinct(*inception, in);
  EXPECT_EQ(in("Mixed_5c.branch5x5_2.conv.weight")->name, "InceptionV3/Mixed_5c/Branch_1/Conv_1_0c_5x5/weights");
  EXPECT_EQ(in("Mixed_7c.branch3x3_2b.conv.weight")->name, "InceptionV3/Mixed_7c/Branch_1/Conv2d_0c_3x1/weights");
  // TF-Slim's Inception-v3 batch norms have no gamma (scale=False): 1 when absent.
  const auto gamma = in("Conv2d_1a_3x3.bn.weight");
  EXPECT_EQ(gamma->name, "InceptionV3/Conv2d_1a_3x3/BatchNorm/gamma");
  EXPECT_EQ(gamma->default_value, 1.0f);
  EXPECT_EQ(in("fc.weight")->name, "InceptionV3/Logits/Conv2d_1c_1x1/weights");
  EXPECT_FALSE(tf_name_map("resnet50"));  // no map yet: callers say so
}

int64_t conv_stride(torch::nn::Module& m, const std::string& name) {
  auto modules = m.named_modules();
  return (*modules[name]->as<torch::nn::Conv2d>()->options.stride())[0];
}

TEST(TfNameMaps, ResNetsOfTfSlimAndModelGardenWithTheirStrides) {
  ModelConfig c;
  c.initialize = false;
  c.arch = "resnet_v1_50";
  auto slim = build_model(c);
  const auto sm = tf_name_map("resnet_v1_50");
  expect_complete_and_distinct(*slim, sm);
  EXPECT_EQ(sm("conv1.weight")->name, "resnet_v1_50/conv1/weights");
  EXPECT_EQ(sm("layer1.2.conv2.weight")->name, "resnet_v1_50/block1/unit_3/bottleneck_v1/conv2/weights");
  EXPECT_EQ(sm("layer3.0.downsample.1.running_var")->name,
            "resnet_v1_50/block3/unit_1/bottleneck_v1/shortcut/BatchNorm/moving_variance");
  EXPECT_EQ(sm("fc.weight")->name, "resnet_v1_50/logits/weights");
  EXPECT_EQ(sm("fc.weight")->layout, TfLayout::kConvDense);
  // TF-Slim strides the last unit of stages 1-3 (a subsampling shortcut there), not stage 4;
  // the projection of each stage's first unit keeps stride 1.
  EXPECT_EQ(conv_stride(*slim, "layer1.2.conv2"), 2);
  EXPECT_EQ(conv_stride(*slim, "layer1.0.conv2"), 1);
  EXPECT_EQ(conv_stride(*slim, "layer2.0.downsample.0"), 1);
  EXPECT_EQ(conv_stride(*slim, "layer2.3.conv2"), 2);
  EXPECT_EQ(conv_stride(*slim, "layer4.0.conv2"), 1);
  EXPECT_EQ(slim->forward(torch::randn({1, 3, 64, 64})).sizes(), (c10::IntArrayRef{1, 1000}));

  c.arch = "resnet50_garden";
  auto garden = build_model(c);
  const auto km = tf_name_map("resnet50_garden");
  expect_complete_and_distinct(*garden, km);
  EXPECT_EQ(km("bn1.running_mean")->name, "bn_conv1/moving_mean");
  EXPECT_EQ(km("layer2.0.downsample.0.weight")->name, "res3a_branch1/kernel");
  EXPECT_EQ(km("layer4.2.bn3.weight")->name, "bn5c_branch2c/gamma");
  EXPECT_EQ(km("fc.weight")->name, "fc1000/kernel");
  EXPECT_EQ(km("fc.weight")->layout, TfLayout::kDense);
  EXPECT_EQ(conv_stride(*garden, "layer2.0.conv2"), 2);  // v1.5, with TF 'SAME' padding
  EXPECT_EQ(garden->forward(torch::randn({1, 3, 64, 64})).sizes(), (c10::IntArrayRef{1, 1000}));
  EXPECT_FALSE(tf_name_map("resnet50"));  // torchvision's padding: no TensorFlow map
}

// Tencent ML-Images' ResNet-101 (models/resnet.py): pre-activation, all four stages strided in
// their first block (3x3 and shortcut), no stem max-pool; its names, as tf.layers makes them.
TEST(TfNameMaps, MlImagesResNet101) {
  ModelConfig c;
  c.initialize = false;
  c.arch = "resnet101_ml_images";
  c.num_classes = 11166;  // the published ML-Images checkpoint's classes
  auto model = build_model(c);
  const auto map = tf_name_map("resnet101_ml_images");
  expect_complete_and_distinct(*model, map);
  int kernels = 0, norms = 0;
  for (const auto& p : model->named_parameters()) {
    const auto n = map(p.key())->name;
    kernels += n.size() > 13 && n.compare(n.size() - 13, 13, "conv2d/kernel") == 0;
    norms += n.size() > 5 && n.compare(n.size() - 5, 5, "gamma") == 0;
  }
  EXPECT_EQ(kernels, 1 + 33 * 3 + 4);  // the stem, 3 per block, a projection per stage
  EXPECT_EQ(norms, 33 * 3 + 4 + 1);    // before each of those but the stem, and the final one
  EXPECT_EQ(map("conv1.weight")->name, "init/init_conv/conv2d/kernel");
  EXPECT_EQ(map("layer1.0.shortcut_conv.weight")->name, "stages_0_block_0/conv1_b1/conv2d/kernel");
  EXPECT_EQ(map("layer1.0.shortcut_bn.running_var")->name,
            "stages_0_block_0/conv1_b1_bn/batch_normalization/moving_variance");
  EXPECT_EQ(map("layer3.22.bn3.bias")->name, "stages_2_block_22/conv3_b2_bn/batch_normalization/beta");
  EXPECT_EQ(map("bn_final.weight")->name, "global_pool/bn/batch_normalization/gamma");
  EXPECT_EQ(map("fc.weight")->name, "logits/dense/kernel");
  EXPECT_EQ(map("fc.weight")->layout, TfLayout::kDense);
  EXPECT_EQ(model->named_parameters()["layer1.0.bn1.weight"].size(0), 64);  // pre-activation: the block's input
  EXPECT_EQ(conv_stride(*model, "layer1.0.conv2"), 2);
  EXPECT_EQ(conv_stride(*model, "layer1.0.shortcut_conv"), 2);
  EXPECT_EQ(conv_stride(*model, "layer1.1.conv2"), 1);
  EXPECT_EQ(conv_stride(*model, "layer4.0.conv2"), 2);
  torch::NoGradGuard no_grad;
  model->eval();
  EXPECT_EQ(model->forward(torch::randn({1, 3, 64, 64})).sizes(), (c10::IntArrayRef{1, 11166}));
}

// `to` gets `from`'s parameters (the same names), both in eval mode.
void same_weights_for_inference(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto dst = to.named_parameters();
  for (const auto& p : from.named_parameters()) dst[p.key()].copy_(p.value());
  from.eval();
  to.eval();
}

// Model Garden's Keras ResNet-50 is v1.5 with TF 'SAME' padding in its strided layers. Where
// each of them sees an odd size, 'SAME' pads 1 on both sides, as torchvision: at 33 px (conv1
// 17, max-pool 9, stages 5, 3) the two layouts compute the same with the same weights; at 32
// px 'SAME' pads only the bottom/right and they differ.
TEST(TfNameMaps, KerasLayoutDiffersFromTorchvisionOnlyInItsStridedPadding) {
  ResNetOptions o;
  o.base_width = 8;
  o.num_classes = 5;
  ResNet tv(o);
  o.layout = ResNetLayout::kKeras;
  ResNet keras(o);
  same_weights_for_inference(*tv, *keras);
  torch::NoGradGuard no_grad;
  const auto odd = torch::randn({2, 3, 33, 33});
  const auto even = torch::randn({2, 3, 32, 32});
  EXPECT_TRUE(torch::allclose(tv->forward(odd), keras->forward(odd), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(tv->forward(even), keras->forward(even), 1e-3, 1e-4));
}

// TF-Slim's branch pools average only the pixels inside the image (torchvision's count the
// zero padding at the borders): with the same weights the two encoders differ.
TEST(TfNameMaps, InceptionTfAvgPoolLeavesThePaddingOut) {
  InceptionV3Options o;
  o.num_classes = 0;
  o.depth_multiplier = 0.25;
  InceptionV3 tv(o);
  o.tf_avg_pool = true;
  InceptionV3 slim(o);
  same_weights_for_inference(*tv, *slim);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({1, 3, 75, 75});
  EXPECT_FALSE(torch::allclose(tv->forward(x), slim->forward(x), 1e-4, 1e-5));
}

// A real TF2 Keras checkpoint (tfx's Keras Tuner): its keys are object paths
// ("layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"); a map written with the Keras
// layer names ("dense/kernel", as Model Garden's ResNet-50 map is) finds them through the
// object graph, and the dense kernels arrive transposed.
TEST(TfWeights, Tf2KerasCheckpointIsMatchedByTheVariablesNames) {
  torch::nn::Sequential mlp(torch::nn::Linear(4, 8), torch::nn::Linear(8, 3));
  const TfNameMap map = [](const std::string& n) -> std::optional<TfName> {
    const std::string layer = n[0] == '0' ? "dense" : "dense_1";
    const bool kernel = n.substr(2) == "weight";
    return TfName{layer + (kernel ? "/kernel" : "/bias"), kernel ? TfLayout::kDense : TfLayout::kSame};
  };
  const std::string path = (kTf / "keras_tuner_tf2" / "checkpoint").string();
  const auto r = restore_tf_checkpoint(path, *mlp, map);
  EXPECT_EQ(r.restored.size(), 4u);
  const tf::CheckpointReader keras(path);
  const auto kernel =
      tf_to_torch(keras.read("layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE"), TfLayout::kSame);
  EXPECT_EQ(kernel.sizes(), (c10::IntArrayRef{8, 3}));
  EXPECT_TRUE(torch::equal(mlp->named_parameters()["1.weight"], kernel.t()));
  // The optimizer's slots and counters are the checkpoint's, not the model's: listed unused.
  EXPECT_GT(r.unused.size(), 4u);
}

// Random weights and batch-norm statistics, so a restore that missed one would show.
void randomize(torch::nn::Module& m, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.uniform_(-1, 1);
  for (auto& b : m.named_buffers())
    if (b.value().is_floating_point()) b.value().uniform_(0.5, 2);
}

void expect_same_variables(torch::nn::Module& a, torch::nn::Module& b, const std::set<std::string>& except = {}) {
  auto pb = b.named_parameters();
  for (const auto& p : a.named_parameters())
    if (!except.count(p.key())) {
      EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
    }
  auto bb = b.named_buffers();
  for (const auto& x : a.named_buffers())
    if (x.value().is_floating_point()) {
      EXPECT_TRUE(torch::equal(x.value(), bb[x.key()])) << x.key();
    }
}

TEST(TfWeights, WriteThenRestoreGivesEveryVariableBack) {
  test::TempDir dir;
  {
    detect::SsdModel a(zoo_ssd_options()), b(zoo_ssd_options());
    randomize(*a, 1);
    randomize(*b, 2);
    const TfNameMap map = [&](const std::string& n) { return a->tf_name(n); };
    const auto left_out = write_tf_checkpoint(dir.file("ssd/model.ckpt"), *a, map, 1234);
    for (const auto& n : left_out) EXPECT_NE(n.find("num_batches_tracked"), std::string::npos) << n;
    // The names and shapes TensorFlow's own ssd_mobilenet_v2_coco checkpoint has.
    const tf::CheckpointReader ours(dir.file("ssd/model.ckpt"));
    const tf::CheckpointReader zoo((kTf / "ssd_mobilenet_v2_coco_2018_03_29" / "model.ckpt").string());
    ASSERT_EQ(ours.variables().size(), zoo.variables().size());
    for (size_t i = 0; i < ours.variables().size(); ++i) {
      EXPECT_EQ(ours.variables()[i].name, zoo.variables()[i].name);
      EXPECT_EQ(ours.variables()[i].shape, zoo.variables()[i].shape) << ours.variables()[i].name;
      EXPECT_EQ(ours.variables()[i].dtype, zoo.variables()[i].dtype) << ours.variables()[i].name;
    }
    const auto r = restore_tf_checkpoint(dir.file("ssd"), *b, map);  // a directory: its `checkpoint`? none: *.index
    EXPECT_EQ(r.unused, std::vector<std::string>{"global_step"});
    expect_same_variables(*a, *b);
  }
  {
    // ssd_inception_v2's separable first layer keeps its depthwise multiplier (here depth(64) =
    // 16, so min(16 / 3, 8) = 5): [7, 7, 3, 5] in TensorFlow.
    detect::SsdModelOptions o;
    o.feature_extractor = "ssd_inception_v2";
    o.depth_multiplier = 0.25;
    detect::SsdModel a(o), b(o);
    randomize(*a, 3);
    randomize(*b, 4);
    const TfNameMap map = [&](const std::string& n) { return a->tf_name(n); };
    write_tf_checkpoint(dir.file("inception_v2/model.ckpt"), *a, map, 1);
    const tf::CheckpointReader ours(dir.file("inception_v2/model.ckpt"));
    bool found = false;
    for (const auto& v : ours.variables())
      if (v.name == "FeatureExtractor/InceptionV2/Conv2d_1a_7x7/depthwise_weights") {
        found = true;
        EXPECT_EQ(v.shape, (std::vector<int64_t>{7, 7, 3, 5}));
      }
    EXPECT_TRUE(found);
    restore_tf_checkpoint(dir.file("inception_v2/model.ckpt"), *b, map);
    expect_same_variables(*a, *b);
  }
  {
    MlImagesResNetOptions o;
    o.layers = {1, 2, 1, 1};
    o.num_classes = 6;
    MlImagesResNet a(o), b(o);
    randomize(*a, 7);
    randomize(*b, 8);
    const TfNameMap map = [](const std::string& n) { return resnet_ml_images_tf_name(n); };
    write_tf_checkpoint(dir.file("ml_images"), *a, map, 0);
    restore_tf_checkpoint(dir.file("ml_images"), *b, map);
    expect_same_variables(*a, *b);
  }
  {
    InceptionV3Options o;
    o.num_classes = 1001;
    o.depth_multiplier = 0.25;
    InceptionV3 a(o), b(o);
    randomize(*a, 3);
    randomize(*b, 4);
    const TfNameMap map = [](const std::string& n) { return inception_v3_tf_name(n); };
    write_tf_checkpoint(dir.file("inception"), *a, map, 0);
    restore_tf_checkpoint(dir.file("inception"), *b, map);
    expect_same_variables(*a, *b);
    // TF-Slim's own Inception-v3 checkpoints have no gamma (batch_norm scale=False): 1.
    const tf::CheckpointReader full(dir.file("inception"));
    tf::BundleWriter slim(dir.file("slim/inception_v3.ckpt"));
    for (const auto& v : full.variables())
      if (v.name.size() < 6 || v.name.compare(v.name.size() - 6, 6, "/gamma") != 0)
        slim.add(v.name, v.dtype, v.shape, full.read(v.name).data);
    slim.finish();
    randomize(*b, 5);
    const auto r = restore_tf_checkpoint(dir.file("slim/inception_v3.ckpt"), *b, map);
    std::set<std::string> gammas;
    for (const auto& p : b->named_parameters())
      if (p.key().find(".bn.weight") != std::string::npos) {
        gammas.insert(p.key());
        EXPECT_TRUE(torch::all(p.value() == 1).item<bool>()) << p.key();
      }
    EXPECT_EQ(gammas.size(), 94u);
    expect_same_variables(*a, *b, gammas);
  }
}

TEST(TfWeights, MissingOrMisshapenVariablesAreErrorsAndNothingIsRestored) {
  test::TempDir dir;
  MobileNetV2Options o;
  o.num_classes = 1001;
  MobileNetV2 a(o);
  randomize(*a, 5);
  const TfNameMap map = [](const std::string& n) { return mobilenet_v2_tf_name(n); };
  write_tf_checkpoint(dir.file("full"), *a, map, 0);
  const tf::CheckpointReader full(dir.file("full"));

  // A checkpoint without one variable (the first conv's weights) and with the logits of
  // 1000 classes: nothing restored, both named.
  tf::BundleWriter w(dir.file("partial"));
  for (const auto& v : full.variables()) {
    if (v.name == "MobilenetV2/Conv/weights") continue;
    auto t = full.read(v.name);
    if (v.name == "MobilenetV2/Logits/Conv2d_1c_1x1/biases") {
      t.shape = {1000};
      t.data.resize(4000);
    }
    w.add(v.name, v.dtype, t.shape, t.data);
  }
  w.finish();
  MobileNetV2 b(o);
  randomize(*b, 6);
  const auto before = b->named_parameters()["features.1.conv.1.weight"].clone();
  try {
    restore_tf_checkpoint(dir.file("partial"), *b, map);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("MobilenetV2/Logits/Conv2d_1c_1x1/biases [1000] for classifier.1.bias [1001]"),
              std::string::npos)
        << msg;
  }
  EXPECT_TRUE(torch::equal(before, b->named_parameters()["features.1.conv.1.weight"]));  // nothing changed
  // Only the missing one: named, with the model's variable.
  try {
    restore_tf_checkpoint(dir.file("partial"), *b, map,
                          [](const std::string& n) { return n.rfind("classifier", 0) == 0; });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MobilenetV2/Conv/weights (for features.0.0.weight)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace orchard::models
