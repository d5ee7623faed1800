#include "orchard/train/moving_average.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "orchard/core/error.h"

namespace orchard::train {

MovingAverage::MovingAverage(torch::nn::Module& module, double decay) : decay_(decay) {
  if (!(decay > 0 && decay < 1)) throw Error("moving average decay must be in (0, 1), not " + std::to_string(decay));
  for (const auto& p : module.named_parameters()) names_.push_back(p.key()), live_.push_back(p.value());
  for (const auto& b : module.named_buffers()) names_.push_back(b.key()), live_.push_back(b.value());
  averages_.resize(live_.size());
  for (size_t i = 0; i < live_.size(); ++i) {
    if (!live_[i].is_floating_point()) continue;
    averages_[i] = live_[i].detach().clone();
    float_live_.push_back(live_[i]);
    float_averages_.push_back(averages_[i]);
  }
}

double MovingAverage::decay_at(int64_t step) const {
  return std::min(decay_, (1.0 + static_cast<double>(step)) / (10.0 + static_cast<double>(step)));
}

void MovingAverage::update(int64_t step) {
  torch::NoGradGuard no_grad;
  const double d = decay_at(step);
  // average += (1 - d) * (w - average), in two fused passes over all the tensors.
  auto diff = at::_foreach_sub(float_live_, float_averages_);
  at::_foreach_add_(float_averages_, diff, 1.0 - d);
}

void MovingAverage::reset() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < float_live_.size(); ++i) float_averages_[i].copy_(float_live_[i]);
}

void MovingAverage::swap() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < float_live_.size(); ++i) {
    auto held = float_live_[i].clone();
    float_live_[i].copy_(float_averages_[i]);
    float_averages_[i].copy_(held);
  }
}

NamedWeights MovingAverage::averages() const {
  NamedWeights out;
  for (size_t i = 0; i < names_.size(); ++i)
    out.emplace_back(names_[i], averages_[i].defined() ? averages_[i] : live_[i]);
  return out;
}

void MovingAverage::load(const NamedWeights& averages, const std::string& what) {
  std::map<std::string, at::Tensor> by_name(averages.begin(), averages.end());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (!averages_[i].defined()) continue;
    auto it = by_name.find(names_[i]);
    if (it == by_name.end()) throw Error(what + ": no moving average of '" + names_[i] + "'");
    if (it->second.sizes() != averages_[i].sizes()) {
      std::ostringstream msg;
      msg << what << ": the moving average of '" << names_[i] << "' has shape " << it->second.sizes() << ", not "
          << averages_[i].sizes();
      throw Error(msg.str());
    }
    averages_[i].copy_(it->second);
  }
}

}  // namespace orchard::train
