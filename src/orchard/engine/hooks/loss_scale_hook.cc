#include <spdlog/spdlog.h>

#include "orchard/engine/hooks/hooks.h"
#include "orchard/train/loss_scale.h"

namespace orchard::engine {

LossScaleHook::LossScaleHook(train::LossScaler& scaler, std::function<std::vector<at::Tensor>()> parameters)
    : scaler_(scaler), parameters_(std::move(parameters)) {}

void LossScaleHook::before_backward(TrainState&, at::Tensor& objective) { objective = scaler_.scale_loss(objective); }

bool LossScaleHook::after_backward(TrainState& state) {
  if (scaler_.unscale(parameters_())) return true;
  spdlog::info("step {}: non-finite gradients; skipped, loss scale lowered to {}", state.step + 1, scaler_.scale());
  return false;
}

}  // namespace orchard::engine
