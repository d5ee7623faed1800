// The TF Object Detection API's pipeline.config (TrainEvalPipelineConfig, text format) as
// `orchard detect` reads it: parse, report what Orchard ignores, check what it supports.
//
// A config is read in three steps, each callable on its own:
//   1. load/parse: syntax errors are fatal; fields outside the schema ("unknown") are fatal too,
//      as in TF, unless allow_unknown_fields; those let through and the fields Orchard parses but
//      does not implement ("unimplemented") are warned about together, or fatal with
//      strict == true. A Context R-CNN config (model.faster_rcnn.context_config) is refused;
//   2. validate_pipeline_config: the model and training choices Orchard implements;
//   3. pipeline_config_to_text: the resolved config, saved next to the run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "orchard/proto/object_detection/pipeline.pb.h"

namespace orchard::detect {

struct ConfigIssues {
  // Fields not in the schema, as "<path> (line <n>)", e.g. "model.ssd.foo (line 12)", then
  // " (did you mean <field>?)" where a field of that message is spelt alike.
  std::vector<std::string> unknown;
  // Set fields Orchard parses but does not implement, by path without repeated indices, e.g.
  // "train_config.freeze_variables". A set sub-message none of whose fields Orchard
  // implements is listed once by its own path ("model.center_net"), not field by field.
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
// implement (all of them, joined by "; "):
//   model: unset, or a case `models` does not name ("model.center_net is not supported;
//     Orchard implements ssd or faster_rcnn"), then the named case's own check; Orchard's:
//   model.ssd (check_ssd_model): num_classes <= 0; a feature_extractor.type outside the list handed
//     down (the registered extractors' types); the OD API's
//     own checks of embedded_ssd_mobilenet_v1 (a 256x256 fixed_shape_resizer, pad_to_multiple 1),
//     ssd_mobilenet_v2_mnasfpn (levels 3..6, sides multiples of 64) and ssd_inception_v2/v3
//     (override_base_feature_extractor_hyperparams); an image resizer other than
//     fixed_shape_resizer or keep_aspect_ratio_resizer (0 < min_dimension <= max_dimension, 0 or 3
//     pad values); box coder / matcher / similarity other than faster_rcnn_box_coder / argmax_matcher /
//     iou_similarity; an anchor generator other than ssd_anchor_generator or
//     multiscale_anchor_generator; a box predictor other than convolutional_box_predictor or
//     weight_shared_convolutional_box_predictor; an activation other than RELU_6 where Orchard
//     uses conv_hyperparams' (the feature extractor's, the weight-shared predictor's, SSDLite's
//     heads'); a classification loss other than weighted_sigmoid, weighted_softmax or
//     weighted_sigmoid_focal; a localization loss other than weighted_smooth_l1;
//     train_config.merge_multiple_label_boxes;
//   model.faster_rcnn (check_faster_rcnn_model): num_classes <= 0; number_of_stages other than 2 or 3; a mask predictor
//     without positive mask_height, mask_width and mask_prediction_num_conv_layers; a
//     feature_extractor.type outside the list handed down (the registered extractors); first_stage_features_stride
//     other than 8 or 16 (16 for inception_v2); the image resizer as for ssd; an anchor generator other than
//     grid_anchor_generator; a second-stage box predictor other than mask_rcnn_box_predictor or rfcn_box_predictor
//     (R-FCN with the ResNets only, crop sizes multiples of the spatial bins); and, without R-FCN, initial_crop_size,
//     maxpool_kernel_size, maxpool_stride, first_stage_max_proposals or second_stage_batch_size not positive,
//     second_stage_batch_size above first_stage_max_proposals, a second-stage classification loss other than
//     weighted_sigmoid or weighted_softmax;
//   any model: an optimizer other than rms_prop / momentum / adam or a learning rate other than
//     constant / exponential_decay / manual_step / cosine_decay, fine_tune_checkpoint_type outside
//     {"", classification, detection, full}, and a train input without input_path.
//
// `models` are the `model` oneof cases the caller implements, each with the checks of its own
// message: this library sits below the tasks that build the models, so the list is handed down
// (tasks/detect's meta-architecture registry: tasks::validate_detection_pipeline).
struct ModelValidator {
  std::string name;  // the `model` oneof case, e.g. "ssd"
  // Appends one line per problem of that case's message (and what it rules out elsewhere).
  std::function<void(const object_detection::protos::TrainEvalPipelineConfig& config,
                     std::vector<std::string>* problems)>
      check;
};
void validate_pipeline_config(const object_detection::protos::TrainEvalPipelineConfig& config,
                              const std::string& source_name, const std::vector<ModelValidator>& models);

// The checks of model.ssd and model.faster_rcnn listed above, for their meta-architectures'
// registrations (detect/meta_arch: ssd.cc, faster_rcnn.cc). `extractor_types` are the
// feature_extractor.type values the meta-architecture builds: this library links no libtorch,
// so the caller hands down its feature-extractor registry's list
// (detect/feature_extractors: FeatureExtractorRegistry::ssd_types(), faster_rcnn_names()).
void check_ssd_model(const object_detection::protos::TrainEvalPipelineConfig& config,
                     const std::vector<std::string>& extractor_types, std::vector<std::string>* problems);
void check_faster_rcnn_model(const object_detection::protos::TrainEvalPipelineConfig& config,
                             const std::vector<std::string>& extractor_types, std::vector<std::string>* problems);

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
