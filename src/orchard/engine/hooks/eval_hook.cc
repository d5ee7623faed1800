#include "orchard/engine/hooks/hooks.h"

namespace orchard::engine {

EvalHook::EvalHook(Evaluator& evaluator, EvalInputFactory input, int64_t every_steps, bool on_checkpoint)
    : evaluator_(evaluator), input_(std::move(input)), every_steps_(every_steps), on_checkpoint_(on_checkpoint) {}

void EvalHook::after_loop(TrainState& state) {
  const bool due = (every_steps_ > 0 && state.step % every_steps_ == 0) || (on_checkpoint_ && state.saved_this_loop);
  if (due && state.step < state.total_steps) {  // the last step's evaluation is after_train's
    state.stats.eval = evaluator_.evaluate(input_, state.step, /*summaries=*/true);
    state.last_evaluated = state.step;
  }
}

void EvalHook::after_train(TrainState& state) {
  if (state.last_evaluated == state.step) return;
  state.stats.eval = evaluator_.evaluate(input_, state.step, /*summaries=*/true);
  state.last_evaluated = state.step;
}

}  // namespace orchard::engine
