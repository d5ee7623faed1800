// ONNX export of the image classifiers, written from the model's own structure through the
// protobuf `onnx` schema (Debian's libonnx-dev). Opset 13, one graph input "images" (float
// [batch, 3, H, W], batch symbolic, the preprocessed input Orchard's classify feeds) and one
// output: "logits" [batch, classes], or "features" [batch, C] (the globally average-pooled
// feature vector, the seed's TF-Hub feature-vector export). Batch norms are folded into the
// convolutions before them (inference statistics), as serving graphs do.
#pragma once

#include <cstdint>
#include <string>

#include "orchard/models/resnet.h"

namespace orchard::exporting {

constexpr int64_t kOnnxOpset = 13;

struct OnnxExportOptions {
  int64_t image_size = 224;     // H = W of the graph input (documentation; convolutions take any)
  bool feature_vector = false;  // output the pooled features instead of the logits
};

// Writes `model` (a ResNet) to `path` atomically. Unsupported layers are an Error.
void export_resnet_onnx(models::ResNetImpl& model, const OnnxExportOptions& options, const std::string& path);

}  // namespace orchard::exporting
