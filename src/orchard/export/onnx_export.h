// ONNX export of the image classifiers (the ResNets, MobileNetV2 and Inception-v3), written from
// the model's own structure through the protobuf `onnx` schema (Debian's libonnx-dev). Opset 10, one graph
// input "images" (float [batch, 3, H, W], batch symbolic: the preprocessed input Orchard's
// classify feeds, or with include_preprocessing RGB pixel values in [0, 255]) and one output:
// "logits" [batch, classes], or "features" [batch, C] (the globally average-pooled feature
// vector, the seed's TF-Hub feature-vector export). Batch norms are folded into the
// convolutions before them (inference statistics), as serving graphs do.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "orchard/models/image_model.h"

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

// Writes `model` (a ResNet or Inception-v3, eval mode) to `path` atomically. Other models and
// unsupported layers are an Error.
void export_onnx(models::ImageModelImpl& model, const OnnxExportOptions& options, const std::string& path);

}  // namespace orchard::exporting
