#include "orchard/detect/config/shapes_config.h"

#include <gtest/gtest.h>

#include <string>

#include "detect/extractor_types.h"
#include "orchard/core/files.h"
#include "orchard/detect/config/config.h"

namespace orchard::detect {
namespace {

// The `model` cases Orchard registers (detect/meta_arch), with their checks and the feature
// extractors Orchard registers (this test links no libtorch; feature_extractors_test checks the
// lists against the registry).
void validate_pipeline_config(const object_detection::protos::TrainEvalPipelineConfig& c, const std::string& name) {
  detect::validate_pipeline_config(
      c, name,
      {{"ssd", [](const auto& config, auto* problems) { check_ssd_model(config, registered::kSsdTypes, problems); }},
       {"faster_rcnn", [](const auto& config, auto* problems) {
          check_faster_rcnn_model(config, registered::kFasterRcnnTypes, problems);
        }}});
}

TEST(ShapesConfig, IsAValidStrictConfigAndTheCommittedSampleMatches) {
  const std::string text = shapes_pipeline_config("/data/shapes", 64);
  ConfigIssues issues;
  const auto config = parse_pipeline_config(text, "shapes.config", /*strict=*/true, &issues);
  EXPECT_TRUE(issues.unknown.empty());
  EXPECT_TRUE(issues.unimplemented.empty());
  validate_pipeline_config(config, "shapes.config");
  EXPECT_EQ(config.model().ssd().num_classes(), 3);
  EXPECT_EQ(config.model().ssd().image_resizer().fixed_shape_resizer().height(), 96);  // at least 96
  EXPECT_EQ(shapes_pipeline_config("/d", 128).find("height: 128") != std::string::npos, true);
  EXPECT_EQ(config.train_input_reader().tf_record_input_reader().input_path(0),
            "/data/shapes/train-?????"
            "-of-?????");
  // configs/ssd_mobilenet_v2_shapes.config is this text with the placeholder path.
  EXPECT_EQ(read_file(ORCHARD_TEST_FIXTURES "/../../configs/ssd_mobilenet_v2_shapes.config"),
            shapes_pipeline_config("PATH_TO_BE_CONFIGURED", 64));
}

}  // namespace
}  // namespace orchard::detect
