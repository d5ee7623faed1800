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

}  // namespace orchard::exporting
