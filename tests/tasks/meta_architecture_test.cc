// The detection meta-architecture registry: pipeline.config's `model` oneof case picks the
// parser, the parsed configuration builds the model DetectionTask trains, and an unregistered
// case is refused by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <memory>

#include "orchard/core/error.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/meta_arch/faster_rcnn.h"
#include "orchard/detect/meta_arch/ssd.h"
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/tasks/detect/fine_tune.h"

namespace orchard::tasks {
namespace {

namespace odp = object_detection::protos;

const std::string kCoco = ORCHARD_TEST_FIXTURES "/../../configs/ssd_mobilenet_v2_coco.config";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Two 64x80 images with three boxes of two classes, for the small two-stage configs below.
data::Batch small_two_stage_batch() {
  data::Batch batch;
  batch.size = 2;
  batch.images = torch::rand({2, 3, 64, 80}) * 2 - 1;
  batch.fields["boxes"] = torch::zeros({2, 3, 4});
  batch.fields["boxes"][0][0] = torch::tensor({0.1f, 0.1f, 0.5f, 0.4f});
  batch.fields["boxes"][0][1] = torch::tensor({0.5f, 0.5f, 0.9f, 0.9f});
  batch.fields["boxes"][1][0] = torch::tensor({0.2f, 0.3f, 0.7f, 0.8f});
  batch.fields["classes"] = torch::tensor({1, 2, 0, 2, 0, 0}, torch::kLong).view({2, 3});
  batch.fields["is_crowd"] = torch::zeros({2, 3}, torch::kBool);
  batch.fields["num_boxes"] = torch::tensor({2, 1}, torch::kLong);
  return batch;
}

TEST(MetaArchitectures, TheModelOneofCasePicksTheRegisteredParser) {
  register_builtin_meta_architectures();
  const auto pipeline = detect::load_pipeline_config(kCoco, /*strict=*/false);
  EXPECT_EQ(meta_architecture_for(pipeline).name, "ssd");

  odp::TrainEvalPipelineConfig frcnn = pipeline;
  frcnn.mutable_model()->mutable_faster_rcnn();  // the oneof moves to faster_rcnn
  EXPECT_EQ(meta_architecture_for(frcnn).name, "faster_rcnn");
  odp::TrainEvalPipelineConfig center_net = pipeline;
  center_net.mutable_model()->mutable_center_net();
  EXPECT_EQ(error_of([&] { meta_architecture_for(center_net); }),
            "model.center_net is not supported; Orchard implements ssd or faster_rcnn");
  EXPECT_EQ(error_of([&] { meta_architecture_for(odp::TrainEvalPipelineConfig()); }),
            "model is not set; Orchard implements ssd or faster_rcnn");
  EXPECT_EQ(error_of([] { register_meta_architecture(ssd_meta_architecture()); }),
            "meta-architecture 'ssd' is registered twice");
}

// validate_pipeline_config learns the implemented `model` cases from the registry, and each
// registered entry checks its own message.
TEST(MetaArchitectures, ValidationAsksTheRegistry) {
  const auto pipeline = detect::load_pipeline_config(kCoco, /*strict=*/false);
  validate_detection_pipeline(pipeline, "coco.config");  // no throw
  odp::TrainEvalPipelineConfig center_net = pipeline;
  center_net.mutable_model()->mutable_center_net();
  EXPECT_EQ(error_of([&] { validate_detection_pipeline(center_net, "cn.config"); }),
            "cn.config: model.center_net is not supported; Orchard implements ssd or faster_rcnn");
  odp::TrainEvalPipelineConfig no_classes = pipeline;
  no_classes.mutable_model()->mutable_ssd()->set_num_classes(0);
  EXPECT_EQ(error_of([&] { validate_detection_pipeline(no_classes, "ssd.config"); }),
            "ssd.config: model.ssd.num_classes must be > 0 (got 0)");
  odp::TrainEvalPipelineConfig frcnn = pipeline;
  frcnn.mutable_model()->mutable_faster_rcnn()->set_num_classes(0);
  EXPECT_NE(error_of([&] {
              validate_detection_pipeline(frcnn, "frcnn.config");
            }).find("frcnn.config: model.faster_rcnn.num_classes must be > 0 (got 0)"),
            std::string::npos);
  // A case the library is not told about is refused, whatever its message holds.
  EXPECT_EQ(error_of([&] {
              detect::validate_pipeline_config(pipeline, "coco.config", {{"faster_rcnn", nullptr}});
            }),
            "coco.config: model.ssd is not supported; Orchard implements faster_rcnn");
}

TEST(MetaArchitectures, SsdModelCocoBuildsThroughTheTask) {
  const auto pipeline = detect::load_pipeline_config(kCoco, /*strict=*/false);
  const auto config = detection_config(pipeline, /*channels_last=*/false);
  EXPECT_EQ(config.num_classes, 90);
  EXPECT_EQ(config.input.height, 300);
  EXPECT_DOUBLE_EQ(config.l2_weight, static_cast<double>(4e-5f));  // conv_hyperparams' l2_regularizer (a float)
  torch::manual_seed(0);
  DetectionTask task(config);
  auto& ssd = dynamic_cast<SsdMetaArchitecture&>(task.meta_architecture());
  EXPECT_EQ(ssd.anchors().size(0), 1917);  // 19x19x3 + (10x10 + 5x5 + 3x3 + 2x2 + 1x1) x 6
  EXPECT_EQ(ssd.config().score_converter, "SIGMOID");
  EXPECT_EQ(task.module().get(), ssd.model().ptr().get());
  // The checkpoint signature of the SSD task before the registry (checkpoints stay compatible).
  const std::map<std::string, std::string> expected = {{"task", "detect"},
                                                       {"model", "ssd_mobilenet_v2"},
                                                       {"num_classes", "90"},
                                                       {"depth_multiplier", "1"},
                                                       {"num_anchors", "1917"}};
  EXPECT_EQ(task.signature(), expected);
  EXPECT_EQ(ssd.describe(), "ssd_mobilenet_v2 (90 classes, 1917 anchors)");
  EXPECT_TRUE(ssd.is_prediction_head_parameter("box_heads.0.weight"));
  EXPECT_FALSE(ssd.is_prediction_head_parameter("backbone.features.0.0.weight"));

  // forward: box codes, and background + 90 class logits, per anchor.
  task.module()->eval();
  torch::NoGradGuard no_grad;
  const auto out = task.forward(torch::zeros({1, 3, 300, 300}));
  const auto& ssd_out = outputs_as<SsdOutputs>(*out);
  EXPECT_EQ(ssd_out.box_encodings.sizes(), (std::vector<int64_t>{1, 1917, 4}));
  EXPECT_EQ(ssd_out.class_logits.sizes(), (std::vector<int64_t>{1, 1917, 91}));
  EXPECT_EQ(task.postprocess(*out).size(), 1u);
}

// eval_config reaches the task's evaluation: ssd_mobilenet_v2_oid_v4 evaluates with the Open Images
// challenge metric and empty image labels left empty (image_classes_field_map_empty_to_ones: false);
// a config without the field maps them to every class, the proto's default.
TEST(MetaArchitectures, OidSampleEvaluationSettingsReachTheTask) {
  const auto oid = detect::load_pipeline_config(ORCHARD_TEST_FIXTURES "/od_api_configs/ssd_mobilenet_v2_oid_v4.config",
                                                /*strict=*/false);
  const auto config = detection_config(oid, /*channels_last=*/false);
  EXPECT_EQ(config.metrics_sets, std::vector<std::string>{"oid_challenge_detection_metrics"});
  EXPECT_FALSE(config.empty_image_labels_mean_all);
  EXPECT_TRUE(
      detection_config(detect::load_pipeline_config(kCoco, /*strict=*/false), false).empty_image_labels_mean_all);
}

// The OD API's SSD sample configs that validate build their model through the task, with the
// anchors the OD API generates: ssd_anchor_generator at 300x300 19x19x3 + (10x10 + 5x5 + 3x3 +
// 2x2 + 1x1) x 6 = 1917 (320x320: 20x20x3 + ... = 2034; without reduce_boxes_in_lowest_layer
// 6 everywhere: 3000; ssd_inception_v3's 'VALID' stem: 35x35x3 + (17^2 + 8^2 + 4^2 + 2^2 + 1) x 6 =
// 5919); multiscale_anchor_generator levels 3..7 at 2 scales x 3 aspect ratios:
// sum (side / 2^l)^2 x 6 (640: 51150, 256: 8184; the OID ResNet-101 config's levels 2..7 at 512:
// (128^2 + 64^2 + 32^2 + 16^2 + 8^2 + 4^2) x 6 = 131040).
TEST(MetaArchitectures, TheOdApiSampleConfigsBuildWithTheirAnchors) {
  const std::map<std::string, std::pair<std::string, int64_t>> expected = {
      {"embedded_ssd_mobilenet_v1_coco", {"embedded_ssd_mobilenet_v1", 1278}},
      {"facessd_mobilenet_v2_quantized_320x320_open_image_v4", {"ssd_mobilenet_v2", 2034}},
      {"ssd_inception_v2_coco", {"ssd_inception_v2", 1917}},
      {"ssd_inception_v3_coco", {"ssd_inception_v3", 5919}},
      {"ssd_inception_v3_pets", {"ssd_inception_v3", 5919}},
      {"ssd_mobilenet_v1_0.75_depth_300x300_coco14_sync", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_0.75_depth_quantized_300x300_coco14_sync", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_0.75_depth_quantized_300x300_pets_sync", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_300x300_coco14_sync", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_coco", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_focal_loss_pets", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_focal_loss_pets_inference", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_fpn_shared_box_predictor_640x640_coco14_sync", {"ssd_mobilenet_v1_fpn", 51150}},
      {"ssd_mobilenet_v1_pets", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v1_ppn_shared_box_predictor_300x300_coco14_sync", {"ssd_mobilenet_v1_ppn", 3000}},
      {"ssd_mobilenet_v1_quantized_300x300_coco14_sync", {"ssd_mobilenet_v1", 1917}},
      {"ssd_mobilenet_v2_coco_per_class_metric", {"ssd_mobilenet_v2", 1917}},
      // keep_aspect_ratio_resizer 320..640: the max_dimension square, explicit strides 16..512:
      // 40x40x3 + (20^2 + 10^2 + 5^2 + 3^2 + 2^2) x 6 (images have anchors of their own size).
      {"ssd_mobilenet_v2_fullyconv_coco", {"ssd_mobilenet_v2", 8028}},
      {"ssd_mobilenet_v2_fpnlite_quantized_shared_box_predictor_256x256_depthmultiplier_75_coco14_sync",
       {"ssd_mobilenet_v2_fpn", 8184}},
      {"ssd_mobilenet_v2_mnasfpn_shared_box_predictor_320x320_coco_sync", {"ssd_mobilenet_v2_mnasfpn", 19125}},
      {"ssd_mobilenet_v2_oid_v4", {"ssd_mobilenet_v2", 1917}},
      {"ssd_mobilenet_v2_pets_keras", {"ssd_mobilenet_v2", 1917}},
      {"ssd_mobilenet_v2_quantized_300x300_coco", {"ssd_mobilenet_v2", 1917}},
      {"ssd_resnet101_v1_fpn_shared_box_predictor_oid_512x512_sync", {"ssd_resnet101_v1_fpn", 131040}},
      {"ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco14_sync", {"ssd_resnet50_v1_fpn", 51150}},
      {"ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco17_sync_keras", {"ssd_resnet50_v1_fpn", 51150}},
      {"ssdlite_mobiledet_cpu_320x320_coco_sync_4x4", {"ssd_mobiledet_cpu", 2034}},
      {"ssdlite_mobiledet_dsp_320x320_coco_sync_4x4", {"ssd_mobiledet_dsp", 2034}},
      {"ssdlite_mobiledet_edgetpu_320x320_coco_sync_4x4", {"ssd_mobiledet_edgetpu", 2034}},
      {"ssdlite_mobiledet_gpu_320x320_coco_sync_4x4", {"ssd_mobiledet_gpu", 2034}},
      {"ssdlite_mobilenet_edgetpu_320x320_coco", {"ssd_mobilenet_edgetpu", 2034}},
      {"ssdlite_mobilenet_edgetpu_320x320_coco_quant", {"ssd_mobilenet_edgetpu", 2034}},
      {"ssdlite_mobilenet_v1_coco", {"ssd_mobilenet_v1", 1917}},
      {"ssdlite_mobilenet_v2_coco", {"ssd_mobilenet_v2", 1917}},
      {"ssdlite_mobilenet_v3_large_320x320_coco", {"ssd_mobilenet_v3_large", 2034}},
      {"ssdlite_mobilenet_v3_small_320x320_coco", {"ssd_mobilenet_v3_small", 2034}},
  };
  for (const auto& [name, want] : expected) {
    const auto pipeline =
        detect::load_pipeline_config(ORCHARD_TEST_FIXTURES "/od_api_configs/" + name + ".config", /*strict=*/false);
    validate_detection_pipeline(pipeline, name);
    DetectionTask task(detection_config(pipeline, /*channels_last=*/false));
    auto& ssd = dynamic_cast<SsdMetaArchitecture&>(task.meta_architecture());
    EXPECT_EQ(ssd.name(), want.first) << name;
    EXPECT_EQ(ssd.anchors().size(0), want.second) << name;
  }
}

// faster_rcnn_resnet50_coco builds its model through the task: keep_aspect_ratio_resizer 600..1024
// (each image at its own size, anchors generated for it: 12 per cell of the stride-16 map).
TEST(MetaArchitectures, FasterRcnnResnet50CocoBuildsThroughTheTask) {
  const auto pipeline = detect::load_pipeline_config(
      ORCHARD_TEST_FIXTURES "/od_api_two_stage_configs/faster_rcnn_resnet50_coco.config", /*strict=*/false);
  const auto config = detection_config(pipeline, /*channels_last=*/false);
  EXPECT_EQ(config.num_classes, 90);
  ASSERT_TRUE(config.input.keep_aspect_ratio);
  EXPECT_EQ(config.input.keep_aspect_ratio->min_dimension, 600);
  DetectionTask task(config);
  auto& frcnn = dynamic_cast<FasterRcnnMetaArchitecture&>(task.meta_architecture());
  EXPECT_EQ(frcnn.name(), "faster_rcnn_resnet50");
  EXPECT_EQ(frcnn.describe(),
            "faster_rcnn faster_rcnn_resnet50 (90 classes, stride 16, 12 anchors per location, 300 proposals)");
  // 600x800: a 38x50 map.
  const auto anchors = frcnn.anchors(600, 800);
  EXPECT_EQ(anchors.size(0), 38 * 50 * 12);
  // The first cell's first anchor: aspect ratio 0.5, scale 0.25 of 256: 64 / sqrt(0.5) high,
  // 64 * sqrt(0.5) wide, centred at the origin.
  EXPECT_NEAR(anchors[0][0].item<float>(), -32 * std::sqrt(2.0f), 1e-3);
  EXPECT_NEAR(anchors[0][1].item<float>(), -16 * std::sqrt(2.0f), 1e-3);
  const std::map<std::string, std::string> expected = {{"task", "detect"},
                                                       {"model", "faster_rcnn_resnet50"},
                                                       {"num_classes", "90"},
                                                       {"features_stride", "16"},
                                                       {"anchors_per_location", "12"}};
  EXPECT_EQ(task.signature(), expected);
  EXPECT_EQ(error_of([&] { frcnn.export_graph("onnx", "/tmp/never.onnx", {}); }).rfind("ONNX export of faster_rcnn", 0),
            0u);
}

// One training step and one inference of a small Faster R-CNN through the task: the four
// losses, gradients to both stages, detections inside the image.
// A small Faster R-CNN (ResNet-50, 64x80 input, 12 proposals, 8 sampled).
const std::string kSmallFasterRcnn = R"(
model { faster_rcnn {
  num_classes: 2
  image_resizer { fixed_shape_resizer { height: 64 width: 80 } }
  feature_extractor { type: "faster_rcnn_resnet50" }
  first_stage_anchor_generator { grid_anchor_generator {
    height: 32 width: 32 scales: [0.5, 1.0] aspect_ratios: [1.0] height_stride: 16 width_stride: 16 } }
  first_stage_max_proposals: 12
  initial_crop_size: 4
  maxpool_kernel_size: 2
  maxpool_stride: 2
  second_stage_box_predictor { mask_rcnn_box_predictor { } }
  second_stage_batch_size: 8
  second_stage_post_processing {
    batch_non_max_suppression { score_threshold: 0.0 iou_threshold: 0.6 max_detections_per_class: 5 max_total_detections: 5 }
    score_converter: SOFTMAX }
} }
train_config { optimizer { adam_optimizer { learning_rate { constant_learning_rate { learning_rate: 0.001 } } } } }
train_input_reader { tf_record_input_reader { input_path: "x" } }
)";

// The task of a small config text (validated, 3 boxes per image), its weights from seed 3.
std::unique_ptr<DetectionTask> small_task(const std::string& text) {
  const odp::TrainEvalPipelineConfig pipeline = detect::parse_pipeline_config(text, "small.config", /*strict=*/true);
  validate_detection_pipeline(pipeline, "small.config");
  auto config = detection_config(pipeline, /*channels_last=*/false);
  config.input.max_boxes = 3;
  torch::manual_seed(3);
  return std::make_unique<DetectionTask>(config);
}

TEST(MetaArchitectures, FasterRcnnTrainsAndDetectsThroughTheTask) {
  auto owned = small_task(kSmallFasterRcnn);
  DetectionTask& task = *owned;
  data::Batch batch = small_two_stage_batch();
  task.module()->train();
  const auto outputs = task.forward(batch, Pass::kTrain);
  const auto loss = task.loss(*outputs, batch, 2);
  for (const char* name : {"RPNLoss/localization_loss", "RPNLoss/objectness_loss",
                           "BoxClassifierLoss/localization_loss", "BoxClassifierLoss/classification_loss"}) {
    ASSERT_TRUE(loss.terms.count(name)) << name;
    EXPECT_TRUE(std::isfinite(loss.terms.at(name).item<double>())) << name;
  }
  EXPECT_GT(loss.terms.at("BoxClassifierLoss/classification_loss").item<double>(), 0.1);  // ln 3 at the start
  loss.total().backward();
  for (const auto& p : task.module()->named_parameters())
    if (p.key() == "rpn_conv.weight" || p.key() == "class_logits.weight" || p.key() == "box_encoding.weight" ||
        p.key() == "first_stage_extractor.conv1.weight") {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
    }

  task.module()->eval();
  torch::NoGradGuard no_grad;
  const auto inference = task.forward(batch.images);
  const auto detections = task.postprocess(*inference);
  ASSERT_EQ(detections.size(), 2u);
  for (const auto& d : detections) {
    EXPECT_LE(d.boxes.size(0), 5);
    if (d.boxes.numel() > 0) {
      EXPECT_GE(d.boxes.min().item<float>(), 0.0f);
      EXPECT_LE(d.boxes.max().item<float>(), 1.0f);
      EXPECT_GE(d.classes.min().item<int64_t>(), 1);
      EXPECT_LE(d.classes.max().item<int64_t>(), 2);
    }
  }
}

// hard_example_miner: every one of the 12 proposals reaches the second stage (no sampling; the
// outputs hold 12 slots per image) and the loss sums the mined ones (hand-worked in
// detect/box_classifier_test.cc); gradients reach the box classifier.
// fine_tune_checkpoint_type "classification" restores what the meta-architecture's feature
// extractor says the ImageNet classifier has: SSD's base network (by its TF-Slim names without the
// FeatureExtractor/ scope), Faster R-CNN's first- and second-stage extractor layers (resnet_v1_50/...,
// block4 included), never the RPN or the box predictor. (Faster R-CNN restored nothing before: the
// selection looked for SSD's "backbone." prefix.)
TEST(MetaArchitectures, ClassificationFineTuneRestoresTheFeatureExtractorOfEither) {
  const auto restored = [](DetectionTask& task) {
    const auto selection = fine_tune_selection(task, "classification", /*load_all=*/false);
    const auto tf = task.meta_architecture().tf_name_map("classification");
    std::map<std::string, std::string> names;  // parameter -> TF name
    for (const auto& p : task.module()->named_parameters()) {
      if (selection.skip(p.key())) continue;
      const auto n = tf(p.key());
      names[p.key()] = n ? n->name : "(none)";
    }
    return names;
  };
  auto frcnn = small_task(kSmallFasterRcnn);
  const auto two_stage = restored(*frcnn);
  ASSERT_FALSE(two_stage.empty());
  bool block4 = false;
  for (const auto& [name, tf] : two_stage) {
    EXPECT_TRUE(name.rfind("first_stage_extractor.", 0) == 0 || name.rfind("second_stage_extractor.", 0) == 0) << name;
    EXPECT_EQ(tf.rfind("resnet_v1_50/", 0), 0u) << name << " -> " << tf;
    block4 = block4 || tf.rfind("resnet_v1_50/block4/", 0) == 0;
  }
  EXPECT_TRUE(block4);
  EXPECT_GT(two_stage.size(), 100u);  // ResNet-50's convolutions and batch norms
  for (const auto& p : frcnn->module()->named_parameters()) {
    if (p.key().rfind("rpn_", 0) == 0 || p.key().rfind("box_encoding", 0) == 0 ||
        p.key().rfind("class_logits", 0) == 0) {
      EXPECT_FALSE(two_stage.count(p.key())) << p.key();
    }
  }

  torch::manual_seed(0);
  DetectionTask ssd(detection_config(detect::load_pipeline_config(kCoco, /*strict=*/false), /*channels_last=*/false));
  const auto one_stage = restored(ssd);
  ASSERT_FALSE(one_stage.empty());
  const auto selection = fine_tune_selection(ssd, "classification", false);
  for (const auto& [name, tf] : one_stage) {
    EXPECT_EQ(name.rfind("backbone.", 0), 0u) << name;
    EXPECT_EQ(tf.rfind("MobilenetV2/", 0), 0u) << name << " -> " << tf;
    EXPECT_EQ(selection.source_name(name), name.substr(std::string("backbone.").size()));
  }
}

TEST(MetaArchitectures, FasterRcnnHardExampleMinerTakesEveryProposal) {
  std::string text = kSmallFasterRcnn;
  const std::string sampled = "second_stage_batch_size: 8";
  text.replace(text.find(sampled), sampled.size(), sampled + "\n  hard_example_miner { num_hard_examples: 3 }");
  auto owned = small_task(text);
  DetectionTask& task = *owned;
  data::Batch batch = small_two_stage_batch();
  task.module()->train();
  const auto outputs = task.forward(batch, Pass::kTrain);
  const auto loss = task.loss(*outputs, batch, 2);
  const double classification = loss.terms.at("BoxClassifierLoss/classification_loss").item<double>();
  EXPECT_TRUE(std::isfinite(classification));
  EXPECT_GT(classification, 0.0);
  loss.total().backward();
  const auto params = task.module()->named_parameters();
  ASSERT_TRUE(params["class_logits.weight"].grad().defined());
  EXPECT_GT(params["class_logits.weight"].grad().abs().sum().item<double>(), 0);
  // Without the miner the same model's outputs hold 8 slots per image: with it 12.
  auto sampled_task = small_task(kSmallFasterRcnn);
  sampled_task->module()->train();
  const auto sampled_outputs = sampled_task->forward(batch, Pass::kTrain);
  const auto& mined = outputs_as<FasterRcnnOutputs>(*outputs);
  const auto& sampled_fields = outputs_as<FasterRcnnOutputs>(*sampled_outputs);
  const int64_t k = 2;
  EXPECT_EQ(mined.proposal_boxes.sizes(), (std::vector<int64_t>{2, 12, 4}));
  EXPECT_EQ(mined.refined_box_encodings.sizes(), (std::vector<int64_t>{2, 12, k, 4}));
  EXPECT_EQ(mined.class_logits.sizes(), (std::vector<int64_t>{2, 12, k + 1}));
  EXPECT_EQ(sampled_fields.proposal_boxes.sizes(), (std::vector<int64_t>{2, 8, 4}));
  EXPECT_EQ(sampled_fields.refined_box_encodings.sizes(), (std::vector<int64_t>{2, 8, k, 4}));
  EXPECT_EQ(sampled_fields.class_logits.sizes(), (std::vector<int64_t>{2, 8, k + 1}));
}

// faster_rcnn_resnet101_ava_v2.1's multi-label training: second_stage_classification_loss
// weighted_sigmoid and train_config.merge_multiple_label_boxes. Two boxes of the same coordinates
// with labels 1 and 2 in each image: merged, the proposals on them learn both labels (k-hot
// sigmoid targets; hand-worked in detect/box_classifier_test.cc), so only the box classifier's
// classification loss changes; the RPN's losses and the box regression stay as they were.
TEST(MetaArchitectures, FasterRcnnMultiLabelBoxesMergeForTheSigmoidLoss) {
  std::string sigmoid = kSmallFasterRcnn;
  const std::string converter = "score_converter: SOFTMAX }";
  sigmoid.replace(sigmoid.find(converter), converter.size(),
                  "score_converter: SIGMOID }\n  second_stage_classification_loss { weighted_sigmoid { "
                  "anchorwise_output: true } }");
  std::string merged = sigmoid;
  const std::string train = "train_config {";
  merged.replace(merged.find(train), train.size(), train + " merge_multiple_label_boxes: true");
  // The sample config parses to the sigmoid loss and the merge.
  register_builtin_meta_architectures();
  const auto ava = detect::load_pipeline_config(
      ORCHARD_TEST_FIXTURES "/od_api_two_stage_configs/faster_rcnn_resnet101_ava_v2.1.config", /*strict=*/true);
  const auto parsed = meta_architecture_for(ava).parse(ava);
  const auto& ava_config = dynamic_cast<const FasterRcnnConfig&>(*parsed.config);
  EXPECT_TRUE(ava_config.second_stage.sigmoid);
  EXPECT_TRUE(ava_config.merge_multiple_label_boxes);
  EXPECT_EQ(ava_config.score_converter, "SIGMOID");
  EXPECT_FALSE(
      dynamic_cast<const FasterRcnnConfig&>(
          *meta_architecture_for(ava).parse(detect::parse_pipeline_config(kSmallFasterRcnn, "small", true)).config)
          .second_stage.sigmoid);

  data::Batch batch = small_two_stage_batch();
  for (int64_t i = 0; i < 2; ++i) {  // anchor-sized boxes (32x32 at stride 16), each twice
    const auto box = i == 0 ? torch::tensor({0.f, 0.f, 0.5f, 0.4f}) : torch::tensor({0.25f, 0.2f, 0.75f, 0.6f});
    batch.fields["boxes"][i][0] = box;
    batch.fields["boxes"][i][1] = box;
    batch.fields["classes"][i][0] = 1;
    batch.fields["classes"][i][1] = 2;
    batch.fields["num_boxes"][i] = 2;
  }
  auto softmax_task = small_task(kSmallFasterRcnn), sigmoid_task = small_task(sigmoid),
       merged_task = small_task(merged);
  merged_task->module()->train();
  torch::manual_seed(7);
  const auto outputs = merged_task->forward(batch, Pass::kTrain);  // the same fields for all three
  const auto softmax_loss = softmax_task->loss(*outputs, batch, 2);
  const auto sigmoid_loss = sigmoid_task->loss(*outputs, batch, 2);
  const auto merged_loss = merged_task->loss(*outputs, batch, 2);
  const auto term = [](const auto& l, const char* name) { return l.terms.at(name).template item<double>(); };
  for (const char* name :
       {"RPNLoss/localization_loss", "RPNLoss/objectness_loss", "BoxClassifierLoss/localization_loss"}) {
    EXPECT_DOUBLE_EQ(term(merged_loss, name), term(sigmoid_loss, name)) << name;
    EXPECT_DOUBLE_EQ(term(merged_loss, name), term(softmax_loss, name)) << name;
  }
  EXPECT_GT(term(merged_loss, "BoxClassifierLoss/localization_loss"), 0);  // positives were sampled
  // (The untrained head's logits are large, where sigmoid and softmax cross entropies nearly agree:
  // detect/box_classifier_test.cc holds them apart by hand.)
  const char* cls = "BoxClassifierLoss/classification_loss";
  EXPECT_GT(std::abs(term(merged_loss, cls) - term(sigmoid_loss, cls)), 1e-3 * term(sigmoid_loss, cls));
  // Evaluation's loss (outputs not of training's sampled proposals) does not merge: the OD API
  // merges training's input only.
  merged_task->module()->eval();
  torch::NoGradGuard no_grad;
  const auto eval_outputs = merged_task->forward(batch.images);
  EXPECT_FALSE(outputs_as<FasterRcnnOutputs>(*eval_outputs).training);
  EXPECT_DOUBLE_EQ(term(merged_task->loss(*eval_outputs, batch, 2), cls),
                   term(sigmoid_task->loss(*eval_outputs, batch, 2), cls));
}

// The small Faster R-CNN with Mask R-CNN's head (6x6 masks, one ReLU conv before the mask conv,
// number_of_stages 3, mask loss weight 4) and its records' masks.
std::string small_mask_rcnn_config() {
  std::string text = kSmallFasterRcnn;
  const auto replace = [&](const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
  };
  replace("second_stage_box_predictor { mask_rcnn_box_predictor { } }", R"(number_of_stages: 3
  second_stage_box_predictor { mask_rcnn_box_predictor {
    predict_instance_masks: true mask_height: 6 mask_width: 6 mask_prediction_conv_depth: 0
    mask_prediction_num_conv_layers: 2
    conv_hyperparams { op: CONV initializer { truncated_normal_initializer { stddev: 0.01 } } } } }
  second_stage_mask_prediction_loss_weight: 4.0)");
  replace(R"(input_path: "x" } })", R"(input_path: "x" } load_instance_masks: true mask_type: PNG_MASKS })");
  return text;
}

// Mask R-CNN through the task: the mask loss of the sampled positives (sigmoid cross entropy
// against crops of their masks; hand-worked in detect/box_classifier_test.cc), gradients into the mask head and the
// backbone, the loss falling as the head fits one batch, and masks for the final detections at inference
// (number_of_stages 3).
TEST(MetaArchitectures, MaskRcnnTrainsAndPredictsMasksThroughTheTask) {
  auto owned = small_task(small_mask_rcnn_config());
  DetectionTask& task = *owned;
  EXPECT_NE(task.meta_architecture().describe().find("6x6 masks"), std::string::npos);
  data::Batch batch = small_two_stage_batch();
  // Each object's mask: the left half of its box (rows and columns in pixels of 64x80).
  auto masks = torch::zeros({2, 3, 64, 80}, torch::kBool);
  masks[0][0].slice(0, 6, 32).slice(1, 8, 20).fill_(true);
  masks[0][1].slice(0, 32, 58).slice(1, 40, 56).fill_(true);
  masks[1][0].slice(0, 13, 45).slice(1, 24, 44).fill_(true);
  batch.fields["masks"] = masks;

  task.module()->train();
  torch::optim::Adam adam(task.module()->parameters(), torch::optim::AdamOptions(1e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 25; ++step) {
    const auto outputs = task.forward(batch, Pass::kTrain);
    const auto loss = task.loss(*outputs, batch, 2);
    ASSERT_TRUE(loss.terms.count("BoxClassifierLoss/mask_loss"));
    const double mask = loss.terms.at("BoxClassifierLoss/mask_loss").item<double>();
    ASSERT_TRUE(std::isfinite(mask));
    if (step == 0) {
      first = mask;
      EXPECT_GT(mask, 0.5);
      adam.zero_grad();
      loss.total().backward();
      for (const char* name : {"mask_convs.0.weight", "mask_convs.1.weight", "first_stage_extractor.conv1.weight"}) {
        const auto& grad = task.module()->named_parameters()[name].grad();
        ASSERT_TRUE(grad.defined()) << name;
        EXPECT_GT(grad.abs().sum().item<double>(), 0) << name;
      }
      adam.step();
      continue;
    }
    last = mask;
    adam.zero_grad();
    loss.total().backward();
    adam.step();
  }
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;  // the head learns the half-box masks

  // A batch without masks cannot train a mask head: the error says what to set.
  data::Batch no_masks = batch;
  no_masks.fields.erase("masks");
  try {
    task.forward(no_masks, Pass::kTrain);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("load_instance_masks: true"), std::string::npos) << e.what();
  }

  task.module()->eval();
  torch::NoGradGuard no_grad;
  const auto detections = task.postprocess(*task.forward(batch.images));
  ASSERT_EQ(detections.size(), 2u);
  int64_t found = 0;
  for (const auto& d : detections) {
    ASSERT_TRUE(d.masks.defined());
    ASSERT_EQ(d.masks.dim(), 3);
    EXPECT_EQ(d.masks.size(0), d.boxes.size(0));
    EXPECT_LE(d.boxes.size(0), 5);
    found += d.boxes.size(0);
    if (d.boxes.size(0) == 0) continue;
    EXPECT_EQ(d.masks.size(1), 6);
    EXPECT_GE(d.masks.min().item<float>(), 0.0f);  // probabilities
    EXPECT_LE(d.masks.max().item<float>(), 1.0f);
    EXPECT_GE(d.boxes.min().item<float>(), 0.0f);
    EXPECT_LE(d.boxes.max().item<float>(), 1.0f);
  }
  EXPECT_GT(found, 0);

  // Evaluation's mask loss (Pass::kEval with the batch's masks; the OD API's
  // _get_mask_proposal_boxes_and_classes): each detection matched to the ground truth at IoU 0.5,
  // the mask logits of the *matched* class against the matched mask cropped at the detection,
  // the mean per pixel of the matched ones, times the weight 4. Recomputed here from the
  // detections with the model's own mask head. The detections are inference's. The ground truth
  // here: each image's first two detections' boxes, the first with the other class, random masks.
  data::Batch truth = batch;
  truth.fields["masks"] = torch::rand({2, 3, 64, 80}) > 0.5;
  for (int64_t i = 0; i < 2; ++i) {
    const auto& d = detections[static_cast<size_t>(i)];
    const int64_t n = std::min<int64_t>(2, d.boxes.size(0));
    truth.fields["num_boxes"][i] = n;
    for (int64_t g = 0; g < n; ++g) {
      truth.fields["boxes"][i][g] = d.boxes[g];
      const int64_t cls = d.classes[g].item<int64_t>();
      truth.fields["classes"][i][g] = g == 0 ? 3 - cls : cls;
    }
  }
  const auto eval_outputs = task.forward(truth, Pass::kEval);
  const auto& eval_fields = outputs_as<FasterRcnnOutputs>(*eval_outputs);
  EXPECT_FALSE(eval_fields.training);
  ASSERT_TRUE(eval_fields.mask_logits.defined());  // of the 5 detection slots
  EXPECT_EQ(eval_fields.mask_logits.sizes(), (std::vector<int64_t>{2, 5, 36}));
  EXPECT_EQ(eval_fields.mask_targets.sizes(), (std::vector<int64_t>{2, 5, 36}));
  EXPECT_EQ(eval_fields.mask_weights.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(eval_fields.detection_masks.sizes(), (std::vector<int64_t>{2, 5, 6, 6}));
  const auto eval_detections = task.postprocess(*eval_outputs);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(torch::equal(eval_detections[i].boxes, detections[i].boxes));
    EXPECT_TRUE(torch::equal(eval_detections[i].masks, detections[i].masks));
  }
  const auto eval_loss = task.loss(*eval_outputs, truth, 2);
  ASSERT_TRUE(eval_loss.terms.count("BoxClassifierLoss/mask_loss"));
  auto& frcnn = dynamic_cast<FasterRcnnMetaArchitecture&>(task.meta_architecture());
  const auto features = frcnn.model()->first_stage(truth.images).features;
  const auto scale = torch::tensor({64.f, 80.f, 64.f, 80.f});
  double sum = 0;
  int64_t matched = 0, other_class = 0;
  for (int64_t i = 0; i < 2; ++i) {
    const auto& d = eval_detections[static_cast<size_t>(i)];
    if (d.boxes.size(0) == 0) continue;
    const int64_t n = truth.field("num_boxes")[i].item<int64_t>();
    const auto gt = truth.field("boxes")[i].narrow(0, 0, n) * scale;
    const auto gt_classes = truth.field("classes")[i].narrow(0, 0, n);
    const auto boxes = d.boxes * scale;
    std::vector<int64_t> match;
    for (int64_t j = 0; j < boxes.size(0); ++j) {
      int64_t best = -1;
      float best_iou = 0.5f;
      for (int64_t g = 0; g < n; ++g) {
        const auto b = boxes[j], t = gt[g];
        const float ih = std::max(
            0.f, std::min(b[2].item<float>(), t[2].item<float>()) - std::max(b[0].item<float>(), t[0].item<float>()));
        const float iw = std::max(
            0.f, std::min(b[3].item<float>(), t[3].item<float>()) - std::max(b[1].item<float>(), t[1].item<float>()));
        const float area = [](const at::Tensor& x) {
          return (x[2] - x[0]).item<float>() * (x[3] - x[1]).item<float>();
        }(b);
        const float iou = ih * iw / (area + (t[2] - t[0]).item<float>() * (t[3] - t[1]).item<float>() - ih * iw);
        if (iou >= best_iou) {
          if (best < 0 || iou > best_iou) best = g;
          best_iou = std::max(best_iou, iou);
        }
      }
      match.push_back(best);
    }
    const auto match_t = torch::tensor(match, torch::kLong);
    const auto targets = detect::mask_targets(truth.field("masks")[i].narrow(0, 0, n), boxes, match_t, 6, 6);
    const auto logits = frcnn.model()->mask_predictor(frcnn.model()->box_classifier_features(
        features.narrow(0, i, 1), d.boxes, torch::zeros({d.boxes.size(0)}, torch::kLong)));
    for (int64_t j = 0; j < boxes.size(0); ++j) {
      if (match[static_cast<size_t>(j)] < 0) continue;
      const int64_t cls = gt_classes[match[static_cast<size_t>(j)]].item<int64_t>();
      other_class += cls != d.classes[j].item<int64_t>();
      sum += torch::binary_cross_entropy_with_logits(logits[j][cls - 1], targets[j], {}, {}, at::Reduction::Sum)
                 .item<double>();
      ++matched;
    }
  }
  ASSERT_GT(matched, 0);
  EXPECT_GT(other_class, 0);  // those take the logits of their match's class, not their own
  EXPECT_NEAR(eval_loss.terms.at("BoxClassifierLoss/mask_loss").item<double>(), 4.0 * sum / (matched * 36.0),
              1e-4 * sum);
  // Without the batch's masks evaluation reports the box losses only.
  data::Batch eval_no_masks = truth;
  eval_no_masks.fields.erase("masks");
  EXPECT_FALSE(task.loss(*task.forward(eval_no_masks, Pass::kEval), eval_no_masks, 2)
                   .terms.count("BoxClassifierLoss/mask_loss"));
}

// The OD API's true_image_shapes: with each image in part of the input (keep_aspect_ratio_resizer's
// padding: image 0 fills the top half, image 1 the left half), the proposals and Mask R-CNN's
// detections (the third stage, before it crops at them) are clipped to the image, not to the
// input; postprocess normalises them to the image. Read through the named outputs
// (FasterRcnnOutputs).
TEST(MetaArchitectures, FasterRcnnClipsProposalsAndDetectionsToEachImage) {
  auto owned = small_task(small_mask_rcnn_config());
  DetectionTask& task = *owned;
  auto& frcnn = dynamic_cast<FasterRcnnMetaArchitecture&>(task.meta_architecture());
  task.module()->eval();
  torch::NoGradGuard no_grad;
  // The box classifier scores every class 1/3 and refines every proposal to e times its height
  // and width (encodings [0, 0, 5, 5] with the box coder's scales 10, 10, 5, 5), so there are
  // detections whatever the random weights, and they overflow the proposals: only the third
  // stage's clip holds them in the image.
  auto params = frcnn.model()->named_parameters();
  for (const char* name : {"box_encoding.weight", "class_logits.weight", "class_logits.bias"}) params[name].zero_();
  auto& bias = params["box_encoding.bias"];
  bias.copy_(torch::tensor({0.0f, 0.0f, 5.0f, 5.0f}).repeat({bias.size(0) / 4}));
  torch::manual_seed(5);
  const auto images = torch::rand({2, 3, 64, 80}) * 2 - 1;
  InputShape shape;
  shape.height = 64;
  shape.width = 80;
  shape.image_sizes = {{32, 80}, {64, 40}};
  const int64_t a = frcnn.anchors(64, 80).size(0), k = 2, slots = 12;
  const int64_t detections = 5;
  // [y or x coordinate column, limit]: image 0's ymax, image 1's xmax.
  const std::pair<int64_t, double> limit[2] = {{2, 32.0}, {3, 40.0}};

  const auto out = task.forward(images, shape);
  const auto& fields = outputs_as<FasterRcnnOutputs>(*out);
  ASSERT_EQ(fields.rpn_box_encodings.sizes(), (std::vector<int64_t>{2, a, 4}));
  ASSERT_EQ(fields.rpn_objectness.sizes(), (std::vector<int64_t>{2, a, 2}));
  ASSERT_EQ(fields.proposal_boxes.sizes(), (std::vector<int64_t>{2, slots, 4}));
  ASSERT_EQ(fields.proposal_valid.sizes(), (std::vector<int64_t>{2, slots}));
  ASSERT_EQ(fields.refined_box_encodings.sizes(), (std::vector<int64_t>{2, slots, k, 4}));
  ASSERT_EQ(fields.class_logits.sizes(), (std::vector<int64_t>{2, slots, k + 1}));
  ASSERT_EQ(fields.detection_boxes.sizes(), (std::vector<int64_t>{2, detections, 4}));
  ASSERT_EQ(fields.detection_valid.sizes(), (std::vector<int64_t>{2, detections}));
  ASSERT_EQ(fields.detection_masks.sizes(), (std::vector<int64_t>{2, detections, 6, 6}));
  const auto unclipped_out = task.forward(images);  // every image filling the input
  const auto& unclipped = outputs_as<FasterRcnnOutputs>(*unclipped_out);
  for (int64_t i = 0; i < 2; ++i) {
    const auto [column, pixels] = limit[i];
    const auto valid = (fields.proposal_valid[i] > 0.5f).nonzero().view(-1);
    ASSERT_GT(valid.size(0), 0) << i;
    EXPECT_LE(fields.proposal_boxes[i].index_select(0, valid).select(1, column).max().item<double>(), pixels + 1e-3)
        << i;
    // The same network without the sizes proposes boxes in the padding: the clip is what holds them.
    const auto all = (unclipped.proposal_valid[i] > 0.5f).nonzero().view(-1);
    EXPECT_GT(unclipped.proposal_boxes[i].index_select(0, all).select(1, column).max().item<double>(), pixels + 1) << i;
    // Detections, normalised to the input: inside the image's half.
    const auto kept = (fields.detection_valid[i] > 0.5f).nonzero().view(-1);
    ASSERT_GT(kept.size(0), 0) << i;
    EXPECT_LE(fields.detection_boxes[i].index_select(0, kept).select(1, column).max().item<double>(), 0.5 + 1e-6) << i;
  }
  // postprocess: the same detections normalised to each image (x2 along the padded side).
  const auto result = task.postprocess(*out, shape);
  ASSERT_EQ(result.size(), 2u);
  for (int64_t i = 0; i < 2; ++i) {
    const auto kept = (fields.detection_valid[i] > 0.5f).nonzero().view(-1);
    const auto& d = result[static_cast<size_t>(i)];
    ASSERT_EQ(d.boxes.size(0), kept.size(0)) << i;
    ASSERT_TRUE(d.masks.defined());
    const auto scale = i == 0 ? torch::tensor({2.0f, 1.0f, 2.0f, 1.0f}) : torch::tensor({1.0f, 2.0f, 1.0f, 2.0f});
    EXPECT_TRUE(torch::allclose(d.boxes, fields.detection_boxes[i].index_select(0, kept) * scale, 1e-5, 1e-6)) << i;
  }
}

// R-FCN through the task: the same losses as Faster R-CNN, from position-sensitive crops of the
// whole-map block4 scores; gradients reach the score maps and the backbone; it fits one batch.
TEST(MetaArchitectures, RfcnTrainsAndDetectsThroughTheTask) {
  odp::TrainEvalPipelineConfig pipeline = detect::parse_pipeline_config(R"(
model { faster_rcnn {
  num_classes: 2
  image_resizer { fixed_shape_resizer { height: 64 width: 80 } }
  feature_extractor { type: "faster_rcnn_resnet50" }
  first_stage_anchor_generator { grid_anchor_generator {
    height: 32 width: 32 scales: [0.5, 1.0] aspect_ratios: [1.0] height_stride: 16 width_stride: 16 } }
  first_stage_max_proposals: 12
  second_stage_box_predictor { rfcn_box_predictor {
    conv_hyperparams { op: CONV initializer { truncated_normal_initializer { stddev: 0.01 } } }
    crop_height: 6 crop_width: 6 num_spatial_bins_height: 3 num_spatial_bins_width: 3 depth: 64 } }
  second_stage_batch_size: 8
  second_stage_post_processing {
    batch_non_max_suppression { score_threshold: 0.0 iou_threshold: 0.6 max_detections_per_class: 5 max_total_detections: 5 }
    score_converter: SOFTMAX }
} }
train_config { optimizer { adam_optimizer { learning_rate { constant_learning_rate { learning_rate: 0.001 } } } } }
train_input_reader { tf_record_input_reader { input_path: "x" } }
)",
                                                                        "rfcn.config", /*strict=*/true);
  validate_detection_pipeline(pipeline, "rfcn.config");
  auto config = detection_config(pipeline, /*channels_last=*/false);
  config.input.max_boxes = 3;
  torch::manual_seed(3);
  DetectionTask task(config);
  EXPECT_EQ(task.meta_architecture().describe().rfind("faster_rcnn (R-FCN) faster_rcnn_resnet50", 0), 0u)
      << task.meta_architecture().describe();
  data::Batch batch = small_two_stage_batch();
  task.module()->train();
  torch::optim::Adam adam(task.module()->parameters(), torch::optim::AdamOptions(3e-4));
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const auto loss = task.loss(*task.forward(batch, Pass::kTrain), batch, 2);
    const double cls = loss.terms.at("BoxClassifierLoss/classification_loss").item<double>();
    ASSERT_TRUE(std::isfinite(cls));
    ASSERT_TRUE(loss.terms.count("BoxClassifierLoss/localization_loss"));
    adam.zero_grad();
    loss.total().backward();
    if (step == 0) {
      first = cls;
      for (const char* name : {"class_predictions.weight", "refined_locations.weight", "reduce_depth.weight",
                               "first_stage_extractor.conv1.weight"}) {
        const auto& grad = task.module()->named_parameters()[name].grad();
        ASSERT_TRUE(grad.defined()) << name;
        EXPECT_GT(grad.abs().sum().item<double>(), 0) << name;
      }
    }
    last = cls;
    adam.step();
  }
  EXPECT_LT(last, 0.6 * first) << first << " -> " << last;
  task.module()->eval();
  torch::NoGradGuard no_grad;
  const auto detections = task.postprocess(*task.forward(batch.images));
  ASSERT_EQ(detections.size(), 2u);
  for (const auto& d : detections) EXPECT_LE(d.boxes.size(0), 5);
}

// ssd_random_crop_fixed_aspect_ratio (facessd, fullyconv): ssd_random_crop's operations with the
// crop's aspect ratio fixed; without operations the OD API's 7 defaults.
TEST(MetaArchitectures, FixedAspectRatioCropMapsOntoTheSsdCrop) {
  auto pipeline = detect::load_pipeline_config(kCoco, /*strict=*/false);
  auto* steps = pipeline.mutable_train_config()->mutable_data_augmentation_options();
  int crop = -1;
  for (int i = 0; i < steps->size(); ++i)
    if (steps->Get(i).has_ssd_random_crop()) crop = i;
  ASSERT_GE(crop, 0);
  steps->Mutable(crop)->mutable_ssd_random_crop_fixed_aspect_ratio()->set_aspect_ratio(1.5f);
  auto ops = detection_config(pipeline, false).input.augmentation.ssd_random_crop;
  ASSERT_EQ(ops.size(), 7u);
  for (const auto& o : ops) {
    EXPECT_FLOAT_EQ(o.min_aspect_ratio, 1.5f);
    EXPECT_FLOAT_EQ(o.max_aspect_ratio, 1.5f);
    EXPECT_FLOAT_EQ(o.random_coef, 0.15f);
  }
  EXPECT_FLOAT_EQ(ops[3].min_object_covered, 0.5f);
  auto* op = steps->Mutable(crop)->mutable_ssd_random_crop_fixed_aspect_ratio()->add_operations();
  op->set_min_area(0.3f);
  op->set_max_area(0.8f);
  op->set_overlap_thresh(0.4f);
  ops = detection_config(pipeline, false).input.augmentation.ssd_random_crop;
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_FLOAT_EQ(ops[0].min_area, 0.3f);
  EXPECT_FLOAT_EQ(ops[0].max_area, 0.8f);
  EXPECT_FLOAT_EQ(ops[0].overlap_thresh, 0.4f);
  EXPECT_FLOAT_EQ(ops[0].min_aspect_ratio, 1.5f);
  // ... followed by random_crop_to_aspect_ratio.
  EXPECT_FLOAT_EQ(detection_config(pipeline, false).input.augmentation.crop_to_aspect_ratio, 1.5f);
}

// keep_aspect_ratio_resizer (ssd_mobilenet_v2_fullyconv_coco, 320..640): anchors follow each
// input's size as the OD API generates them (explicit strides over the input, base size from
// its shorter side, so anchors stay square in pixels); a batch is cut to its images' size. With
// pad_to_max_dimension the ground truth is realigned into the padded input and detections are
// clipped to each image and normalised to it.
TEST(MetaArchitectures, KeepAspectRatioResizerGivesEachInputItsOwnAnchors) {
  const std::string name = "ssd_mobilenet_v2_fullyconv_coco";
  const auto pipeline =
      detect::load_pipeline_config(ORCHARD_TEST_FIXTURES "/od_api_configs/" + name + ".config", /*strict=*/false);
  validate_detection_pipeline(pipeline, name);
  const auto config = detection_config(pipeline, /*channels_last=*/false);
  ASSERT_TRUE(config.input.keep_aspect_ratio.has_value());
  EXPECT_EQ(config.input.keep_aspect_ratio->min_dimension, 320);
  EXPECT_EQ(config.input.height, 640);  // the sample buffer
  EXPECT_FLOAT_EQ(config.input.augmentation.crop_to_aspect_ratio, 1.0f);
  torch::manual_seed(0);
  DetectionTask task(config);
  EXPECT_TRUE(task.variable_input_size());
  auto& ssd = dynamic_cast<SsdMetaArchitecture&>(task.meta_architecture());
  // 320 x 427: maps 20x27, 10x14, 5x7, 3x4, 2x2, 1x1 -> 20*27*3 + (140 + 35 + 12 + 4 + 1) x 6.
  const auto a = ssd.anchors(320, 427);
  ASSERT_EQ(a.size(0), 2772);
  // The first: centre (8, 8) px (stride 16, offset half of it), scale 0.1 of the shorter side
  // (32 px) in both directions: [-8, -8, 24, 24] px.
  const auto first = a[0];
  EXPECT_NEAR(first[0].item<float>(), -8.f / 320, 1e-6);
  EXPECT_NEAR(first[1].item<float>(), -8.f / 427, 1e-6);
  EXPECT_NEAR(first[2].item<float>(), 24.f / 320, 1e-6);
  EXPECT_NEAR(first[3].item<float>(), 24.f / 427, 1e-6);
  EXPECT_EQ(ssd.anchors(427, 320).size(0), 2772);
  EXPECT_TRUE(ssd.anchors(640, 640).equal(ssd.anchors()));

  // A batch of two 320x427 images in 640x640 buffers is cut to 320x427; images of two sizes
  // cannot share an input (their anchors differ), as in the OD API.
  auto make_batch = [](std::vector<int64_t> sizes) {
    data::Batch batch;
    batch.size = 2;
    batch.images = torch::zeros({2, 3, 640, 640});
    batch.fields["image_size"] = torch::tensor(sizes, torch::kLong).view({2, 2});
    batch.fields["boxes"] = torch::tensor({0.5f, 0.5f, 1.0f, 1.0f, 0.f, 0.f, 0.f, 0.f}).view({2, 1, 4});
    batch.fields["classes"] = torch::ones({2, 1}, torch::kLong);
    batch.fields["is_crowd"] = torch::zeros({2, 1}, torch::kBool);
    batch.fields["num_boxes"] = torch::tensor({1, 0}, torch::kLong);
    return batch;
  };
  data::Batch same = make_batch({320, 427, 320, 427});
  task.prepare_batch(&same);
  EXPECT_EQ(same.images.sizes(), (std::vector<int64_t>{2, 3, 320, 427}));
  data::Batch mixed = make_batch({320, 427, 300, 640});
  mixed.sources = {"a.tfrecord: record 3", "a.tfrecord: record 4"};
  const std::string refused = error_of([&] { task.prepare_batch(&mixed); });
  EXPECT_NE(refused.find("a batch holds images of different sizes (320x427 and 300x640: a.tfrecord: record 4)"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("batch_size: 1, pad_to_max_dimension: true"), std::string::npos) << refused;

  // pad_to_max_dimension: every input is 640x640 with each image top-left in it.
  auto padded_config = config;
  padded_config.input.keep_aspect_ratio->pad_to_max_dimension = true;
  torch::manual_seed(0);
  DetectionTask padded(padded_config);
  EXPECT_FALSE(padded.variable_input_size());
  auto& padded_ssd = dynamic_cast<SsdMetaArchitecture&>(padded.meta_architecture());
  data::Batch batch = make_batch({320, 427, 300, 640});
  padded.prepare_batch(&batch);
  EXPECT_EQ(batch.images.sizes(), (std::vector<int64_t>{2, 3, 640, 640}));
  const InputShape shape = padded.input_shape(batch);
  EXPECT_EQ(shape.height, 640);
  EXPECT_EQ(shape.width, 640);
  ASSERT_EQ(shape.image_sizes.size(), 2u);
  const int64_t A = padded_ssd.anchors().size(0);
  // The loss sees the first image's box in the padded input's frame.
  SsdOutputs outputs;
  const auto predictions = torch::randn({2, A, 4 + 91});
  outputs.box_encodings = predictions.narrow(2, 0, 4);
  outputs.class_logits = predictions.narrow(2, 4, 91);
  const auto loss = padded.loss(outputs, batch, 2);
  const float sy = 320.f / 640.f, sx = 427.f / 640.f;
  const std::vector<at::Tensor> realigned = {torch::tensor({0.5f * sy, 0.5f * sx, sy, sx}).view({1, 4}),
                                             torch::zeros({0, 4})};
  const std::vector<at::Tensor> classes = {torch::ones({1}, torch::kLong), torch::zeros({0}, torch::kLong)};
  const auto direct = padded_ssd.loss(outputs, shape, realigned, classes);
  EXPECT_NEAR(loss.terms.at("localization_loss").item<double>(), direct.at("localization_loss").item<double>(), 1e-5);
  const std::vector<at::Tensor> unaligned = {torch::tensor({0.5f, 0.5f, 1.0f, 1.0f}).view({1, 4}),
                                             torch::zeros({0, 4})};
  EXPECT_GT(std::abs(padded_ssd.loss(outputs, shape, unaligned, classes).at("localization_loss").item<double>() -
                     direct.at("localization_loss").item<double>()),
            1e-3);

  // Postprocess: zero box codes decode to the anchors; one anchor straddling the first image's
  // right edge (x = 427/640) and one wholly in its padding score high for class 1.
  const auto anchors = padded_ssd.anchors();
  int64_t straddling = -1, outside = -1;
  for (int64_t k = 0; k < A && (straddling < 0 || outside < 0); ++k) {
    const float xmin = anchors[k][1].item<float>(), xmax = anchors[k][3].item<float>();
    const float ymin = anchors[k][0].item<float>(), ymax = anchors[k][2].item<float>();
    if (ymin < 0.1f || ymax > 0.4f) continue;  // inside the image's rows (0 .. 0.5)
    if (straddling < 0 && xmin < sx - 0.02f && xmax > sx + 0.02f) straddling = k;
    if (outside < 0 && xmin > sx + 0.05f && xmax < 1.0f) outside = k;
  }
  ASSERT_GE(straddling, 0);
  ASSERT_GE(outside, 0);
  auto logits = torch::full({2, A, 91}, -20.0f);
  logits.index_put_({0, straddling, 1}, 20.0f);
  logits.index_put_({0, outside, 1}, 19.0f);
  SsdOutputs out;
  out.box_encodings = torch::zeros({2, A, 4});
  out.class_logits = logits;
  const auto detections = padded.postprocess(out, shape);
  ASSERT_EQ(detections.size(), 2u);
  ASSERT_EQ(detections[0].boxes.size(0), 1);  // the one in the padding is gone
  const auto box = detections[0].boxes[0];
  const auto want = anchors[straddling];
  // Normalised to the image: y by 320 of 640 rows, x by 427 of 640 columns, clipped at its edge.
  EXPECT_NEAR(box[0].item<float>(), want[0].item<float>() / sy, 1e-5);
  EXPECT_NEAR(box[2].item<float>(), want[2].item<float>() / sy, 1e-5);
  EXPECT_NEAR(box[1].item<float>(), want[1].item<float>() / sx, 1e-5);
  EXPECT_NEAR(box[3].item<float>(), 1.0f, 1e-6);
  EXPECT_EQ(detections[0].classes[0].item<int64_t>(), 1);
}

}  // namespace
}  // namespace orchard::tasks
