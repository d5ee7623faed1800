// `orchard checkpoint inspect`: a TensorFlow checkpoint (core/tf_checkpoint.h) listed as
// inspect_checkpoint / tf.train.list_variables do, or mapped onto an Orchard model: an image
// model by name (TF-Slim's names), or a pipeline.config's detection model with what its
// fine_tune_checkpoint_type would restore and a verdict on whether the checkpoint fine-tunes it.
#pragma once

#include <cstdint>
#include <string>

namespace orchard::tasks {

struct CheckpointInspectOptions {
  std::string path;                  // a prefix (model.ckpt-1000), one of its files, or a directory
  bool json = false;                 // one JSON document instead of text
  bool stats = false;                // each variable's min, max, mean and std (reads the data shards)
  std::string tensor;                // only this variable, with its values
  std::string map;                   // an image model's name: match its variables
  std::string pipeline_config_path;  // match this config's detection model
  int64_t num_classes = 0;           // with map: the classifier's classes (0: the checkpoint's)
};

// Writes the listing or the mapping to standard output (warnings to the log); throws Error for
// an unreadable checkpoint, an unknown variable or model, or a bad pipeline.config.
void inspect_checkpoint(const CheckpointInspectOptions& options);

}  // namespace orchard::tasks
