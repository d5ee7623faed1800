// The detection meta-architecture registry: pipeline.config's `model` oneof case picks the
// parser, the parsed configuration builds the model DetectionTask trains, and an unregistered
// case is refused by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "orchard/core/error.h"
#include "orchard/detect/config.h"
#include "orchard/proto/object_detection/pipeline.pb.h"
#include "orchard/tasks/detect/detection.h"
#include "orchard/tasks/detect/ssd/ssd.h"

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

TEST(MetaArchitectures, TheModelOneofCasePicksTheRegisteredParser) {
  register_builtin_meta_architectures();
  const auto pipeline = detect::load_pipeline_config(kCoco, /*strict=*/false);
  EXPECT_EQ(meta_architecture_for(pipeline).name, "ssd");

  odp::TrainEvalPipelineConfig frcnn = pipeline;
  frcnn.mutable_model()->mutable_faster_rcnn();  // the oneof moves to faster_rcnn
  EXPECT_EQ(error_of([&] { meta_architecture_for(frcnn); }), "model.faster_rcnn is not supported; Orchard implements ssd");
  EXPECT_EQ(error_of([&] { meta_architecture_for(odp::TrainEvalPipelineConfig()); }),
            "model is not set; Orchard implements ssd");
  EXPECT_EQ(error_of([] { register_meta_architecture(ssd_meta_architecture()); }),
            "meta-architecture 'ssd' is registered twice");
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

  // forward: box codes + background + 90 class logits per anchor.
  task.module()->eval();
  torch::NoGradGuard no_grad;
  const auto out = task.forward(torch::zeros({1, 3, 300, 300}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 1917, 4 + 91}));
  EXPECT_EQ(task.postprocess(out).size(), 1u);
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
    detect::validate_pipeline_config(pipeline, name);
    DetectionTask task(detection_config(pipeline, /*channels_last=*/false));
    auto& ssd = dynamic_cast<SsdMetaArchitecture&>(task.meta_architecture());
    EXPECT_EQ(ssd.name(), want.first) << name;
    EXPECT_EQ(ssd.anchors().size(0), want.second) << name;
  }
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
}

}  // namespace
}  // namespace orchard::tasks
