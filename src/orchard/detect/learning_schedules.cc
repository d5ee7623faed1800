#include "orchard/detect/learning_schedules.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "orchard/core/error.h"

namespace orchard::detect {

LearningRate constant_learning_rate(double learning_rate) {
  return [learning_rate](int64_t) { return learning_rate; };
}

LearningRate exponential_decay(const ExponentialDecay& c) {
  if (c.decay_steps < 1) throw Error("exponential_decay_learning_rate.decay_steps must be positive");
  const double burnin = c.burnin_learning_rate == 0 ? c.initial_learning_rate : c.burnin_learning_rate;
  return [c, burnin](int64_t step) {
    if (step < c.burnin_steps) return burnin;
    double exponent = static_cast<double>(step - c.burnin_steps) / static_cast<double>(c.decay_steps);
    if (c.staircase) exponent = std::floor(exponent);
    return std::max(c.initial_learning_rate * std::pow(c.decay_factor, exponent), c.min_learning_rate);
  };
}

LearningRate manual_step(const ManualStep& c) {
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

LearningRate cosine_decay(const CosineDecay& c) {
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

}  // namespace orchard::detect
