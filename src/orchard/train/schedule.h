// Learning-rate schedules: pure functions of the global step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
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

// Parses "30,60,80" style lists.
std::vector<double> parse_double_list(const std::string& text, const std::string& flag);

}  // namespace orchard::train
