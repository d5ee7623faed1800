#include "orchard/engine/loop.h"

#include <algorithm>
#include <numeric>

namespace orchard::engine {

int64_t steps_per_loop_for(std::initializer_list<int64_t> cadences) {
  int64_t g = 0;
  for (const int64_t c : cadences)
    if (c > 0) g = std::gcd(g, c);
  return g > 0 ? g : 1;
}

void run_loop(const LoopOptions& options, TrainState& state, const StepFn& step,
              const std::vector<std::shared_ptr<Hook>>& hooks, const StopFn& stop) {
  const int64_t per_loop = std::max<int64_t>(1, options.steps_per_loop);
  for (auto& h : hooks) h->before_train(state);
  while (state.step < state.total_steps) {
    int64_t loop_end = std::min(state.total_steps, (state.step / per_loop + 1) * per_loop);
    if (options.eval_every > 0)
      loop_end = std::min(loop_end, (state.step / options.eval_every + 1) * options.eval_every);
    state.loop_first = state.step;
    state.saved_this_loop = false;
    state.end_loop = false;
    for (auto& h : hooks) h->before_loop(state);
    while (state.step < loop_end && !state.end_loop) {
      for (auto& h : hooks) h->before_step(state);
      step(state);
      ++state.step;
      for (auto& h : hooks) h->after_step(state);
      if (const int signal = stop ? stop() : 0) {
        for (auto& h : hooks) h->on_signal(state, signal);
        throw Interrupted(signal,
                          "stopped by signal " + std::to_string(signal) + " after step " + std::to_string(state.step));
      }
    }
    for (auto& h : hooks) h->after_loop(state);
  }
  for (auto& h : hooks) h->after_train(state);
}

}  // namespace orchard::engine
