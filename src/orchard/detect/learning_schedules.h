// The TF Object Detection API's learning rates (object_detection/utils/learning_schedules.py),
// as pure functions of the global step: optimizer.proto's constant_learning_rate,
// exponential_decay_learning_rate, manual_step_learning_rate and cosine_decay_learning_rate.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace orchard::detect {

using LearningRate = std::function<double(int64_t step)>;

LearningRate constant_learning_rate(double learning_rate);

// initial * decay_factor ^ ((step - burnin_steps) / decay_steps) (floored when staircase),
// never below min_learning_rate; during the first burnin_steps, burnin_learning_rate (0: the
// initial rate).
struct ExponentialDecay {
  double initial_learning_rate = 0.002;
  int64_t decay_steps = 4000000;
  double decay_factor = 0.95;
  bool staircase = true;
  double burnin_learning_rate = 0.0;
  int64_t burnin_steps = 0;
  double min_learning_rate = 0.0;
};
LearningRate exponential_decay(const ExponentialDecay& config);

// Piecewise constant: initial_learning_rate before the first boundary, then each (step,
// learning_rate) from its step on (steps increasing, the first > 0). With warmup, the rate
// grows linearly from the initial rate to the first scheduled one over [0, first step).
struct ManualStep {
  double initial_learning_rate = 0.002;
  std::vector<std::pair<int64_t, double>> schedule;
  bool warmup = false;
};
LearningRate manual_step(const ManualStep& config);

// Cosine decay from learning_rate_base to 0 at total_steps, after warmup_steps of linear
// warm-up from warmup_learning_rate and hold_base_rate_steps at the base rate; 0 after
// total_steps.
struct CosineDecay {
  double learning_rate_base = 0.002;
  int64_t total_steps = 4000000;
  double warmup_learning_rate = 0.0002;
  int64_t warmup_steps = 10000;
  int64_t hold_base_rate_steps = 0;
};
LearningRate cosine_decay(const CosineDecay& config);

}  // namespace orchard::detect
