// Checkpoints: model_dir/ckpt-<step>.pt, a pickle (torch.save-compatible zip) of
//   {"model": {name: tensor}, "optimizer": uint8 tensor (a libtorch archive), "step": int,
//    "meta": {str: str}, "rng": tensor}
// With a moving average of the weights, "model" holds the averages (what evaluation, export,
// prediction and fine-tuning use, as TF's exported averaged variables) and
// "training_weights" the weights being trained (what a resumed run continues from).
// written atomically (temp file, fsync, rename), plus model_dir/checkpoint, a text index
// naming the newest one (TF's format). The newest `max_to_keep` are kept.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "orchard/core/error.h"
#include "orchard/models/tf_names.h"
#include "orchard/models/tf_weights.h"

namespace orchard::train {

using Meta = std::map<std::string, std::string>;
class MovingAverage;

class CheckpointManager {
 public:
  CheckpointManager(std::string model_dir, int max_to_keep = 10);

  // Path of the newest checkpoint, or "" if none. Tolerates an index that names a file
  // that was deleted (falls back to scanning the directory).
  std::string latest() const;
  std::vector<std::pair<int64_t, std::string>> list() const;  // (step, path), ascending

  std::string save(int64_t step, torch::nn::Module& model, torch::optim::Optimizer* optimizer, const Meta& meta,
                   const MovingAverage* average = nullptr);

  // Deletes temporary files ("<name>.tmp-<pid>") that a killed writer left in model_dir.
  // Call once at start-up, before this process writes anything.
  int remove_stale_temporaries() const;

 private:
  std::string dir_;
  int max_to_keep_;
};

// A checkpoint file that cannot be read: truncated, or a record failing its zip CRC-32. Nothing
// was restored from it (the whole archive is read before any variable is set).
class UnreadableCheckpoint : public Error {
 public:
  using Error::Error;
};

struct RestoreOptions {
  bool load_optimizer = true;
  bool load_rng = true;
  // Keys of `expect` must match the checkpoint's meta exactly (e.g. model, num_classes).
  Meta expect;
  // Variables for which this returns true are left as they are (fine-tuning a backbone:
  // the head is re-initialised).
  std::function<bool(const std::string& name)> skip;
  // The checkpoint's name for a model variable (default: the same name), e.g. a detector's
  // "backbone.features.0.0.weight" restored from a classifier's "features.0.0.weight".
  std::function<std::string(const std::string& name)> source_name;
  // Variables the checkpoint lacks or holds with another shape are left as they are (reported
  // in `unavailable`, when set) instead of being errors: the OD API's
  // get_variables_available_in_checkpoint.
  bool skip_unavailable = false;
  std::vector<models::TfMatch>* unavailable = nullptr;  // orchard, tf (the checkpoint's name), shapes, status
  // Resuming training: the model gets the checkpoint's "training_weights" where it has them
  // (a run with a moving average), else "model".
  bool training_weights = false;
  // When set, gets the checkpoint's averages ("model" beside "training_weights"), or restarts
  // at the restored weights when the checkpoint has none.
  MovingAverage* average = nullptr;
  // When set, filled with the model variables restored and skipped (for a report).
  std::vector<std::string>* restored = nullptr;
  std::vector<std::string>* skipped = nullptr;
};

// Restores model parameters/buffers (every one must be present with the same shape; errors
// name the variable), and optionally optimizer and RNG state. Returns {step, meta}.
std::pair<int64_t, Meta> restore_checkpoint(const std::string& path, torch::nn::Module& model,
                                            torch::optim::Optimizer* optimizer, const RestoreOptions& options);

// Fine-tuning: the weights of part of a model from a checkpoint (a file, or a model_dir's
// newest), e.g. a backbone from a classifier with the head left as initialised. `flag` names
// the setting in errors ("--fine_tune_checkpoint ..."). Variables for which `skip` is true
// are left alone; `source_name` maps a model name to the checkpoint's. Returns the file read
// and the variables restored and skipped.
// A TensorFlow checkpoint (core/tf_checkpoint.h: a prefix, one of its files, a directory) is
// read through `tf_map`, the model's TensorFlow names (an error naming the flag without one);
// `unused` then lists its variables the model does not take.
struct PartialRestore {
  std::string path;
  std::vector<std::string> restored, skipped, unused;
  // With skip_unavailable: the wanted variables the checkpoint lacks (kMissing) or holds with
  // another shape (kShapeMismatch), left as initialised. `tf` is the checkpoint's name, `tf_shape`
  // its shape there (a TensorFlow checkpoint's in its layout: torch_to_tf_shape of
  // `orchard_shape` compares with it).
  std::vector<models::TfMatch> unavailable;
  bool tensorflow = false;
};
// `skip_unavailable`: variables the checkpoint lacks or holds with another shape are left as
// initialised and listed in `unavailable` instead of being errors.
PartialRestore restore_part(const std::string& checkpoint, const std::string& flag, torch::nn::Module& model,
                            std::function<bool(const std::string& name)> skip,
                            std::function<std::string(const std::string& name)> source_name = {},
                            const models::TfNameMap& tf_map = {}, bool skip_unavailable = false);

// Step number encoded in "ckpt-<step>.pt", or -1.
int64_t checkpoint_step(const std::string& path);

// A checkpoint named as TensorFlow's tools name one (export_inference_graph's
// --trained_checkpoint_prefix): an existing file as it is; a prefix "dir/model.ckpt-N" or
// "dir/ckpt-N" as dir/ckpt-N.pt; otherwise an Error saying what was looked for.
std::string resolve_checkpoint_prefix(const std::string& path);

}  // namespace orchard::train
