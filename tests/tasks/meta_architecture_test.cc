// The detection meta-architecture registry: pipeline.config's `model` oneof case picks the
// parser, the parsed configuration builds the model DetectionTask trains, and an unregistered
// case is refused by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

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

}  // namespace
}  // namespace orchard::tasks
