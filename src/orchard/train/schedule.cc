#include "orchard/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

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

Schedule constant_learning_rate(double learning_rate) {
  return [learning_rate](int64_t) { return learning_rate; };
}

Schedule exponential_decay(const ExponentialDecay& c) {
  if (c.decay_steps < 1) throw Error("exponential_decay_learning_rate.decay_steps must be positive");
  const double burnin = c.burnin_learning_rate == 0 ? c.initial_learning_rate : c.burnin_learning_rate;
  return [c, burnin](int64_t step) {
    if (step < c.burnin_steps) return burnin;
    double exponent = static_cast<double>(step - c.burnin_steps) / static_cast<double>(c.decay_steps);
    if (c.staircase) exponent = std::floor(exponent);
    return std::max(c.initial_learning_rate * std::pow(c.decay_factor, exponent), c.min_learning_rate);
  };
}

Schedule manual_step(const ManualStep& c) {
  for (size_t i = 0; i < c.schedule.size(); ++i) {
    if (c.schedule[i].first <= 0 || (i > 0 && c.schedule[i].first <= c.schedule[i - 1].first))
      throw Error("manual_step_learning_rate.schedule: steps must be positive and increasing (entry " +
                  std::to_string(i) + " has step " + std::to_string(c.schedule[i].first) + ")");
  }
  return [c](int64_t step) {
    if (c.schedule.empty()) return c.initial_learning_rate;
    if (step < c.schedule[0].first) {
      if (!c.warmup) return c.initial_learning_rate;
      const double slope = (c.schedule[0].second - c.initial_learning_rate) / static_cast<double>(c.schedule[0].first);
      return c.initial_learning_rate + slope * static_cast<double>(step);
    }
    double lr = c.schedule[0].second;
    for (const auto& [boundary, rate] : c.schedule)
      if (step >= boundary) lr = rate;
    return lr;
  };
}

Schedule cosine_decay(const CosineDecay& c) {
  if (c.total_steps < c.warmup_steps)
    throw Error("cosine_decay_learning_rate: total_steps must be at least warmup_steps");
  if (c.warmup_steps > 0 && c.learning_rate_base < c.warmup_learning_rate)
    throw Error("cosine_decay_learning_rate: learning_rate_base must be at least warmup_learning_rate");
  return [c](int64_t step) {
    if (step > c.total_steps) return 0.0;
    const double pi = std::acos(-1.0);
    const double span = static_cast<double>(c.total_steps - c.warmup_steps - c.hold_base_rate_steps);
    double lr = 0.5 * c.learning_rate_base *
                (1 + std::cos(pi * static_cast<double>(step - c.warmup_steps - c.hold_base_rate_steps) / span));
    if (c.hold_base_rate_steps > 0 && step < c.warmup_steps + c.hold_base_rate_steps) lr = c.learning_rate_base;
    if (c.warmup_steps > 0 && step < c.warmup_steps) {
      const double slope = (c.learning_rate_base - c.warmup_learning_rate) / static_cast<double>(c.warmup_steps);
      lr = c.warmup_learning_rate + slope * static_cast<double>(step);
    }
    return lr;
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
