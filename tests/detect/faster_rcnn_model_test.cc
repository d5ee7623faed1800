// Faster R-CNN's networks with the TF-Slim ResNet-v1 extractors (detect/faster_rcnn_model.h):
// parameter counts and shapes as the OD API builds faster_rcnn_resnet50/101 (counts from
// slim/nets/resnet_v1.py, the RPN of faster_rcnn_meta_arch.py and MaskRCNNBoxPredictor), the
// output strides, and the TensorFlow names of its checkpoints.
#include "orchard/detect/meta_arch/faster_rcnn_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>

namespace orchard::detect {
namespace {

int64_t count(torch::nn::Module& m, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& p : m.named_parameters())
    if (p.key().rfind(prefix, 0) == 0) n += p.value().numel();
  return n;
}

// slim resnet_v1_50 without logits has 23,508,032 trainable variables (conv weights without
// biases, batch norm gamma and beta), as torchvision's resnet50 (25,557,032) without its fc
// (2048 x 1000 + 1000); its block4 (3 bottleneck units of depth 2048, bottleneck 512, on 1024
// channels) has 14,964,736, so the first stage (conv1 .. block3) has 8,543,296. resnet_v1_101's
// block3 has 17 more units of 1024 / 256: 17 x (1024*256 + 256*256*9 + 256*1024 + 3*2*256 +
// 2*1024) = 17 x 1,117,184 more.
TEST(FasterRcnnModel, ParameterCountsAreTheOdApis) {
  FasterRcnnModelOptions o;
  o.num_classes = 90;
  o.anchors_per_location = 12;  // faster_rcnn_resnet50_coco: 4 scales x 3 aspect ratios
  FasterRcnnModel model(o);
  EXPECT_EQ(count(*model, "first_stage_extractor."), 8'543'296);
  EXPECT_EQ(count(*model, "second_stage_extractor."), 14'964'736);
  // 'Conv': 3x3x1024x512 + 512; FirstStageBoxPredictor: 1x1x512x(12*4) + 48, 1x1x512x(12*2) + 24.
  EXPECT_EQ(count(*model, "rpn_conv."), 3 * 3 * 1024 * 512 + 512);
  EXPECT_EQ(count(*model, "rpn_box_encoding."), 512 * 48 + 48);
  EXPECT_EQ(count(*model, "rpn_class."), 512 * 24 + 24);
  // SecondStageBoxPredictor: one FC each, 2048 -> 90 x 4 and 2048 -> 91.
  EXPECT_EQ(count(*model, "box_encoding."), 2048 * 360 + 360);
  EXPECT_EQ(count(*model, "class_logits."), 2048 * 91 + 91);

  o.feature_extractor = "faster_rcnn_resnet101";
  o.initialize = false;
  FasterRcnnModel deep(o);
  EXPECT_EQ(count(*deep, "first_stage_extractor."), 8'543'296 + 17 * 1'117'184);
  EXPECT_EQ(count(*deep, "second_stage_extractor."), 14'964'736);
}

TEST(FasterRcnnModel, ShapesAtStride16And8) {
  torch::manual_seed(0);
  FasterRcnnModelOptions o;
  o.num_classes = 3;
  o.anchors_per_location = 9;
  o.initial_crop_size = 6;
  FasterRcnnModel model(o);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto images = torch::rand({2, 3, 100, 131}) * 2 - 1;
  auto first = model->first_stage(images);
  // ceil(100 / 16) = 7, ceil(131 / 16) = 9 (each stride-2 layer gives ceil(n / 2)).
  EXPECT_EQ(model->feature_map_size(100, 131), (std::pair<int64_t, int64_t>{7, 9}));
  EXPECT_EQ(first.features.sizes(), (std::vector<int64_t>{2, 1024, 7, 9}));
  EXPECT_EQ(first.box_encodings.sizes(), (std::vector<int64_t>{2, 7 * 9 * 9, 4}));
  EXPECT_EQ(first.objectness.sizes(), (std::vector<int64_t>{2, 7 * 9 * 9, 2}));
  const auto boxes =
      torch::tensor({0.1f, 0.1f, 0.5f, 0.6f, 0.0f, 0.2f, 1.0f, 0.9f, 0.3f, 0.3f, 0.4f, 0.4f}).view({3, 4});
  const auto [refined, logits] = model->second_stage(first.features, boxes, torch::tensor({0, 1, 1}, torch::kLong));
  EXPECT_EQ(refined.sizes(), (std::vector<int64_t>{3, 3, 4}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(torch::isfinite(refined).all().item<bool>());

  // The stride-16 block3 is TF-Slim's block3 end point before its last unit subsamples.
  auto& resnet = *model->named_children()[0].value()->as<models::ResNetImpl>();
  const auto x = (images + 1) * 127.5 - torch::tensor({123.68f, 116.779f, 103.939f}).view({1, 3, 1, 1});
  EXPECT_TRUE(torch::allclose(resnet.slim_stage_outputs(x, 3).back(), first.features, 1e-4, 1e-4));

  // Stride 8 (the _atrous configs): block2's last unit and all of block3 at stride 1.
  o.features_stride = 8;
  o.rpn_atrous_rate = 2;
  FasterRcnnModel atrous(o);
  atrous->eval();
  const auto f8 = atrous->first_stage(images);
  EXPECT_EQ(atrous->feature_map_size(100, 131), (std::pair<int64_t, int64_t>{13, 17}));
  EXPECT_EQ(f8.features.sizes(), (std::vector<int64_t>{2, 1024, 13, 17}));
  EXPECT_EQ(f8.box_encodings.size(1), 13 * 17 * 9);
}

// Frozen batch norms (batch_norm_trainable false, the samples) keep their statistics in training.
TEST(FasterRcnnModel, BatchNormsStayFrozenUnlessTrainable) {
  FasterRcnnModelOptions o;
  o.num_classes = 2;
  o.anchors_per_location = 3;
  FasterRcnnModel model(o);
  model->train();
  int frozen = 0, total = 0;
  for (const auto& m : model->modules(false))
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      ++total;
      frozen += !bn->is_training();
    }
  EXPECT_GT(total, 50);
  EXPECT_EQ(frozen, total);
  EXPECT_TRUE(model->is_training());
  o.batch_norm_trainable = true;
  FasterRcnnModel trainable(o);
  trainable->train();
  for (const auto& m : trainable->modules(false))
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      EXPECT_TRUE(bn->is_training());
    }
}

TEST(FasterRcnnModel, TensorFlowNamesAreTheOdApis) {
  FasterRcnnModelOptions o;
  o.num_classes = 90;
  o.initialize = false;
  FasterRcnnModel model(o);
  auto name = [&](const std::string& n, bool classification = false) {
    const auto t = model->tf_name(n, classification);
    return t ? t->name : std::string("(none)");
  };
  EXPECT_EQ(name("first_stage_extractor.conv1.weight"), "FirstStageFeatureExtractor/resnet_v1_50/conv1/weights");
  EXPECT_EQ(name("first_stage_extractor.layer3.5.bn3.running_var"),
            "FirstStageFeatureExtractor/resnet_v1_50/block3/unit_6/bottleneck_v1/conv3/BatchNorm/moving_variance");
  EXPECT_EQ(name("second_stage_extractor.0.downsample.0.weight"),
            "SecondStageFeatureExtractor/resnet_v1_50/block4/unit_1/bottleneck_v1/shortcut/weights");
  EXPECT_EQ(name("rpn_conv.weight"), "Conv/weights");
  EXPECT_EQ(name("rpn_class.bias"), "FirstStageBoxPredictor/ClassPredictor/biases");
  EXPECT_EQ(name("box_encoding.weight"), "SecondStageBoxPredictor/BoxEncodingPredictor/weights");
  EXPECT_EQ(model->tf_name("box_encoding.weight", false)->layout, models::TfLayout::kDense);
  // A classification checkpoint (restore_from_classification_checkpoint_fn strips the stage
  // scopes): both stages read resnet_v1_50/...; the detection layers are not in it.
  EXPECT_EQ(name("first_stage_extractor.layer1.2.conv2.weight", true),
            "resnet_v1_50/block1/unit_3/bottleneck_v1/conv2/weights");
  EXPECT_EQ(name("second_stage_extractor.2.conv3.weight", true),
            "resnet_v1_50/block4/unit_3/bottleneck_v1/conv3/weights");
  EXPECT_EQ(name("rpn_conv.weight", true), "(none)");
  // Every variable has one name of its own.
  std::set<std::string> seen;
  int named = 0;
  for (const auto& p : model->named_parameters()) {
    const auto t = model->tf_name(p.key(), false);
    ASSERT_TRUE(t) << p.key();
    EXPECT_TRUE(seen.insert(t->name).second) << t->name;
    ++named;
  }
  // conv1 + its batch norm (3), 13 units of 3 convs and 3 batch norms (9 each) and 3 shortcuts
  // (3 each) to block3, block4 (30), the RPN (6) and the box predictor (4).
  EXPECT_EQ(named, 3 + 13 * 9 + 3 * 3 + 30 + 6 + 4);
  EXPECT_TRUE(model->is_prediction_head_parameter("class_logits.weight"));
  EXPECT_FALSE(model->is_prediction_head_parameter("rpn_class.weight"));
}

// faster_rcnn_inception_v2 (models/faster_rcnn_inception_v2_feature_extractor.py): slim's
// inception_v2_base to Mixed_4e (576 channels at stride 16) in the first stage, Mixed_5a..5c
// (1024) on the crops. Trainable variables from slim/nets/inception_v2.py's layer table (conv
// kernels, batch norm gamma and beta): the stem (separable 7x7 of multiplier 8: 1176 + 1536,
// Conv2d_2b 4096, Conv2d_2c 110,592, their batch norms) and Mixed_3b..4e: 4,261,656;
// Mixed_5a..5c: 5,901,632 (together 10,163,288, Inception-v2 without its logits).
TEST(FasterRcnnModel, InceptionV2SplitIsTheOdApis) {
  torch::manual_seed(0);
  FasterRcnnModelOptions o;
  o.feature_extractor = "faster_rcnn_inception_v2";
  o.num_classes = 90;
  o.anchors_per_location = 12;
  o.initial_crop_size = 14;
  FasterRcnnModel model(o);
  EXPECT_EQ(count(*model, "first_stage_extractor."), 4'261'656);
  EXPECT_EQ(count(*model, "second_stage_extractor."), 5'901'632);
  EXPECT_EQ(count(*model, "rpn_conv."), 3 * 3 * 576 * 512 + 512);
  EXPECT_EQ(count(*model, "box_encoding."), 1024 * 360 + 360);
  EXPECT_EQ(count(*model, "class_logits."), 1024 * 91 + 91);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto images = torch::rand({1, 3, 100, 131}) * 2 - 1;
  const auto first = model->first_stage(images);
  EXPECT_EQ(model->feature_map_size(100, 131), (std::pair<int64_t, int64_t>{7, 9}));
  EXPECT_EQ(first.features.sizes(), (std::vector<int64_t>{1, 576, 7, 9}));
  // 14x14 crops, max pooled to 7x7, Mixed_5a halves them: 4x4x1024.
  const auto features = model->box_classifier_features(first.features, torch::tensor({{0.1f, 0.1f, 0.6f, 0.7f}}),
                                                       torch::tensor({int64_t{0}}));
  EXPECT_EQ(features.sizes(), (std::vector<int64_t>{1, 1024, 4, 4}));
  auto name = [&](const std::string& n, bool classification = false) {
    const auto t = model->tf_name(n, classification);
    return t ? t->name : std::string("(none)");
  };
  EXPECT_EQ(name("first_stage_extractor.Mixed_4e.Branch_2.Conv2d_0c_3x3.conv.weight"),
            "FirstStageFeatureExtractor/InceptionV2/Mixed_4e/Branch_2/Conv2d_0c_3x3/weights");
  EXPECT_EQ(name("second_stage_extractor.Mixed_5a.Branch_0.Conv2d_1a_3x3.bn.running_mean"),
            "SecondStageFeatureExtractor/InceptionV2/Mixed_5a/Branch_0/Conv2d_1a_3x3/BatchNorm/moving_mean");
  EXPECT_EQ(name("second_stage_extractor.Mixed_5c.Branch_3.Conv2d_0b_1x1.conv.weight", true),
            "InceptionV2/Mixed_5c/Branch_3/Conv2d_0b_1x1/weights");  // an ImageNet checkpoint's name
  std::set<std::string> seen;
  for (const auto& p : model->named_parameters()) EXPECT_TRUE(seen.insert(name(p.key())).second) << p.key();
  // A mask head on it: the automatic depth from 1024 channels and 90 classes is 256.
  EXPECT_EQ(mask_conv_depth(1024, 90), 256);
}

// faster_rcnn_inception_resnet_v2 (models/faster_rcnn_inception_resnet_v2_feature_extractor.py):
// slim's inception_resnet_v2_base to PreAuxLogits (1088 channels, stride 16 or 8 atrous) in the
// first stage, Mixed_7a .. Conv2d_7b_1x1 (1536) on 17x17 crops without max pool (the samples).
// Counts (tests/models/inception_resnet_v2_test.cc works them from slim's layer table): 26,855,264
// and 27,420,928.
TEST(FasterRcnnModel, InceptionResnetV2SplitIsTheOdApis) {
  torch::manual_seed(0);
  FasterRcnnModelOptions o;
  o.feature_extractor = "faster_rcnn_inception_resnet_v2";
  o.num_classes = 90;
  o.features_stride = 8;
  o.anchors_per_location = 12;
  o.initial_crop_size = 17;
  o.maxpool_kernel_size = o.maxpool_stride = 1;
  FasterRcnnModel model(o);
  EXPECT_EQ(count(*model, "first_stage_extractor."), 26'855'264);
  EXPECT_EQ(count(*model, "second_stage_extractor."), 27'420'928);
  EXPECT_EQ(count(*model, "rpn_conv."), 3 * 3 * 1088 * 512 + 512);
  EXPECT_EQ(count(*model, "class_logits."), 1536 * 91 + 91);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto images = torch::rand({1, 3, 99, 131}) * 2 - 1;
  const auto first = model->first_stage(images);
  EXPECT_EQ(model->feature_map_size(99, 131), (std::pair<int64_t, int64_t>{13, 17}));
  EXPECT_EQ(first.features.sizes(), (std::vector<int64_t>{1, 1088, 13, 17}));
  EXPECT_EQ(first.box_encodings.size(1), 13 * 17 * 12);
  const auto features = model->box_classifier_features(first.features, torch::tensor({{0.1f, 0.1f, 0.6f, 0.7f}}),
                                                       torch::tensor({int64_t{0}}));
  EXPECT_EQ(features.sizes(), (std::vector<int64_t>{1, 1536, 8, 8}));
  auto name = [&](const std::string& n, bool classification = false) {
    const auto t = model->tf_name(n, classification);
    return t ? t->name : std::string("(none)");
  };
  EXPECT_EQ(name("first_stage_extractor.Repeat_1.block17_20.Conv2d_1x1.bias"),
            "FirstStageFeatureExtractor/InceptionResnetV2/Repeat_1/block17_20/Conv2d_1x1/biases");
  EXPECT_EQ(name("second_stage_extractor.Conv2d_7b_1x1.bn.running_var"),
            "SecondStageFeatureExtractor/InceptionResnetV2/Conv2d_7b_1x1/BatchNorm/moving_variance");
  // An ImageNet checkpoint holds the second stage's block8 repeat as Repeat_2.
  EXPECT_EQ(name("second_stage_extractor.Repeat.block8_1.Conv2d_1x1.weight", true),
            "InceptionResnetV2/Repeat_2/block8_1/Conv2d_1x1/weights");
  std::set<std::string> seen;
  for (const auto& p : model->named_parameters()) EXPECT_TRUE(seen.insert(name(p.key())).second) << p.key();
}

// R-FCN (rfcn_resnet101_coco: rfcn_box_predictor depth 1024, crop 18x18, 3x3 bins): block4 on the
// whole stride-16 map, reduce_depth 1x1 2048 -> 1024 (+ bias), refined_locations 1x1 1024 -> 9 * 90
// * 4 and class_predictions 1024 -> 9 * 91 (predictors/rfcn_box_predictor.py), no fully connected
// layers; TF names SecondStageBoxPredictor/<conv>/{weights,biases}.
TEST(FasterRcnnModel, RfcnPredictorIsTheOdApis) {
  torch::manual_seed(0);
  FasterRcnnModelOptions o;
  o.feature_extractor = "faster_rcnn_resnet101";
  o.num_classes = 90;
  o.anchors_per_location = 12;
  o.rfcn = true;
  o.rfcn_crop_height = o.rfcn_crop_width = 18;
  FasterRcnnModel model(o);
  EXPECT_EQ(count(*model, "reduce_depth."), 2048 * 1024 + 1024);
  EXPECT_EQ(count(*model, "refined_locations."), 1024 * 9 * 360 + 9 * 360);
  EXPECT_EQ(count(*model, "class_predictions."), 1024 * 9 * 91 + 9 * 91);
  EXPECT_EQ(count(*model, "box_encoding."), 0);
  EXPECT_EQ(count(*model, "second_stage_extractor."), 14'964'736);  // block4
  model->eval();
  torch::NoGradGuard no_grad;
  const auto first = model->first_stage(torch::rand({2, 3, 64, 80}) * 2 - 1);
  const auto [refined, logits] = model->second_stage(
      first.features, torch::tensor({{0.1f, 0.1f, 0.5f, 0.6f}, {0.f, 0.2f, 1.f, .9f}, {.3f, .3f, .4f, .4f}}),
      torch::tensor({0, 1, 1}, torch::kLong));
  EXPECT_EQ(refined.sizes(), (std::vector<int64_t>{3, 90, 4}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 91}));
  EXPECT_EQ(model->tf_name("reduce_depth.weight", false)->name, "SecondStageBoxPredictor/reduce_depth/weights");
  EXPECT_EQ(model->tf_name("class_predictions.bias", false)->name, "SecondStageBoxPredictor/class_predictions/biases");
  EXPECT_TRUE(model->is_prediction_head_parameter("refined_locations.weight"));
  EXPECT_FALSE(model->is_prediction_head_parameter("reduce_depth.weight"));
}

