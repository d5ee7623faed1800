// pipeline.config and label map parsing. Expected values are those written in TF's sample
// configs (research/object_detection/samples/configs) and TF's proto defaults.
#include "orchard/detect/config/config.h"

#include <google/protobuf/util/message_differencer.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

#include "core/test_util.h"
#include "detect/extractor_types.h"
#include "orchard/core/error.h"
#include "orchard/detect/config/label_map.h"

namespace orchard::detect {
namespace {

namespace odp = object_detection::protos;

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

const std::string kSample = ORCHARD_TEST_FIXTURES "/../../configs/ssd_mobilenet_v2_coco.config";

std::string sample_text() { return test::read_bytes(kSample); }

// `text` with the first occurrence of `from` replaced by `to` (which must exist).
std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in the text";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// 1-based line of the first occurrence of `needle`.
int line_of(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
}

// Runs `fn`, expecting an orchard::Error whose message contains every string in `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "no orchard::Error thrown";
}

// Captures what spdlog's default logger writes while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%l %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

TEST(PipelineConfig, SampleSsdMobilenetV2Values) {
  ConfigIssues issues;
  const auto c = load_pipeline_config(kSample, /*strict=*/true, &issues);
  EXPECT_TRUE(issues.unknown.empty());
  EXPECT_TRUE(issues.unimplemented.empty());
  ASSERT_TRUE(c.model().has_ssd());
  const auto& ssd = c.model().ssd();
  EXPECT_EQ(ssd.num_classes(), 90);
  EXPECT_EQ(ssd.image_resizer().fixed_shape_resizer().height(), 300);
  EXPECT_EQ(ssd.image_resizer().fixed_shape_resizer().width(), 300);
  EXPECT_EQ(ssd.feature_extractor().type(), "ssd_mobilenet_v2");
  EXPECT_EQ(ssd.feature_extractor().min_depth(), 16);
  EXPECT_FLOAT_EQ(ssd.feature_extractor().depth_multiplier(), 1.0f);
  const auto& hp = ssd.feature_extractor().conv_hyperparams();
  EXPECT_EQ(hp.activation(), odp::Hyperparams::RELU_6);
  EXPECT_NEAR(hp.regularizer().l2_regularizer().weight(), 4e-5, 1e-10);
  EXPECT_NEAR(hp.initializer().truncated_normal_initializer().stddev(), 0.03, 1e-7);
  EXPECT_NEAR(hp.batch_norm().decay(), 0.9997, 1e-7);
  EXPECT_TRUE(hp.batch_norm().scale());

  const auto& anchors = ssd.anchor_generator().ssd_anchor_generator();
  EXPECT_EQ(anchors.num_layers(), 6);
  EXPECT_NEAR(anchors.min_scale(), 0.2, 1e-7);
  EXPECT_NEAR(anchors.max_scale(), 0.95, 1e-7);
  ASSERT_EQ(anchors.aspect_ratios_size(), 5);
  const float ratios[] = {1.0f, 2.0f, 0.5f, 3.0f, 0.3333f};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(anchors.aspect_ratios(i), ratios[i], 1e-7) << i;
  EXPECT_TRUE(anchors.reduce_boxes_in_lowest_layer());  // proto default

  const auto& m = ssd.matcher().argmax_matcher();
  EXPECT_NEAR(m.matched_threshold(), 0.5, 1e-7);
  EXPECT_NEAR(m.unmatched_threshold(), 0.5, 1e-7);
  EXPECT_TRUE(m.force_match_for_each_row());
  EXPECT_TRUE(m.negatives_lower_than_unmatched());
  EXPECT_NEAR(ssd.box_coder().faster_rcnn_box_coder().y_scale(), 10.0, 1e-7);
  EXPECT_NEAR(ssd.box_coder().faster_rcnn_box_coder().width_scale(), 5.0, 1e-7);

  const auto& bp = ssd.box_predictor().convolutional_box_predictor();
  EXPECT_EQ(bp.kernel_size(), 1);
  EXPECT_FALSE(bp.use_dropout());

  const auto& miner = ssd.loss().hard_example_miner();
  EXPECT_EQ(miner.num_hard_examples(), 3000);
  EXPECT_NEAR(miner.iou_threshold(), 0.99, 1e-7);
  EXPECT_EQ(miner.loss_type(), odp::HardExampleMiner::CLASSIFICATION);
  EXPECT_EQ(miner.max_negatives_per_positive(), 3);
  EXPECT_EQ(miner.min_negatives_per_image(), 3);
  EXPECT_TRUE(ssd.loss().classification_loss().has_weighted_sigmoid());
  EXPECT_TRUE(ssd.loss().localization_loss().has_weighted_smooth_l1());
  EXPECT_NEAR(ssd.post_processing().batch_non_max_suppression().score_threshold(), 1e-8, 1e-12);
  EXPECT_NEAR(ssd.post_processing().batch_non_max_suppression().iou_threshold(), 0.6, 1e-7);
  EXPECT_EQ(ssd.post_processing().batch_non_max_suppression().max_total_detections(), 100);
  EXPECT_EQ(ssd.post_processing().score_converter(), odp::PostProcessing::SIGMOID);

  const auto& t = c.train_config();
  EXPECT_EQ(t.batch_size(), 24u);
  EXPECT_EQ(t.num_steps(), 200000u);
  EXPECT_EQ(t.fine_tune_checkpoint_type(), "detection");
  EXPECT_EQ(t.data_augmentation_options_size(), 2);
  EXPECT_TRUE(t.data_augmentation_options(1).has_ssd_random_crop());
  const auto& rms = t.optimizer().rms_prop_optimizer();
  const auto& lr = rms.learning_rate().exponential_decay_learning_rate();
  EXPECT_NEAR(lr.initial_learning_rate(), 0.004, 1e-9);
  EXPECT_EQ(lr.decay_steps(), 800720u);
  EXPECT_NEAR(lr.decay_factor(), 0.95, 1e-7);
  EXPECT_TRUE(lr.staircase());  // proto default
  EXPECT_NEAR(rms.momentum_optimizer_value(), 0.9, 1e-7);
  EXPECT_NEAR(rms.decay(), 0.9, 1e-7);
  EXPECT_NEAR(rms.epsilon(), 1.0, 1e-7);
  EXPECT_TRUE(t.optimizer().use_moving_average());  // TF's default, not written in the sample

  EXPECT_EQ(c.train_input_reader().tf_record_input_reader().input_path(0),
            "PATH_TO_BE_CONFIGURED/mscoco_train.record-?\?\?\?\?-of-00100");
  EXPECT_EQ(c.eval_config().num_examples(), 8000u);
  EXPECT_EQ(c.eval_config().max_evals(), 10u);
  ASSERT_EQ(c.eval_input_reader_size(), 1);
  EXPECT_FALSE(c.eval_input_reader(0).shuffle());
  EXPECT_EQ(c.eval_input_reader(0).num_readers(), 1u);

  validate_pipeline_config(c, kSample);  // no throw
}

TEST(PipelineConfig, SampleSsdMobilenetV1ParsesAndValidatesButAnotherExtractorDoesNot) {
  // The v1 sample differs from the v2 one in these lines (and min_negatives_per_image: 0).
  std::string v1 = replace(sample_text(), "type: 'ssd_mobilenet_v2'", "type: 'ssd_mobilenet_v1'");
  v1 = replace(v1, "fine_tune_checkpoint_type:  \"detection\"", "from_detection_checkpoint: true");
  v1 = replace(v1, "min_negatives_per_image: 3", "min_negatives_per_image: 0");
  ConfigIssues issues;
  const auto c = parse_pipeline_config(v1, "v1.config", /*strict=*/true, &issues);
  EXPECT_TRUE(c.train_config().from_detection_checkpoint());
  validate_pipeline_config(c, "v1.config");  // no throw
  const std::string other = replace(v1, "type: 'ssd_mobilenet_v1'", "type: 'ssd_mobilenet_v9'");
  expect_error([&] { validate_pipeline_config(parse_pipeline_config(other, "v9.config", true, &issues), "v9.config"); },
               {"v9.config", "model.ssd.feature_extractor.type 'ssd_mobilenet_v9' is not supported",
                "Orchard implements ssd_mobilenet_v2, ssd_mobilenet_v2_keras, ssd_mobilenet_v2_fpn"});
}

TEST(PipelineConfig, OlderSampleWithRemovedFieldStillLoads) {
  // The 2018 version of the sample: depthwise extra layers and batch_norm_trainable (field 6,
  // since removed from ssd.proto).
  const std::string text =
      replace(sample_text(), "depth_multiplier: 1.0\n",
              "depth_multiplier: 1.0\n      use_depthwise: true\n      batch_norm_trainable: true\n");
  ConfigIssues issues;
  // As TensorFlow, a field the schema no longer has is an error, unless --allow_unknown_fields.
  expect_error([&] { parse_pipeline_config(text, "old.config", /*strict=*/false); },
               {"old.config", "model.ssd.feature_extractor.batch_norm_trainable (line", "--allow_unknown_fields"});
  parse_pipeline_config(text, "old.config", /*strict=*/false, &issues, /*allow_unknown_fields=*/true);
  EXPECT_EQ(issues.unknown, std::vector<std::string>{"model.ssd.feature_extractor.batch_norm_trainable (line " +
                                                     std::to_string(line_of(text, "batch_norm_trainable")) + ")"});
  EXPECT_TRUE(issues.unimplemented.empty());  // the feature extractor's use_depthwise is implemented
}

TEST(PipelineConfig, MisspeltFieldIsAnErrorWithTheClosestName) {
  const std::string text = replace(sample_text(), "batch_size: 24", "batch_szie: 24");
  const std::string line = std::to_string(line_of(text, "batch_szie"));
  expect_error([&] { parse_pipeline_config(text, "my.config", /*strict=*/false); },
               {"my.config", "train_config.batch_szie (line " + line + ") (did you mean batch_size?)"});
  ConfigIssues issues;
  LogCapture log;
  const auto c = parse_pipeline_config(text, "my.config", false, &issues, /*allow_unknown_fields=*/true);
  EXPECT_EQ(c.train_config().batch_size(), 32);  // the proto default: what the misspelling costs
  EXPECT_NE(log.text().find("did you mean batch_size?"), std::string::npos) << log.text();
}

TEST(PipelineConfig, SyntaxErrorAtALineStartNamesTheLineBefore) {
  // A value left out: the parser trips over the next line's first token.
  const std::string text = "model {\n  ssd {\n    num_classes:\n    box_coder {\n    }\n  }\n}\n";
  expect_error([&] { parse_pipeline_config(text, "bad.config", false); },
               {"bad.config:3: after `num_classes:`", "(at line 4)"});
}

TEST(PipelineConfig, UnknownFieldsFailOrWarnWithTheirPaths) {
  std::string text = replace(sample_text(), "num_classes: 90", "num_classes: 90\n    foo_bar: 3");
  text = replace(text, "batch_norm {\n          train: true,",
                 "mystery { a: 1 b { c: 2 } }\n        batch_norm {\n          train: true,");
  text = replace(text, "ssd_random_crop {\n    }", "ssd_random_crop {\n    }\n    weird_aug: [1, 2]");
  text += "\nnot_a_section {\n  x: \"}\"\n}\n";
  expect_error(
      [&] { parse_pipeline_config(text, "my.config", /*strict=*/false); },
      {"my.config", "fields not in the pipeline.config schema", "model.ssd.foo_bar (line", "not_a_section (line"});
  ConfigIssues issues;
  LogCapture log;
  const auto c = parse_pipeline_config(text, "my.config", /*strict=*/false, &issues, /*allow_unknown_fields=*/true);
  EXPECT_EQ(c.model().ssd().num_classes(), 90);  // the rest still parses
  ASSERT_EQ(issues.unknown.size(), 4u);
  EXPECT_EQ(issues.unknown[0], "model.ssd.foo_bar (line " + std::to_string(line_of(text, "foo_bar")) + ")");
  EXPECT_EQ(issues.unknown[1], "model.ssd.feature_extractor.conv_hyperparams.mystery (line " +
                                   std::to_string(line_of(text, "mystery")) + ")");
  EXPECT_EQ(issues.unknown[2], "train_config.data_augmentation_options.weird_aug (line " +
                                   std::to_string(line_of(text, "weird_aug")) + ")");
  EXPECT_EQ(issues.unknown[3], "not_a_section (line " + std::to_string(line_of(text, "not_a_section")) + ")");
  EXPECT_TRUE(issues.unimplemented.empty());
  // One warning naming them all.
  const std::string logged = log.text();
  EXPECT_EQ(std::count(logged.begin(), logged.end(), '\n'), 1) << logged;
  EXPECT_NE(logged.find("warning my.config"), std::string::npos) << logged;
  for (const auto& u : issues.unknown) EXPECT_NE(logged.find(u), std::string::npos) << logged;

  expect_error([&] { parse_pipeline_config(text, "my.config", /*strict=*/true); },
               {"my.config", "model.ssd.foo_bar (line", "not_a_section (line", "strict"});
}

TEST(PipelineConfig, SetButUnimplementedFieldsAreListed) {
  std::string text = replace(sample_text(), "batch_size: 24", "batch_size: 24\n  bias_grad_multiplier: 2.0");
  text = replace(text, "data_augmentation_options {\n    random_horizontal_flip",
                 "data_augmentation_options {\n    autoaugment_image { policy_name: 'v1' }\n  }\n"
                 "  data_augmentation_options {\n    random_horizontal_flip");
  text = replace(text, "num_examples: 8000",
                 "num_examples: 8000\n  metrics_set: 'coco_detection_metrics'\n  metrics_set: 'lvis_mask_metrics'");
  text = replace(text, "use_dropout: false", "use_dropout: false\n        use_depthwise: true");
  text = replace(text, "min_depth: 16", "min_depth: 16\n      pad_to_multiple: 1\n      use_depthwise: false");
  ConfigIssues issues;
  parse_pipeline_config(text, "my.config", /*strict=*/false, &issues);
  EXPECT_TRUE(issues.unknown.empty());
  EXPECT_EQ(issues.unimplemented,
            (std::vector<std::string>{"train_config.data_augmentation_options.autoaugment_image",
                                      "train_config.bias_grad_multiplier", "eval_config.metrics_set"}));
  expect_error([&] { parse_pipeline_config(text, "my.config", /*strict=*/true); },
               {"my.config", "set fields Orchard does not implement", "train_config.bias_grad_multiplier"});

  // Implemented values pass.
  const std::string ok =
      replace(sample_text(), "epsilon: 1.0\n    }\n  }", "epsilon: 1.0\n    }\n    use_moving_average: false\n  }");
  parse_pipeline_config(ok, "ok.config", /*strict=*/true, &issues);
  EXPECT_TRUE(issues.unimplemented.empty());
}

TEST(PipelineConfig, SyntaxErrorNamesLineAndColumn) {
  const std::string text = "model {\n  ssd {\n    num_classes: ninety\n  }\n}\n";
  expect_error([&] { parse_pipeline_config(text, "bad.config", false); }, {"bad.config:3:18: "});
  expect_error([&] { parse_pipeline_config("model {\n  ssd {\n", "open.config", false); }, {"open.config:3:"});
  expect_error([&] { load_pipeline_config("/nonexistent/pipeline.config", false); }, {"/nonexistent/pipeline.config"});
}

TEST(PipelineConfig, OtherMetaArchitecturesParseAndAreRejected) {
  const std::string text =
      "model {\n  faster_rcnn {\n    num_classes: 3\n    first_stage_max_proposals: 300\n    mystery: 1\n"
      "  }\n}\ntrain_input_reader {\n  tf_record_input_reader { input_path: 'x' }\n}\n";
  ConfigIssues issues;
  const auto c = parse_pipeline_config(text, "frcnn.config", /*strict=*/false, &issues, /*allow_unknown_fields=*/true);
  EXPECT_EQ(c.model().faster_rcnn().num_classes(), 3);
  EXPECT_EQ(issues.unknown, std::vector<std::string>{"model.faster_rcnn.mystery (line 5)"});
  expect_error([&] { validate_pipeline_config(c, "frcnn.config"); },
               {"frcnn.config: model.faster_rcnn.feature_extractor.type '' is not supported; Orchard implements "
                "faster_rcnn_resnet50"});

  const auto cn = parse_pipeline_config("model { center_net { num_classes: 90 } }", "cn.config", false);
  expect_error([&] { validate_pipeline_config(cn, "cn.config"); },
               {"model.center_net is not supported; Orchard implements ssd or faster_rcnn"});
  expect_error(
      [&] { validate_pipeline_config(odp::TrainEvalPipelineConfig(), "empty.config"); },
      {"empty.config: model is not set; Orchard implements ssd or faster_rcnn", "train_config.optimizer is not set",
       "train_input_reader.tf_record_input_reader.input_path is not set"});
}

TEST(PipelineConfig, ValidateNamesEveryUnsupportedChoice) {
  std::string text = replace(sample_text(), "num_classes: 90", "num_classes: 0");
  text = replace(text, "fixed_shape_resizer {\n        height: 300\n        width: 300\n      }",
                 "keep_aspect_ratio_resizer {\n        min_dimension: 1200\n        per_channel_pad_value: 1\n"
                 "        per_channel_pad_value: 2\n      }");
  text = replace(text, "weighted_sigmoid {", "weighted_logits_softmax {");
  text = replace(text,
                 "exponential_decay_learning_rate {\n          initial_learning_rate: 0.004\n"
                 "          decay_steps: 800720\n          decay_factor: 0.95\n        }",
                 "");
  text = replace(text, "\"detection\"", "\"segmentation\"");
  const auto c = parse_pipeline_config(text, "my.config", false);
  expect_error([&] { validate_pipeline_config(c, "my.config"); },
               {"my.config: ", "model.ssd.num_classes must be > 0 (got 0)",
                "model.ssd.image_resizer.keep_aspect_ratio_resizer: min_dimension 1200 must be positive and at "
                "most max_dimension 1024",
                "model.ssd.image_resizer.keep_aspect_ratio_resizer.per_channel_pad_value has 2 values; it needs one "
                "per channel (3)",
                "model.ssd.loss.classification_loss.weighted_logits_softmax is not supported; Orchard implements "
                "weighted_sigmoid or weighted_softmax or weighted_sigmoid_focal",
                "train_config.optimizer.rms_prop_optimizer.learning_rate is not set",
                "train_config.fine_tune_checkpoint_type 'segmentation' is not supported"});
}

TEST(PipelineConfig, TextRoundTrip) {
  const auto c = load_pipeline_config(kSample, true);
  const std::string text = pipeline_config_to_text(c);
  ConfigIssues issues;
  const auto back = parse_pipeline_config(text, "resolved.config", /*strict=*/true, &issues);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(c, back)) << text;
  EXPECT_NE(text.find("num_classes: 90"), std::string::npos);
}

