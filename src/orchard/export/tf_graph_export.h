// TensorFlow's serving formats for the image classifiers: a frozen inference graph (one
// GraphDef file, weights as Const nodes) and a SavedModel (saved_model.pb holding that graph
// under the "serve" tag with a "serving_default" signature, and an empty variables/ folder, as
// the Object Detection API's exporter writes its frozen SavedModels). Written through
// TensorFlow's own schemas (proto/orchard/proto/tensorflow/graph.proto).
//
// The graph is NHWC, TensorFlow's standard ops only: Placeholder "images" float
// [batch, H, W, 3], Conv2D / DepthwiseConv2dNative + BiasAdd (batch norms folded), Relu /
// Relu6, MaxPool / AvgPool, Pad where torch's symmetric padding is not TensorFlow's
// 'SAME' (TF's 'SAME' wherever it is the same arithmetic), AddV2, ConcatV2, Mean, MatMul; the
// output "logits" [batch, classes] or "features" [batch, C], and with `probabilities` "probs".
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "orchard/models/image_model.h"

namespace at {
class Tensor;
}
namespace orchard::detect {
class SsdModelImpl;
}

namespace orchard::exporting {

struct TfGraphExportOptions {
  int64_t image_size = 224;     // H = W of the graph input
  bool feature_vector = false;  // output the pooled features instead of the logits
  // The graph takes RGB values in [0, 255] and scales them first: pixel * scale - offset[c].
  bool include_preprocessing = false;
  float scale = 1.0f;
  std::array<float, 3> offset = {0, 0, 0};
  // "softmax" (a classifier) or "sigmoid" (a multi-label tagger): a second output "probs"
  // beside the logits, as the Model Garden's classification export gives; "" none.
  std::string probabilities;
};

// The frozen graph's bytes (a serialized tensorflow.GraphDef).
std::string tf_graph_def(models::ImageModelImpl& model, const TfGraphExportOptions& options);

// Writes the frozen graph to `path` atomically.
void export_frozen_graph(models::ImageModelImpl& model, const TfGraphExportOptions& options, const std::string& path);

// Writes `dir`/saved_model.pb (last, atomically) and `dir`/variables/. Signature
// "serving_default" (method tensorflow/serving/predict): input "inputs" = images:0, outputs
// "logits" (or "features") and, with probabilities, "probs". An Error if dir already holds a
// saved_model.pb, unless `replace`.
void export_saved_model(models::ImageModelImpl& model, const TfGraphExportOptions& options, const std::string& dir,
                        bool replace = false);

// The SSD detector (ssd_mobilenet_v1/v2, convolutional box predictor) as the OD API's
// export_inference_graph.py lays out its frozen graph:
//   image_tensor  uint8 [batch, h, w, 3] -> ToFloat -> Preprocessor/ResizeBilinear (to height x
//                 width) -> Preprocessor/mul, Preprocessor/sub (to the feature extractor's range)
//   the feature maps, BoxPredictor_i/{BoxEncodingPredictor,ClassPredictor}/BiasAdd,
//   concat / concat_1 (box encodings, class logits over all anchors),
//   raw_detection_boxes  [batch, A, 4]  decoded (ymin, xmin, ymax, xmax), normalised, not clipped
//   raw_detection_scores [batch, A, classes + 1]  the score converter's output,
// then the non-max suppression for a batch of one (nms_outputs in the .cc): detection_boxes,
// detection_scores, detection_classes, num_detections.
struct DetectionGraphOptions {
  int64_t height = 300, width = 300;  // the fixed_shape_resizer's size, which the anchors are for
  float scale = 2.0f / 255.0f;        // pixel * scale - offset[c]
  std::array<float, 3> offset = {1, 1, 1};
  std::string score_converter = "SIGMOID";                 // SIGMOID | SOFTMAX | IDENTITY_WITH_LOGITS
  std::array<float, 4> box_coder_scales = {10, 10, 5, 5};  // y, x, height, width
  // post_processing.batch_non_max_suppression
  float score_threshold = 1e-8f, iou_threshold = 0.6f;
  int64_t max_detections_per_class = 100, max_total_detections = 100;
};
// Writes the graph to `path` and, unless saved_model_dir is empty, as a SavedModel there (tag
// "serve", signature serving_default: input "inputs" = image_tensor:0, outputs detection_boxes,
// detection_scores, detection_classes, num_detections, raw_detection_boxes, raw_detection_scores,
// as export_inference_graph.py's saved_model/). Either may be empty.
void export_detection_frozen_graph(detect::SsdModelImpl& model, const at::Tensor& anchors,
                                   const DetectionGraphOptions& options, const std::string& path,
                                   const std::string& saved_model_dir = "");

}  // namespace orchard::exporting
