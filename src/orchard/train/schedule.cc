#include "orchard/train/schedule.h"

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
