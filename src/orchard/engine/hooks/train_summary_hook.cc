#include "orchard/core/event_writer.h"
#include "orchard/engine/clock.h"
#include "orchard/engine/hooks/hooks.h"

namespace orchard::engine {

TrainSummaryHook::TrainSummaryHook(tasks::Task& task, std::function<double(int64_t)> schedule,
                                   train::Distributed* distributed)
    : task_(task), schedule_(std::move(schedule)), dist_(distributed) {}

void TrainSummaryHook::before_train(TrainState& state) {
  if (state.train_events) state.train_events->session_start(state.step);
}

void TrainSummaryHook::before_loop(TrainState& state) {
  state.loop_metrics.reset();
  loop_start_ = monotonic_seconds();
}

void TrainSummaryHook::after_loop(TrainState& state) {
  state.loop_metrics.add("replicas", 1.0);
  reduce_metrics(state.loop_metrics, dist_);
  state.train_metrics = task_.compute_metrics(state.loop_metrics, /*training=*/true);
  if (auto* w = state.train_events) {
    for (const auto& [k, v] : state.train_metrics) w->scalar(k, v, state.step);
    w->scalar("learning_rate", schedule_(state.step - 1), state.step);
    w->scalar("steps_per_second",
              static_cast<double>(state.step - state.loop_first) / (monotonic_seconds() - loop_start_), state.step);
    w->flush();
  }
}

}  // namespace orchard::engine
