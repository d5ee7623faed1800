// Exponential moving average of a model's weights (TF's tf.train.ExponentialMovingAverage with
// num_updates = the global step, as TF Model Garden's `ema` and the OD API's
// `use_moving_average` apply it; torchvision's reference `--model-ema` likewise). After each
// optimizer step n (1-based):
//   decay_n = min(decay, (1 + n) / (10 + n));  average = decay_n * average + (1 - decay_n) * w
// over every floating-point parameter and buffer (batch-norm statistics too, as torchvision's
// ExponentialMovingAverage with use_buffers=True); integer buffers are taken as they are.
// Evaluation, export and prediction use the averages (swap() them in and out).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace orchard::train {

// (name, tensor) for every parameter then every buffer of a module, in its own order.
using NamedWeights = std::vector<std::pair<std::string, at::Tensor>>;

class MovingAverage {
 public:
  // Starts the averages at the module's current values. 0 < decay < 1.
  MovingAverage(torch::nn::Module& module, double decay);

  double decay() const { return decay_; }
  // The decay used for the update after optimizer step `step` (1-based).
  double decay_at(int64_t step) const;
  void update(int64_t step);
  // Restarts the averages at the module's current values.
  void reset();
  // Exchanges the module's values with the averages; a second call undoes it.
  void swap();
  // The averages under the module's names (integer buffers: the module's own tensors).
  NamedWeights averages() const;
  // Sets the average of each named weight (every float weight of the module must be present).
  void load(const NamedWeights& averages, const std::string& what);

 private:
  double decay_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> live_;                         // the module's tensors, all of them
  std::vector<at::Tensor> averages_;                     // aligned with live_; undefined for integer buffers
  std::vector<at::Tensor> float_live_, float_averages_;  // the averaged pairs, for the foreach ops
};

// RAII: the averages are in the module for the guard's lifetime (no-op for a null average).
class AveragedWeightsGuard {
 public:
  explicit AveragedWeightsGuard(MovingAverage* average) : average_(average) {
    if (average_) average_->swap();
  }
  ~AveragedWeightsGuard() {
    if (average_) average_->swap();
  }
  AveragedWeightsGuard(const AveragedWeightsGuard&) = delete;
  AveragedWeightsGuard& operator=(const AveragedWeightsGuard&) = delete;

 private:
  MovingAverage* average_;
};

}  // namespace orchard::train
