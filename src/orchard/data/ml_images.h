// Multi-label records in the Tencent ML-Images schema (data/tfrecord.py of that project):
//   width, height (int64), image (encoded JPEG/PNG), name (bytes), and label: the raw bytes
//   of class_num little-endian float32 values (1 positive, 0 negative, anything else, e.g.
//   -1, unknown), as tf.decode_raw(label, tf.float32) reads them.
#pragma once

#include "orchard/data/pipeline.h"
#include "orchard/data/preprocess.h"

namespace orchard::data {

struct MlImagesParseOptions {
  PreprocessOptions preprocess;
  bool training = true;
  int64_t class_num = 1000;
};

// The image and one field, "labels": float32 [class_num] (1 positive, 0 negative, else unknown).
SampleSpec ml_images_spec(int image_size, bool channels_last, int64_t class_num);
// Writes the label vector to "labels"; a label of another length is a DataError naming
// the record.
ParseFn make_ml_images_parser(const MlImagesParseOptions& options);

// The label bytes for a label vector (for data tools and tests).
std::string ml_images_label_bytes(const std::vector<float>& labels);

}  // namespace orchard::data