TEST(PipelineConfig, InputFilesExpandTfPatterns) {
  test::TempDir dir;
  for (const char* name : {"mscoco_train.record-00001-of-00100", "mscoco_train.record-00000-of-00100",
                           "mscoco_train.record-00000-of-00100.tmp", "mscoco_label_map.pbtxt"})
    test::write_bytes(dir.file(name), "x");
  std::string text = sample_text();
  for (size_t at; (at = text.find("PATH_TO_BE_CONFIGURED")) != std::string::npos;)
    text.replace(at, std::string("PATH_TO_BE_CONFIGURED").size(), dir.str());
  const auto c = parse_pipeline_config(text, "my.config", true);
  EXPECT_EQ(input_files(c.train_input_reader(), "my.config"),
            (std::vector<std::string>{dir.file("mscoco_train.record-00000-of-00100"),
                                      dir.file("mscoco_train.record-00001-of-00100")}));
  expect_error(
      [&] { input_files(c.eval_input_reader(0), "my.config", "eval_input_reader"); },
      {"my.config: eval_input_reader.tf_record_input_reader.input_path: ", "mscoco_val.record-?\?\?\?\?-of-00010"});
  expect_error([&] { input_files(odp::InputReader(), "my.config"); },
               {"my.config: train_input_reader.tf_record_input_reader.input_path is not set"});
}

