// TensorFlow Lite files (.tflite, TensorFlow's flatbuffer schema: third_party/tflite/schema.fbs,
// compiled by Debian's flatc), as the TFLite converter writes them from a frozen graph: the
// same NHWC layers as the TensorFlow graphs (tf_graph_export.h) with TFLite's builtin ops
// (CONV_2D / DEPTHWISE_CONV_2D with the batch norm folded and ReLU / ReLU6 fused,
// MAX_POOL_2D, AVERAGE_POOL_2D, ADD, CONCATENATION, MEAN, FULLY_CONNECTED, SOFTMAX /
// LOGISTIC, PAD, RESHAPE), one image per run (batch 1).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "orchard/export/tf_graph_export.h"

namespace at {
class Tensor;
}
namespace orchard::detect {
class SsdModelImpl;
}

namespace orchard::exporting {

// An image classifier: input "images" float [1, H, W, 3], output "logits" (or "features") and,
// with options.probabilities, "probs" (TfGraphExportOptions' meaning).
void export_tflite(models::ImageModelImpl& model, const TfGraphExportOptions& options, const std::string& path);

// The SSD as export_tflite_ssd_graph.py + the TFLite converter write it: input
// "normalized_input_image_tensor" float [1, height, width, 3] (already scaled to the feature
// extractor's range), "raw_outputs/box_encodings" [1, A, 4] and "raw_outputs/class_predictions"
// [1, A, classes + 1] (after the score converter), and with add_postprocessing_op the custom op
// TFLite_Detection_PostProcess on them and the constant "anchors" [A, 4] (ycenter, xcenter,
// h, w), whose outputs "TFLite_Detection_PostProcess" (boxes [1, max_detections, 4], ymin, xmin,
// ymax, xmax, normalised), ":1" (classes, 0 = the first non-background class), ":2" (scores),
// ":3" (the count) are the graph's.
struct TfliteDetectionOptions {
  int64_t height = 300, width = 300;
  std::string score_converter = "SIGMOID";                 // SIGMOID | SOFTMAX | IDENTITY_WITH_LOGITS
  std::array<float, 4> box_coder_scales = {10, 10, 5, 5};  // y, x, height, width
  // export_tflite_ssd_graph.py's flags and the pipeline's batch_non_max_suppression.
  bool add_postprocessing_op = true;
  int64_t max_detections = 10, max_classes_per_detection = 1, detections_per_class = 100;
  bool use_regular_nms = false;
  float nms_score_threshold = 1e-8f, nms_iou_threshold = 0.6f;
  // uint8 (the converter's inference_type QUANTIZED_UINT8, input mean 128, std 128): the tensors
  // on the ranges quantization-aware training kept; the detection op's outputs stay float.
  bool quantized = false;
};
void export_tflite_ssd(detect::SsdModelImpl& model, const at::Tensor& anchors, const TfliteDetectionOptions& options,
                       const std::string& path);

}  // namespace orchard::exporting
