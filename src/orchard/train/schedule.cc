#include "orchard/train/schedule.h"

#include <cmath>
#include <sstream>

#include "orchard/core/error.h"

namespace orchard::train {

Schedule piecewise_constant_with_warmup(const PiecewiseWarmupConfig& c) {
  if (c.multipliers.size() != c.boundary_epochs.size() + 1)
    throw Error("learning-rate schedule needs one more multiplier than boundaries (got " +
                std::to_string(c.multipliers.size()) + " multipliers, " + std::to_string(c.boundary_epochs.size()) +
                " boundaries)");
  for (size_t i = 1; i < c.boundary_epochs.size(); ++i)
    if (c.boundary_epochs[i] <= c.boundary_epochs[i - 1]) throw Error("learning-rate boundaries must increase");
  const double rescaled = c.base_lr * static_cast<double>(c.batch_size) / 256.0;
  const double warmup_steps = c.warmup_epochs * static_cast<double>(c.steps_per_epoch);
  std::vector<double> boundaries;
  for (double e : c.boundary_epochs) boundaries.push_back(e * static_cast<double>(c.steps_per_epoch));
  const std::vector<double> values = c.multipliers;
  return [=](int64_t step) {
    const double s = static_cast<double>(step);
    if (s < warmup_steps) return rescaled * s / warmup_steps;
    size_t i = 0;
    while (i < boundaries.size() && s > boundaries[i]) ++i;  // tf piecewise_constant: x <= b[0] -> v[0]
    return rescaled * values[i];
  };
}

Schedule ml_images_schedule(const MlImagesScheduleConfig& c) {
  if (c.lr_decay_step < 0 || c.warmup_step < 0 || c.warmup_decay_step < 0)
    throw Error("--lr_decay_step, --warmup_step and --warmup_decay_step must not be negative");
  const double scale = static_cast<double>(c.batch_size) / 256.0;
  return [=](int64_t step) {
    if (step < c.warmup_step) {
      const int64_t exponent = c.warmup_decay_step > 0 ? step / c.warmup_decay_step : 0;
      return scale * c.lr_warmup * std::pow(c.warmup_decay_factor, static_cast<double>(exponent));
    }
    static constexpr double kDecays[] = {1, 0.1, 0.01, 1e-3, 1e-4};
    int i = 0;
    if (c.lr_decay_step > 0)
      while (i < 4 && step > c.lr_decay_step * (i + 1)) ++i;  // tf piecewise_constant: x <= b[0] -> v[0]
    return scale * c.lr * kDecays[i];
  };
}

std::vector<double> parse_double_list(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      out.push_back(std::stod(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error(flag + ": '" + item + "' is not a number");
    }
  }
  return out;
}

}  // namespace orchard::train