// The fields two models differ in, as the fine-tuning hints name them: a field set to its
// default equals an unset one; a oneof member set on one side only is one line.
TEST(PipelineConfig, MessageDifferences) {
  const auto a = parse_pipeline_config(sample_text(), "a.config", false, nullptr, true);
  auto b = a;
  EXPECT_TRUE(message_differences(a.model(), b.model(), "model").empty());
  auto* fe = b.mutable_model()->mutable_ssd()->mutable_feature_extractor();
  fe->set_min_depth(a.model().ssd().feature_extractor().min_depth());  // explicit, same value
  fe->set_use_depthwise(!a.model().ssd().feature_extractor().use_depthwise());
  b.mutable_model()->mutable_ssd()->mutable_box_predictor()->mutable_weight_shared_convolutional_box_predictor();
  const auto d = message_differences(a.model(), b.model(), "model");
  const std::string depthwise =
      a.model().ssd().feature_extractor().use_depthwise() ? "(true here, false there)" : "(false here, true there)";
  EXPECT_EQ(d, (std::vector<std::string>{
                   "model.ssd.feature_extractor.use_depthwise " + depthwise,
                   "model.ssd.box_predictor.convolutional_box_predictor (set here, not there)",
                   "model.ssd.box_predictor.weight_shared_convolutional_box_predictor (set there, not here)"}));
}

