// ONNX export of the image classifiers (the ResNets, MobileNetV2 and Inception-v3) and of the SSD
// detector (export_detection_onnx, below), written from the model's own structure through the protobuf `onnx` schema
// (Debian's libonnx-dev). Opset 10, one graph input "images" (float [batch, 3, H, W], batch symbolic: the preprocessed
// input Orchard's classify feeds, or with include_preprocessing RGB pixel values in [0, 255]) and one output: "logits"
// [batch, classes], or "features" [batch, C] (the globally average-pooled feature vector, the seed's TF-Hub
// feature-vector export). Batch norms are folded into the convolutions before them (inference statistics), as serving
// graphs do.
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

// Opset 10 (IR 5): read by every consumer still in use; its Clip takes the ReLU6 bounds as
// attributes, the form OpenCV 4.6 (Debian 12) reads, where opset 11+ moved them to inputs.
constexpr int64_t kOnnxOpset = 10;

struct OnnxExportOptions {
  int64_t image_size = 224;     // H = W of the graph input (documentation; convolutions take any)
  bool feature_vector = false;  // output the pooled features instead of the logits
  // The graph starts with the model's input scaling, pixel * scale - offset[c] (Orchard's
  // PreprocessOptions.scale / offset), so that it takes RGB values in [0, 255].
  bool include_preprocessing = false;
  float scale = 1.0f;
  std::array<float, 3> offset = {0, 0, 0};
};

// Writes `model` (a ResNet, MobileNetV2 or Inception-v3, eval mode) to `path` atomically. Other models and
// unsupported layers are an Error.
void export_onnx(models::ImageModelImpl& model, const OnnxExportOptions& options, const std::string& path);

// The SSD detector (backbone, extra layers, box and class heads, score conversion and box
// decoding; no non-max suppression: run it on the outputs, e.g. cv::dnn::NMSBoxes per class).
// Input "images" [batch, 3, height, width]: the fixed_shape_resizer's size, which the anchors
// are laid out for. Outputs, as the OD API's exporter names them:
//   raw_detection_boxes  [batch, A, 4]  decoded boxes (ymin, xmin, ymax, xmax), normalised to
//                                      [0, 1] by the image size, not clipped
//   raw_detection_scores [batch, A, num_classes + 1]  the score converter's output (column 0
//                                      the background)
struct DetectionOnnxOptions {
  int64_t height = 300, width = 300;
  bool include_preprocessing = false;  // RGB [0, 255] in: pixel * scale - offset[c] first
  float scale = 2.0f / 255.0f;
  std::array<float, 3> offset = {1, 1, 1};
  std::string score_converter = "SIGMOID";                 // SIGMOID | SOFTMAX | IDENTITY_WITH_LOGITS
  std::array<float, 4> box_coder_scales = {10, 10, 5, 5};  // y, x, height, width
};

// `anchors` [A, 4]: the task's anchors for height x width. Writes `path` atomically.
void export_detection_onnx(detect::SsdModelImpl& model, const at::Tensor& anchors, const DetectionOnnxOptions& options,
                           const std::string& path);

}  // namespace orchard::exporting
