#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "orchard/engine/clock.h"
#include "orchard/engine/hooks/hooks.h"
#include "orchard/train/distributed.h"

namespace orchard::engine {

CheckpointHook::CheckpointHook(CheckpointHookOptions options, tasks::Task& task, torch::optim::Optimizer* optimizer,
                               train::MovingAverage* average, std::function<train::Meta(int64_t)> meta,
                               train::Distributed* distributed)
    : opt_(std::move(options)),
      task_(task),
      optimizer_(optimizer),
      average_(average),
      meta_(std::move(meta)),
      dist_(distributed),
      manager_(opt_.model_dir, opt_.max_to_keep) {}

void CheckpointHook::save(TrainState& state) {
  if (state.chief) {
    const std::string path = manager_.save(state.step, *task_.module(), optimizer_, meta_(state.step), average_);
    spdlog::info("saved checkpoint {}", path);
  }
  state.last_saved = state.step;
  state.saved_this_loop = true;
  last_save_time_ = monotonic_seconds();
}

void CheckpointHook::before_train(TrainState& state) {
  last_save_time_ = monotonic_seconds();
  if (state.step > 0) state.last_saved = state.step;  // the checkpoint it resumed from
}

void CheckpointHook::after_step(TrainState& state) {
  // The chief's clock decides, so every rank ends the loop and takes part in the evaluation that
  // follows: the trainer shares the chief's flag with the step's stop check.
  if (opt_.every_secs <= 0 || !state.chief || state.clock_checkpoint_due || state.step == state.total_steps) return;
  if (monotonic_seconds() - last_save_time_ >= opt_.every_secs) {
    state.clock_checkpoint_due = true;
    state.end_loop = true;
  }
}

void CheckpointHook::after_loop(TrainState& state) {
  // A multiple of every_steps passed in this loop (loops need not end on one: --iterations_per_loop,
  // or a loop cut short by the clock).
  const bool steps_due = opt_.every_steps > 0 && state.step / opt_.every_steps > state.loop_first / opt_.every_steps;
  if (steps_due || state.clock_checkpoint_due || state.step == state.total_steps) save(state);
  state.clock_checkpoint_due = false;
}

void CheckpointHook::after_train(TrainState& state) {
  if (state.last_saved != state.step) save(state);
}

void CheckpointHook::on_signal(TrainState& state, int signal) {
  if (state.last_saved != state.step) save(state);
  spdlog::warn("signal {}: stopped after step {}; the checkpoint of step {} resumes it", signal, state.step,
               state.step);
}

}  // namespace orchard::engine