const char* const kLabelMap = R"(
# COCO-style
item {
  name: "/m/01g317"
  id: 1
  display_name: "person"
}
item { id: 2  name: "bicycle" }
item {
  id: 3
}
)";

TEST(LabelMap, ParseAndDisplay) {
  const LabelMap map = parse_label_map(kLabelMap, "labels.pbtxt");
  ASSERT_EQ(map.items.size(), 3u);
  EXPECT_EQ(map.items[0].name, "/m/01g317");
  EXPECT_EQ(map.display(1), "person");
  EXPECT_EQ(map.display(2), "bicycle");
  EXPECT_EQ(map.display(3), "class 3");
  EXPECT_EQ(map.display(7), "class 7");
  EXPECT_EQ(map.max_id(), 3);
  check_label_map(map, 3, "labels.pbtxt");

  // TF accepts a background item at id 0; it is dropped.
  const LabelMap bg = parse_label_map("item { id: 0 name: 'background' } item { id: 1 name: 'cat' }", "bg.pbtxt");
  ASSERT_EQ(bg.items.size(), 1u);
  check_label_map(bg, 1, "bg.pbtxt");
}

TEST(LabelMap, Errors) {
  expect_error([] { check_label_map(parse_label_map("item { id: 0 name: 'cat' }", "a.pbtxt"), 90, "a.pbtxt"); },
               {"a.pbtxt: ", "'cat'", "label map ids start at 1; 0 is reserved for the background"});
  expect_error(
      [] {
        check_label_map(parse_label_map("item { id: 1 name: 'cat' } item { id: 1 name: 'dog' }", "b.pbtxt"), 90,
                        "b.pbtxt");
      },
      {"b.pbtxt: ", "id 1 is used twice"});
  expect_error(
      [] {
        check_label_map(parse_label_map("item { id: 1 name: 'cat' } item { id: 2 name: 'cat' }", "c.pbtxt"), 90,
                        "c.pbtxt");
      },
      {"c.pbtxt: ", "name 'cat' is used twice"});
  expect_error([] { check_label_map(parse_label_map("item { id: 91 name: 'toothbrush' }", "d.pbtxt"), 90, "d.pbtxt"); },
               {"d.pbtxt: ", "'toothbrush' has id 91 but model.ssd.num_classes is 90"});
  expect_error([] { parse_label_map("item { id: one }", "e.pbtxt"); }, {"e.pbtxt:1:"});
  expect_error([] { load_label_map("/nonexistent/label_map.pbtxt"); }, {"/nonexistent/label_map.pbtxt"});
}

