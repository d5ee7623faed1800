// The TF Object Detection API's pipeline.config (TrainEvalPipelineConfig, text format) as
// `orchard detect` reads it: parse, report what Orchard ignores, check what it supports.
//
// A config is read in three steps, each callable on its own:
//   1. load/parse: syntax errors are fatal; fields outside the schema ("unknown") and fields
//      Orchard parses but does not implement ("unimplemented") are warned about together, or
//      fatal with strict == true (like TF, which rejects unknown fields);
//   2. validate_pipeline_config: the model and training choices Orchard implements;
//   3. pipeline_config_to_text: the resolved config, saved next to the run.
#pragma once

#include <string>
#include <vector>

#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::detect {

struct ConfigIssues {
  // Fields not in the schema, as "<path> (line <n>)", e.g. "model.ssd.foo (line 12)", then
  // " (did you mean <field>?)" where a field of that message is spelt alike.
  std::vector<std::string> unknown;
  // Set fields Orchard parses but does not implement, by path without repeated indices, e.g.
  // "train_config.optimizer.use_moving_average". A set sub-message none of whose fields Orchard
  // implements is listed once by its own path ("model.faster_rcnn"), not field by field.
  std::vector<std::string> unimplemented;
};

// Parses a pipeline.config in text format. Throws orchard::Error for a missing file or a syntax
// error ("<file>:<line>:<column>: <what>"; an unexpected token at the start of a line is
// reported at the end of the line before, where the mistake usually is). Fields not in the
// schema are an error, as in TensorFlow, each with its line and the closest known field ("did
// you mean batch_size?"); with allow_unknown_fields (--allow_unknown_fields) they are warned
// about instead. Set fields Orchard does not implement: one spdlog warning listing every path
// (with the unknown ones); with strict == true an orchard::Error listing them all. `issues`,
// when given, receives them either way.
object_detection::protos::TrainEvalPipelineConfig load_pipeline_config(const std::string& path, bool strict,
                                                                       ConfigIssues* issues = nullptr,
                                                                       bool allow_unknown_fields = false);
// As load_pipeline_config, from text; `source_name` names it in messages.
object_detection::protos::TrainEvalPipelineConfig parse_pipeline_config(const std::string& text,
                                                                        const std::string& source_name, bool strict,
                                                                        ConfigIssues* issues = nullptr,
                                                                        bool allow_unknown_fields = false);

// Text format, parseable by parse_pipeline_config and by TF (whose schema has eval_input_reader
// optional: a config with more than one eval_input_reader is Orchard-only).
std::string pipeline_config_to_text(const object_detection::protos::TrainEvalPipelineConfig& config);

// Throws orchard::Error naming `source_name` and the field path of every choice Orchard does not
// implement: a model other than ssd ("model.faster_rcnn is not supported; Orchard implements
// ssd"), num_classes <= 0, a feature extractor other than ssd_mobilenet_v2, an image resizer other
// than fixed_shape_resizer, box coder / matcher / similarity / anchor generator / box predictor
// other than faster_rcnn_box_coder / argmax_matcher / iou_similarity / ssd_anchor_generator /
// convolutional_box_predictor, a classification loss other than weighted_sigmoid or
// weighted_softmax, a localization loss other than weighted_smooth_l1, an optimizer other than
// rms_prop / momentum / adam or a learning rate other than constant / exponential_decay /
// manual_step / cosine_decay, fine_tune_checkpoint_type outside {"", classification, detection,
// full}, and a train input without input_path.
void validate_pipeline_config(const object_detection::protos::TrainEvalPipelineConfig& config,
                              const std::string& source_name);

// The TFRecord files of an input reader: each tf_record_input_reader.input_path expanded with
// orchard::expand_file_pattern (TF patterns: "train.record-?????-of-00100", globs, directories,
// comma lists), in order, duplicates removed. Throws orchard::Error naming `source_name` and the
// field ("<reader_field>.tf_record_input_reader.input_path") when there is no path or a path
// matches nothing.
std::vector<std::string> input_files(const object_detection::protos::InputReader& reader,
                                     const std::string& source_name,
                                     const std::string& reader_field = "train_input_reader");

// The OD API's sample configs mark the paths a user must set with PATH_TO_BE_CONFIGURED.
// True when `value` still holds that placeholder.
bool is_placeholder_path(const std::string& value);
// "<field> is still the sample config's placeholder <value>: set it to <what>", the message for
// a placeholder path that names nothing.
std::string placeholder_message(const std::string& field, const std::string& value, const std::string& what);

// The fields whose values differ between two messages of one type, as
// "<path>.<field> (<value in a> here, <value in b> there)": scalars by their value (an unset
// field by its default, so `min_depth: 0` equals no min_depth), sub-messages field by field
// (one line for a oneof member set in only one), repeated fields as whole lists.
std::vector<std::string> message_differences(const google::protobuf::Message& a, const google::protobuf::Message& b,
                                             const std::string& path);

// Text-format parsing shared by the pipeline.config and label map readers: throws orchard::Error
// "<source_name>:<line>:<column>: <what>" on a syntax error; a field the schema lacks is skipped
// and appended to `unknown` as "<path> (line <n>)".
void parse_text_proto(const std::string& text, const std::string& source_name, google::protobuf::Message* message,
                      std::vector<std::string>* unknown);

}  // namespace orchard::detect
