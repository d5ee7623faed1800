#include "orchard/engine/hooks/hooks.h"
#include "orchard/train/moving_average.h"

namespace orchard::engine {

void MovingAverageHook::after_step(TrainState& state) {
  if (state.applied) average_.update(state.step);  // the 1-based number of the step just taken
}

}  // namespace orchard::engine