TEST(LabelMap, TextRoundTrip) {
  const LabelMap map = parse_label_map(kLabelMap, "labels.pbtxt");
  test::TempDir dir;
  test::write_bytes(dir.file("out.pbtxt"), label_map_to_text(map));
  const LabelMap back = load_label_map(dir.file("out.pbtxt"));
  ASSERT_EQ(back.items.size(), map.items.size());
  for (size_t i = 0; i < map.items.size(); ++i) {
    EXPECT_EQ(back.items[i].id, map.items[i].id);
    EXPECT_EQ(back.items[i].name, map.items[i].name);
    EXPECT_EQ(back.items[i].display_name, map.items[i].display_name);
  }
}

// Every SSD sample config of the OD API (tests/fixtures/od_api_configs) parses as TensorFlow
// parses it, and either validates or stops with its one-line reason: the table of docs/detect.md
// (bench/sample_configs.sh trains the ones that validate).
TEST(PipelineConfig, TheOdApiSampleConfigsValidateOrSayWhyNot) {
  // config -> "" (validates) or the start of the reason validate_pipeline_config gives.
  const std::map<std::string, std::string> expected = {
      {"embedded_ssd_mobilenet_v1_coco", ""},
      {"facessd_mobilenet_v2_quantized_320x320_open_image_v4", ""},
      {"ssd_inception_v2_coco", ""},
      {"ssd_inception_v2_pets", ""},
      {"ssd_inception_v3_coco", ""},
      {"ssd_inception_v3_pets", ""},
      {"ssd_mobilenet_v1_0.75_depth_300x300_coco14_sync", ""},
      {"ssd_mobilenet_v1_0.75_depth_quantized_300x300_coco14_sync", ""},
      {"ssd_mobilenet_v1_0.75_depth_quantized_300x300_pets_sync", ""},
      {"ssd_mobilenet_v1_300x300_coco14_sync", ""},
      {"ssd_mobilenet_v1_coco", ""},
      {"ssd_mobilenet_v1_focal_loss_pets", ""},
      {"ssd_mobilenet_v1_focal_loss_pets_inference", ""},
      {"ssd_mobilenet_v1_fpn_shared_box_predictor_640x640_coco14_sync", ""},
      {"ssd_mobilenet_v1_pets", ""},
      {"ssd_mobilenet_v1_ppn_shared_box_predictor_300x300_coco14_sync", ""},
      {"ssd_mobilenet_v1_quantized_300x300_coco14_sync", ""},
      {"ssd_mobilenet_v2_coco", ""},
      {"ssd_mobilenet_v2_coco_per_class_metric", ""},
      {"ssd_mobilenet_v2_fpnlite_quantized_shared_box_predictor_256x256_depthmultiplier_75_coco14_sync", ""},
      {"ssd_mobilenet_v2_fullyconv_coco", ""},
      {"ssd_mobilenet_v2_mnasfpn_shared_box_predictor_320x320_coco_sync", ""},
      {"ssd_mobilenet_v2_oid_v4", ""},
      {"ssd_mobilenet_v2_pets_keras", ""},
      {"ssd_mobilenet_v2_quantized_300x300_coco", ""},
      {"ssd_resnet101_v1_fpn_shared_box_predictor_oid_512x512_sync", ""},
      {"ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco14_sync", ""},
      {"ssd_resnet50_v1_fpn_shared_box_predictor_640x640_coco17_sync_keras", ""},
      {"ssdlite_mobiledet_cpu_320x320_coco_sync_4x4", ""},
      {"ssdlite_mobiledet_dsp_320x320_coco_sync_4x4", ""},
      {"ssdlite_mobiledet_edgetpu_320x320_coco_sync_4x4", ""},
      {"ssdlite_mobiledet_gpu_320x320_coco_sync_4x4", ""},
      {"ssdlite_mobilenet_edgetpu_320x320_coco", ""},
      {"ssdlite_mobilenet_edgetpu_320x320_coco_quant", ""},
      {"ssdlite_mobilenet_v1_coco", ""},
      {"ssdlite_mobilenet_v1_coco_quantize",
       "fields not in the pipeline.config schema: train_config.load_all_optimizer_checkpoint_vars"},
      {"ssdlite_mobilenet_v2_coco", ""},
      {"ssdlite_mobilenet_v2_coco_quantize",
       "fields not in the pipeline.config schema: train_config.load_all_optimizer_checkpoint_vars"},
      {"ssdlite_mobilenet_v3_large_320x320_coco", ""},
      {"ssdlite_mobilenet_v3_small_320x320_coco", ""},
  };
  const std::filesystem::path dir = ORCHARD_TEST_FIXTURES "/od_api_configs";
  std::map<std::string, std::string> got;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".config") continue;
    const std::string name = entry.path().stem().string();
    std::string result;
    try {
      ConfigIssues issues;
      const auto c = parse_pipeline_config(test::read_bytes(entry.path().string()), name, /*strict=*/false, &issues);
      EXPECT_TRUE(issues.unknown.empty()) << name << ": " << issues.unknown.front();
      validate_pipeline_config(c, name);
    } catch (const Error& e) {
      result = e.what();
    }
    got[name] = result;
  }
  EXPECT_EQ(got.size(), 40u);
  for (const auto& [name, want] : expected) {
    ASSERT_TRUE(got.count(name)) << name;
    if (want.empty()) EXPECT_EQ(got[name], "") << name;
    else EXPECT_NE(got[name].find(want), std::string::npos) << name << ": " << got[name];
  }
  EXPECT_EQ(expected.size(), got.size());
}