// MaskRCNNMaskHead (predictors/heads/mask_head.py) of mask_rcnn_resnet50_atrous_coco: depth
// 0 -> 2^round((2 log2 2048 + 3 log2 90) / 5) = 2^round(8.29) = 256; 4 layers: 3 ReLU 3x3
// convolutions of 256 on the 7x7 block4 output bilinearly resized to 33x33, then a 3x3
// convolution to the 90 classes: 2048*256*9 + 256 + 2 * (256*256*9 + 256) + 256*90*9 + 90.
TEST(FasterRcnnModel, MaskHeadIsTheOdApis) {
  EXPECT_EQ(mask_conv_depth(2048, 90), 256);
  EXPECT_EQ(mask_conv_depth(2048, 3), 32);    // (22 + 4.75) / 5 = 5.35
  EXPECT_EQ(mask_conv_depth(1024, 37), 128);  // mask_rcnn_resnet101_pets sets 256 explicitly
  torch::manual_seed(0);
  FasterRcnnModelOptions o;
  o.num_classes = 90;
  o.features_stride = 8;
  o.predict_instance_masks = true;
  o.mask_height = o.mask_width = 33;
  o.mask_conv_depth = 0;
  o.mask_num_conv_layers = 4;
  FasterRcnnModel model(o);
  EXPECT_EQ(count(*model, "mask_convs."), 2048 * 256 * 9 + 256 + 2 * (256 * 256 * 9 + 256) + 256 * 90 * 9 + 90);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto box_features = torch::randn({5, 2048, 7, 7});
  const auto masks = model->mask_predictor(box_features);
  EXPECT_EQ(masks.sizes(), (std::vector<int64_t>{5, 90, 33, 33}));
  // TF names: slim.conv2d's default scopes under SecondStageBoxPredictor, in order; the last
  // convolution (one channel per class) is re-initialised for new classes.
  EXPECT_EQ(model->tf_name("mask_convs.0.weight", false)->name, "SecondStageBoxPredictor/Conv/weights");
  EXPECT_EQ(model->tf_name("mask_convs.3.bias", false)->name, "SecondStageBoxPredictor/Conv_3/biases");
  EXPECT_TRUE(model->is_prediction_head_parameter("mask_convs.3.weight"));
  EXPECT_FALSE(model->is_prediction_head_parameter("mask_convs.2.weight"));
  EXPECT_FALSE(model->tf_name("mask_convs.0.weight", true));  // not in an ImageNet checkpoint

  // The resize is TF's resize_bilinear with align_corners: corners kept, a linear ramp stays
  // linear. With one hidden convolution and the identity at its centre tap, the head is linear
  // and shows it.
  FasterRcnnModelOptions small = o;
  small.num_classes = 1;
  small.mask_height = small.mask_width = 5;
  small.mask_conv_depth = 1;
  small.mask_num_conv_layers = 1;
  small.masks_are_class_agnostic = true;
  FasterRcnnModel linear(small);
  auto& conv = *linear->named_parameters().find("mask_convs.0.weight");
  conv.zero_();
  conv[0][0][1][1] = 1;  // the first channel's centre
  linear->named_parameters().find("mask_convs.0.bias")->zero_();
  auto ramp = torch::zeros({1, 2048, 3, 3});
  ramp[0][0] = torch::tensor({{0.f, 1.f, 2.f}, {0.f, 1.f, 2.f}, {0.f, 1.f, 2.f}});
  const auto out = linear->mask_predictor(ramp);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 1, 5, 5}));
  for (int64_t x = 0; x < 5; ++x) EXPECT_NEAR(out[0][0][2][x].item<float>(), 0.5f * x, 1e-6) << x;

  // The head convolves the small map before resizing (the same linear map): its masks equal the
  // OD API's order, resize_bilinear to 33x33 then the 3x3 convolutions, written out here.
  namespace F = torch::nn::functional;
  auto params = model->named_parameters();
  auto x = F::interpolate(
      box_features,
      F::InterpolateFuncOptions().size(std::vector<int64_t>{33, 33}).mode(torch::kBilinear).align_corners(true));
  for (int i = 0; i < 4; ++i) {
    const auto index = std::to_string(i);
    x = F::conv2d(x, params["mask_convs." + index + ".weight"],
                  F::Conv2dFuncOptions().bias(params["mask_convs." + index + ".bias"]).padding(1));
    if (i < 3) x = torch::relu(x);
  }
  const double scale = x.abs().max().item<double>();
  EXPECT_GT(scale, 1e-3);
  EXPECT_LT((masks - x).abs().max().item<double>(), 1e-4 * scale);
}

}  // namespace
}  // namespace orchard::detect
