// Detection meta-architectures: the cases of pipeline.config's `model` oneof (ssd and faster_rcnn,
// registered in meta_architectures.cc; the OD API also has center_net, ...). Each registers a
// parser of its own message; the parsed configuration builds the model. DetectionTask owns what
// they all share: input parsing and augmentation, each replica's share of the loss, L2
// regularisation, the evaluation metrics and the evaluation images.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "orchard/data/detection.h"
#include "orchard/detect/ops/box_ops.h"
#include "orchard/engine/outputs.h"
#include "orchard/models/tf_names.h"

namespace object_detection::protos {
class TrainEvalPipelineConfig;
class ImageResizer;
class PostProcessing;
}  // namespace object_detection::protos
namespace torch::nn {
class Module;
}

namespace orchard::tasks {

// A batch's network input: its size, and each image's inside it (top-left; the rest is padding,
// e.g. keep_aspect_ratio_resizer's images of different shapes). height 0: the configured input
// size; no image_sizes: every image fills the input.
struct InputShape {
  int64_t height = 0, width = 0;
  std::vector<std::pair<int64_t, int64_t>> image_sizes;
};

// What an export_graph call may set beyond the format.
struct GraphExportOptions {
  bool include_preprocessing = false;  // onnx: the graph takes RGB in [0, 255]
  // tflite: export_tflite_ssd_graph.py's flags.
  bool add_postprocessing_op = true;
  int64_t max_detections = 10, max_classes_per_detection = 1, detections_per_class = 100;
  bool use_regular_nms = false;
  // tflite: tflite_convert's --inference_type, FLOAT or QUANTIZED_UINT8; empty: QUANTIZED_UINT8
  // for a model trained with quantization (graph_rewriter), FLOAT otherwise.
  std::string inference_type;
};

class MetaArchitecture {
 public:
  virtual ~MetaArchitecture() = default;
  // The model's name in config.json, checkpoints' signature and logs ("ssd_mobilenet_v2").
  virtual std::string name() const = 0;
  virtual std::shared_ptr<torch::nn::Module> module() = 0;
  // images [B, 3, H, W] (or NHWC, as configured) in [-1, 1] -> the architecture's own outputs
  // (SsdOutputs, FasterRcnnOutputs), read by its loss and postprocess. `input`: each image's size
  // inside the batch (the OD API's true_image_shapes; a two-stage detector clips its proposals to
  // them). `targets` is the batch in training (a two-stage detector samples proposals with its
  // boxes); null in evaluation and inference.
  virtual std::unique_ptr<Outputs> forward(const at::Tensor& images, const InputShape& input,
                                           const data::Batch* targets) = 0;
  // Evaluation: inference's outputs, and what `loss` needs of the batch's targets besides the
  // boxes and classes it is given (Mask R-CNN: its detections' mask losses). Default: inference.
  virtual std::unique_ptr<Outputs> forward_eval(const at::Tensor& images, const InputShape& input,
                                                const data::Batch& /*batch*/) {
    return forward(images, input, nullptr);
  }
  // The batch's weighted losses by name (their sum is the data loss), in float32 even under
  // autocast: ground truth per image, boxes [N, 4] normalised (ymin, xmin, ymax, xmax) to the
  // network input and classes [N] (1-based), crowd regions already removed.
  virtual std::map<std::string, at::Tensor> loss(const Outputs& outputs, const InputShape& input,
                                                 const std::vector<at::Tensor>& gt_boxes,
                                                 const std::vector<at::Tensor>& gt_classes) = 0;
  // Whether postprocess returns instance masks (Detections::masks).
  virtual bool predicts_masks() const { return false; }
  // Score conversion, box decoding and non-max suppression, on the CPU; boxes clipped to each
  // image and normalised to it (not to the padded input).
  virtual std::vector<detect::Detections> postprocess(const Outputs& outputs, const InputShape& input) const = 0;
  // What fine_tune_checkpoint_type "detection" leaves out (re-initialised): the class and box heads.
  virtual bool is_prediction_head_parameter(const std::string& name) const = 0;
  // What fine_tune_checkpoint_type "classification" restores: the feature extractor's variables
  // that the ImageNet classifier has (its restored_by_classification), nothing of the heads.
  virtual bool restored_by_classification(const std::string& name) const = 0;
  // The name of a restored variable in an Orchard checkpoint of the classifier (.pt; a TF-Slim
  // checkpoint goes through tf_name_map("classification")).
  virtual std::string classification_source_name(const std::string& name) const { return name; }
  // The TensorFlow names of the model's variables for a fine_tune_checkpoint_type: the OD API's
  // own checkpoints ("detection", "full"), a TF-Slim classification checkpoint of the backbone
  // ("classification"). An empty function where the architecture has no map.
  virtual models::TfNameMap tf_name_map(const std::string& checkpoint_type) const = 0;
  // Entries of the checkpoint signature besides the task and num_classes (e.g. model, anchors).
  virtual std::map<std::string, std::string> signature() const = 0;
  // For the start-up log line, e.g. "ssd_mobilenet_v2 (3 classes, 1917 anchors)".
  virtual std::string describe() const = 0;
  // The restored model as one graph file: `format` "onnx", "frozen_graph" (a TensorFlow GraphDef
  // as the OD API's exporter lays it out, docs/deploy.md), "tflite" (as export_tflite_ssd_graph.py
  // + the TFLite converter), or "inference_graph": `path` a directory that receives
  // frozen_inference_graph.pb and saved_model/, or "saved_model": `path` the SavedModel folder. An
  // orchard::Error where the architecture has no such export.
  virtual void export_graph(const std::string& format, const std::string& path, const GraphExportOptions& options) = 0;
};

// A meta-architecture's configuration, parsed from its pipeline.config message.
class MetaArchitectureConfig {
 public:
  virtual ~MetaArchitectureConfig() = default;
  virtual std::unique_ptr<MetaArchitecture> build(int64_t num_classes,
                                                  const data::DetectionInputOptions& input) const = 0;
};

struct ParsedModel {
  std::shared_ptr<const MetaArchitectureConfig> config;
  int64_t num_classes = 0;        // without the background
  int64_t height = 0, width = 0;  // the fixed input size (keep_aspect_ratio: max_dimension square)
  std::optional<data::KeepAspectRatioResize> keep_aspect_ratio;  // image_resizer.keep_aspect_ratio_resizer
  double l2_weight = 0;  // the conv_hyperparams' l2_regularizer weight (0: none)
};

struct MetaArchitectureEntry {
  std::string name;  // the `model` oneof case, e.g. "ssd"
  // The entry's message of an already validated pipeline.config (validate_detection_pipeline).
  std::function<ParsedModel(const object_detection::protos::TrainEvalPipelineConfig& pipeline)> parse;
  // The fields of its message it implements: one line per problem (detect::ModelValidator::check;
  // empty: no checks of its own). validate_detection_pipeline runs it when the `model` oneof holds
  // this entry's case.
  std::function<void(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                     std::vector<std::string>* problems)>
      validate;
};

// What every meta-architecture's parser reads alike, as the OD API's image_resizer_builder and
// post_processing_builder: the input size (fixed_shape_resizer, or keep_aspect_ratio_resizer's
// max_dimension square sample buffer) into `parsed`; batch_non_max_suppression into `nms`,
// returning the score converter's name ("SOFTMAX", "SIGMOID", "IDENTITY_WITH_LOGITS").
void parse_image_resizer(const object_detection::protos::ImageResizer& resizer, ParsedModel* parsed);
std::string parse_post_processing(const object_detection::protos::PostProcessing& post, detect::BatchNmsOptions* nms);

void register_meta_architecture(MetaArchitectureEntry entry);
// The entry of the pipeline's `model` oneof case; an orchard::Error naming the registered ones.
const MetaArchitectureEntry& meta_architecture_for(const object_detection::protos::TrainEvalPipelineConfig& pipeline);
// The shipped meta-architectures, one line each (tasks/detect/meta_architectures.cc); calling
// it again does nothing.
void register_builtin_meta_architectures();
// detect::validate_pipeline_config with the registered meta-architectures (the builtin ones
// registered first) as the `model` cases Orchard implements, each with its own validation.
void validate_detection_pipeline(const object_detection::protos::TrainEvalPipelineConfig& pipeline,
                                 const std::string& source_name);

}  // namespace orchard::tasks
