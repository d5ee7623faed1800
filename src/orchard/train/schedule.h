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

// Parses "30,60,80" style lists.
std::vector<double> parse_double_list(const std::string& text, const std::string& flag);

}  // namespace orchard::train
