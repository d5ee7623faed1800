// Learning-rate schedules, one type for every task: pure functions of the global step.
// The ResNet CTL seed's piecewise constant with warm-up, ML-Images' exponential warm-up, and
// the TF Object Detection API's four (object_detection/utils/learning_schedules.py:
// optimizer.proto's constant_learning_rate, exponential_decay_learning_rate,
// manual_step_learning_rate and cosine_decay_learning_rate); im2txt's staircase decay is
// exponential_decay with staircase, and classify's cosine is cosine_decay.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace orchard::train {

using Schedule = std::function<double(int64_t step)>;

// The ResNet CTL seed's PiecewiseConstantDecayWithWarmup (official/legacy/image_classification/
// resnet/common.py): rescaled = base_lr * batch_size / 256; linear warmup
// rescaled * step / warmup_steps over the first warmup_epochs; then rescaled * multiplier[i]
// after boundary_epochs[i]. Defaults: base 0.1, warmup 5, boundaries {30, 60, 80},
// multipliers {1, 0.1, 0.01, 0.001} (one more multiplier than boundaries).
struct PiecewiseWarmupConfig {
  double base_lr = 0.1;
  int64_t batch_size = 256;
  int64_t steps_per_epoch = 1;
  double warmup_epochs = 5;
  std::vector<double> boundary_epochs = {30, 60, 80};
  std::vector<double> multipliers = {1.0, 0.1, 0.01, 0.001};
};
Schedule piecewise_constant_with_warmup(const PiecewiseWarmupConfig& config);

// Tencent ML-Images train.py: piecewise constant lr x {1, 0.1, 0.01, 1e-3, 1e-4} with
// boundaries lr_decay_step x {1, 2, 3, 4} (0: no decay); before warmup_step, an exponential
// warm-up lr_warmup * warmup_decay_factor ^ floor(step / warmup_decay_step) (TF
// exponential_decay with staircase=True; warmup_decay_step 0 keeps lr_warmup). Both learning
// rates are for a batch of 256 and scale linearly with batch_size (the linear scaling rule).
struct MlImagesScheduleConfig {
  double lr = 0.1;
  int64_t batch_size = 256;
  int64_t lr_decay_step = 0;
  int64_t warmup_step = 0;
  double lr_warmup = 0.1;
  int64_t warmup_decay_step = 0;
  double warmup_decay_factor = 1.414;
};
Schedule ml_images_schedule(const MlImagesScheduleConfig& config);

// The OD API's constant_learning_rate.
Schedule constant_learning_rate(double learning_rate);

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
Schedule exponential_decay(const ExponentialDecay& config);

// Piecewise constant: initial_learning_rate before the first boundary, then each (step,
// learning_rate) from its step on (steps increasing, the first > 0). With warmup, the rate
// grows linearly from the initial rate to the first scheduled one over [0, first step).
struct ManualStep {
  double initial_learning_rate = 0.002;
  std::vector<std::pair<int64_t, double>> schedule;
  bool warmup = false;
};
Schedule manual_step(const ManualStep& config);

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
Schedule cosine_decay(const CosineDecay& config);

// Parses "30,60,80" style lists.
std::vector<double> parse_double_list(const std::string& text, const std::string& flag);

}  // namespace orchard::train