// The 29 two-stage sample configs (tests/fixtures/od_api_two_stage_configs) parse as TensorFlow
// parses them (Context R-CNN's input readers included); the Faster R-CNN ResNet ones validate,
// the others stop with their one-line reason.
TEST(PipelineConfig, TheTwoStageSampleConfigsValidateOrSayWhyNot) {
  const std::filesystem::path dir = ORCHARD_TEST_FIXTURES "/od_api_two_stage_configs";
  const char* const kNotResNet =
      "' is not supported; Orchard implements faster_rcnn_resnet50, faster_rcnn_resnet101, faster_rcnn_resnet152, "
      "faster_rcnn_inception_v2 and faster_rcnn_inception_resnet_v2";
  const std::map<std::string, std::string> expected = {
      {"context_rcnn_resnet101_snapshot_serengeti",
       "Context R-CNN (model.faster_rcnn.context_config (line 95)) is not supported"},
      {"context_rcnn_resnet101_snapshot_serengeti_sync", "Context R-CNN (model.faster_rcnn.context_config"},
      {"faster_rcnn_inception_resnet_v2_atrous_coco", ""},
      {"faster_rcnn_inception_resnet_v2_atrous_cosine_lr_coco", ""},
      {"faster_rcnn_inception_resnet_v2_atrous_oid", ""},
      {"faster_rcnn_inception_resnet_v2_atrous_oid_v4", ""},
      {"faster_rcnn_inception_resnet_v2_atrous_pets", ""},
      {"faster_rcnn_inception_v2_coco", ""},
      {"faster_rcnn_inception_v2_pets", ""},
      {"faster_rcnn_nas_coco", kNotResNet},
      {"faster_rcnn_resnet101_atrous_coco", ""},
      {"faster_rcnn_resnet101_ava_v2.1", ""},
      {"faster_rcnn_resnet101_coco", ""},
      {"faster_rcnn_resnet101_fgvc", ""},
      {"faster_rcnn_resnet101_kitti", ""},
      {"faster_rcnn_resnet101_pets", ""},
      {"faster_rcnn_resnet101_voc07", ""},
      {"faster_rcnn_resnet152_coco", ""},
      {"faster_rcnn_resnet152_pets", ""},
      {"faster_rcnn_resnet50_coco", ""},
      {"faster_rcnn_resnet50_fgvc", ""},
      {"faster_rcnn_resnet50_pets", ""},
      {"mask_rcnn_inception_resnet_v2_atrous_coco", ""},
      {"mask_rcnn_inception_v2_coco", ""},
      {"mask_rcnn_resnet101_atrous_coco", ""},
      {"mask_rcnn_resnet101_pets", ""},
      {"mask_rcnn_resnet50_atrous_coco", ""},
      {"rfcn_resnet101_coco", ""},
      {"rfcn_resnet101_pets", ""},
  };
  std::map<std::string, std::string> got;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".config") continue;
    const std::string name = entry.path().stem().string();
    try {
      const auto c = parse_pipeline_config(test::read_bytes(entry.path().string()), name, /*strict=*/false);
      EXPECT_TRUE(c.model().has_faster_rcnn()) << name;
      validate_pipeline_config(c, name);
      got[name] = "";
    } catch (const Error& e) {
      got[name] = e.what();
    }
  }
  EXPECT_EQ(got.size(), 29u);
  for (const auto& [name, want] : expected) {
    ASSERT_TRUE(got.count(name)) << name;
    if (want.empty()) EXPECT_EQ(got[name], "") << name;
    else EXPECT_NE(got[name].find(want), std::string::npos) << name << ": " << got[name];
  }
  EXPECT_EQ(expected.size(), got.size());
  // Context R-CNN's context_config is in the schema, but refused rather than ignored, also with
  // --allow_unknown_fields: without it the config would train a plain Faster R-CNN.
  const std::string context = test::read_bytes((dir / "context_rcnn_resnet101_snapshot_serengeti.config").string());
  std::string refused;
  try {
    parse_pipeline_config(context, "context.config", /*strict=*/false, nullptr, /*allow_unknown_fields=*/true);
  } catch (const Error& e) {
    refused = e.what();
  }
  EXPECT_EQ(
      refused.rfind("context.config: Context R-CNN (model.faster_rcnn.context_config (line 95)) is not supported", 0),
      0u)
      << refused;
}

