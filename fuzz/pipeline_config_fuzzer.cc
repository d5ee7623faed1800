// pipeline.config and label_map.pbtxt parsing (issue 31): the input is text. It is parsed as a
// TF OD API TrainEvalPipelineConfig (lenient and strict, with the unknown and unimplemented
// field reports) and validated, and parsed and checked as a StringIntLabelMap. Whatever parses
// must print back to text that parses again to the same message.
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "orchard/core/error.h"
#include "orchard/detect/config/config.h"
#include "orchard/detect/config/label_map.h"

namespace {

namespace detect = orchard::detect;

[[noreturn]] void round_trip_failed(const char* what, const std::string& text) {
  std::fprintf(stderr, "%s does not parse back to itself:\n%s\n", what, text.c_str());
  std::abort();
}

// Field-by-field equality, NaN equal to NaN (the text format writes "nan" and reads it back).
bool same_message(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  return differencer.Compare(a, b);
}

void fuzz_pipeline_config(const std::string& text) {
  object_detection::protos::TrainEvalPipelineConfig config;
  detect::ConfigIssues issues;
  try {
    config = detect::parse_pipeline_config(text, "fuzz.config", false, &issues, /*allow_unknown_fields=*/true);
  } catch (const orchard::Error&) {
    return;  // a syntax error
  }
  try {
    detect::parse_pipeline_config(text, "fuzz.config", false);
    detect::parse_pipeline_config(text, "fuzz.config", true);
  } catch (const orchard::Error&) {
    // unknown fields (without --allow_unknown_fields), then strict mode's unimplemented ones
  }
  try {
    // A few of the registered extractor types (the registry needs libtorch, which this target does not link).
    const std::vector<std::string> ssd_types = {"ssd_mobilenet_v2", "ssd_mobilenet_v1_fpn", "embedded_ssd_mobilenet_v1",
                                                "ssd_mobilenet_v2_mnasfpn", "ssd_inception_v2"};
    const std::vector<std::string> faster_rcnn_types = {"faster_rcnn_resnet50", "faster_rcnn_inception_v2"};
    detect::validate_pipeline_config(
        config, "fuzz.config",
        {{"ssd", [&](const auto& c, auto* problems) { detect::check_ssd_model(c, ssd_types, problems); }},
         {"faster_rcnn",
          [&](const auto& c, auto* problems) { detect::check_faster_rcnn_model(c, faster_rcnn_types, problems); }}});
  } catch (const orchard::Error&) {
  }
  // The resolved config Orchard saves next to a run must load again, unchanged.
  const std::string printed = detect::pipeline_config_to_text(config);
  object_detection::protos::TrainEvalPipelineConfig again;
  try {
    again = detect::parse_pipeline_config(printed, "printed.config", false);
  } catch (const orchard::Error&) {
    round_trip_failed("pipeline_config_to_text", printed);
  }
  if (!same_message(config, again)) round_trip_failed("pipeline_config_to_text", printed);
}

void fuzz_label_map(const std::string& text) {
  detect::LabelMap map;
  try {
    map = detect::parse_label_map(text, "fuzz.pbtxt");
  } catch (const orchard::Error&) {
    return;
  }
  for (const auto& item : map.items) map.display(item.id);
  map.display(map.max_id() + 1);
  try {
    detect::check_label_map(map, 90, "fuzz.pbtxt");
  } catch (const orchard::Error&) {
  }
  const std::string printed = detect::label_map_to_text(map);
  detect::LabelMap again;
  try {
    again = detect::parse_label_map(printed, "printed.pbtxt");
  } catch (const orchard::Error&) {
    round_trip_failed("label_map_to_text", printed);
  }
  if (again.items.size() != map.items.size()) round_trip_failed("label_map_to_text", printed);
  for (size_t i = 0; i < map.items.size(); ++i)
    if (again.items[i].id != map.items[i].id || again.items[i].name != map.items[i].name ||
        again.items[i].display_name != map.items[i].display_name)
      round_trip_failed("label_map_to_text", printed);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  orchard::fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz_pipeline_config(text);
  fuzz_label_map(text);
  return 0;
}
