#include "orchard/train/loss_scale.h"

#include <torch/torch.h>

#include "orchard/core/error.h"

namespace orchard::train {

LossScaler::LossScaler(const std::string& spec, int64_t growth_interval)
    : scale_(128), dynamic_(spec.empty() || spec == "dynamic"), growth_interval_(growth_interval) {
  if (!dynamic_) {
    try {
      size_t used = 0;
      scale_ = std::stod(spec, &used);
      if (used != spec.size() || !(scale_ > 0)) throw std::invalid_argument(spec);
    } catch (const std::exception&) {
      throw Error("--loss_scale must be 'dynamic' or a positive number, not '" + spec + "'");
    }
  }
}

at::Tensor LossScaler::scale_loss(const at::Tensor& loss) const { return loss * scale_; }

bool LossScaler::unscale(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  bool finite = true;
  if (!grads.empty()) {
    std::vector<at::Tensor> checks;
    for (const auto& g : grads) checks.push_back(g.isfinite().all().reshape({1}));
    finite = torch::cat(checks).all().item<bool>();
  }
  if (!finite) {
    if (dynamic_) scale_ = std::max(scale_ / 2, 1.0);
    good_steps_ = 0;
    return false;
  }
  for (auto& g : grads) g.div_(scale_);
  if (dynamic_ && ++good_steps_ >= growth_interval_) {
    scale_ *= 2;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace orchard::train