// faster_rcnn_resnet101_ava_v2.1 is implemented field for field (second_stage_classification_loss
// weighted_sigmoid, merge_multiple_label_boxes); the focal loss there, and merging boxes for an
// SSD, are refused with the reason.
TEST(PipelineConfig, AvaMultiLabelFieldsAreImplementedForFasterRcnn) {
  const std::string path = ORCHARD_TEST_FIXTURES "/od_api_two_stage_configs/faster_rcnn_resnet101_ava_v2.1.config";
  std::string text = test::read_bytes(path);
  ConfigIssues issues;
  validate_pipeline_config(parse_pipeline_config(text, "ava.config", /*strict=*/true, &issues), "ava.config");
  EXPECT_TRUE(issues.unimplemented.empty()) << issues.unimplemented.front();
  const std::string focal = replace(text, "weighted_sigmoid {\n        anchorwise_output: true\n      }",
                                    "weighted_sigmoid_focal {\n      }");
  ASSERT_NE(focal, text);
  expect_error([&] { validate_pipeline_config(parse_pipeline_config(focal, "ava.config", false), "ava.config"); },
               {"model.faster_rcnn.second_stage_classification_loss.weighted_sigmoid_focal is not supported; Orchard "
                "implements weighted_sigmoid or weighted_softmax"});
  const std::string ssd_path = ORCHARD_TEST_FIXTURES "/od_api_configs/ssdlite_mobilenet_v2_coco.config";
  const std::string ssd =
      replace(test::read_bytes(ssd_path), "train_config: {", "train_config: {\n  merge_multiple_label_boxes: true");
  expect_error([&] { validate_pipeline_config(parse_pipeline_config(ssd, "ssd.config", false), "ssd.config"); },
               {"train_config.merge_multiple_label_boxes is not supported with model.ssd"});
}

// Faster R-CNN's image_resizer gets the same checks as the SSD's (image_resizer_builder's, and a
// pad value per channel).
TEST(PipelineConfig, FasterRcnnResizerIsCheckedAsTheSsds) {
  const std::string path = ORCHARD_TEST_FIXTURES "/od_api_two_stage_configs/faster_rcnn_resnet101_pets.config";
  const std::string text = test::read_bytes(path);
  const std::string bad = replace(text, "min_dimension: 600\n        max_dimension: 1024",
                                  "min_dimension: 1200\n        max_dimension: 1024\n        per_channel_pad_value: 1\n"
                                  "        per_channel_pad_value: 2");
  ASSERT_NE(bad, text);
  expect_error([&] { validate_pipeline_config(parse_pipeline_config(bad, "pets.config", false), "pets.config"); },
               {"pets.config: ",
                "model.faster_rcnn.image_resizer.keep_aspect_ratio_resizer: min_dimension 1200 must be positive and "
                "at most max_dimension 1024",
                "model.faster_rcnn.image_resizer.keep_aspect_ratio_resizer.per_channel_pad_value has 2 values; it "
                "needs one per channel (3)"});
}

// SSDMobileNetV2MnasFPNFeatureExtractor's own checks: levels 3..6, sides multiples of 64.
TEST(PipelineConfig, MnasFpnNeedsItsLevelsAndSides) {
  const std::string path =
      ORCHARD_TEST_FIXTURES "/od_api_configs/ssd_mobilenet_v2_mnasfpn_shared_box_predictor_320x320_coco_sync.config";
  std::string text = test::read_bytes(path);
  text = replace(text, "height: 320\n        width: 320", "height: 300\n        width: 300");
  text = replace(text, "fpn {\n        min_level: 3\n        max_level: 6",
                 "fpn {\n        min_level: 3\n        max_level: 7");
  const auto c = parse_pipeline_config(text, "mnasfpn.config", /*strict=*/false);
  expect_error(
      [&] { validate_pipeline_config(c, "mnasfpn.config"); },
      {"ssd_mobilenet_v2_mnasfpn has levels 3..6", "ssd_mobilenet_v2_mnasfpn needs sides that are multiples of 64"});
}

// EmbeddedSSDMobileNetV1FeatureExtractor's own checks: 256x256 inputs, no pad_to_multiple.
TEST(PipelineConfig, EmbeddedMobileNetV1NeedsItsInputSize) {
  const std::string path = ORCHARD_TEST_FIXTURES "/od_api_configs/embedded_ssd_mobilenet_v1_coco.config";
  std::string text = test::read_bytes(path);
  text = replace(text, "height: 256\n        width: 256", "height: 300\n        width: 300");
  text = replace(text, "min_depth: 16", "min_depth: 16\n      pad_to_multiple: 32");
  const auto c = parse_pipeline_config(text, "embedded.config", /*strict=*/false);
  expect_error([&] { validate_pipeline_config(c, "embedded.config"); },
               {"embedded_ssd_mobilenet_v1 needs a 256x256 fixed_shape_resizer",
                "pad_to_multiple must be 1 for embedded_ssd_mobilenet_v1"});
}

// The newest OID samples (ssd_mobilenet_v2_oid_v4, faster_rcnn_inception_resnet_v2_atrous_oid_v4)
// evaluate with the Open Images challenge metric and image_classes_field_map_empty_to_ones: false;
// both are implemented, so neither is reported.
TEST(PipelineConfig, TheOidSamplesChallengeMetricIsImplemented) {
  for (const std::string path : {"/od_api_configs/ssd_mobilenet_v2_oid_v4.config",
                                 "/od_api_two_stage_configs/faster_rcnn_inception_resnet_v2_atrous_oid_v4.config"}) {
    ConfigIssues issues;
    const auto c = load_pipeline_config(ORCHARD_TEST_FIXTURES + path, /*strict=*/false, &issues);
    EXPECT_TRUE(issues.unknown.empty()) << path;
    ASSERT_EQ(c.eval_config().metrics_set_size(), 1) << path;
    EXPECT_EQ(c.eval_config().metrics_set(0), "oid_challenge_detection_metrics") << path;
    EXPECT_TRUE(c.eval_config().has_image_classes_field_map_empty_to_ones()) << path;
    EXPECT_FALSE(c.eval_config().image_classes_field_map_empty_to_ones()) << path;
    for (const auto& u : issues.unimplemented) EXPECT_EQ(u.find("eval_config"), std::string::npos) << path << ": " << u;
  }
  EXPECT_TRUE(odp::EvalConfig().image_classes_field_map_empty_to_ones());  // the proto's default
}

// Fields of the synced schema that Orchard does not implement are reported as any other: a
// warning listing them, an error with --strict; never silently taken.
TEST(PipelineConfig, NewerSchemaFieldsAreReportedWhenUnimplemented) {
  std::string text = replace(sample_text(), "num_examples: 8000",
                             "num_examples: 8000\n  skip_predictions_for_unlabeled_class: true\n"
                             "  keypoint_edge { start: 0 end: 1 }");
  text = replace(text, "min_depth: 16", "min_depth: 16\n      use_hardswish: true");
  text = replace(text, "score_converter: SIGMOID", "score_converter: SIGMOID\n      calibration_config { }");
  ConfigIssues issues;
  parse_pipeline_config(text, "new.config", /*strict=*/false, &issues);
  EXPECT_TRUE(issues.unknown.empty());
  EXPECT_EQ(issues.unimplemented,
            (std::vector<std::string>{"model.ssd.feature_extractor.use_hardswish",
                                      "model.ssd.post_processing.calibration_config", "eval_config.keypoint_edge",
                                      "eval_config.skip_predictions_for_unlabeled_class"}));
  expect_error([&] { parse_pipeline_config(text, "new.config", /*strict=*/true); },
               {"new.config", "set fields Orchard does not implement",
                "eval_config.skip_predictions_for_unlabeled_class", "strict"});
}

// The OD API's SSDInceptionV2FeatureExtractor refuses a config without
// override_base_feature_extractor_hyperparams (the 2018 ssd_inception_v2_pets sample had none).
TEST(PipelineConfig, InceptionV2NeedsOverrideBaseHyperparams) {
  const std::string text =
      replace(test::read_bytes(ORCHARD_TEST_FIXTURES "/od_api_configs/ssd_inception_v2_pets.config"),
              "override_base_feature_extractor_hyperparams: true", "");
  expect_error([&] { validate_pipeline_config(parse_pipeline_config(text, "pets.config", false), "pets.config"); },
               {"pets.config: ", "override_base_feature_extractor_hyperparams must be true for ssd_inception_v2"});
}

}  // namespace
}  // namespace orchard::detect
