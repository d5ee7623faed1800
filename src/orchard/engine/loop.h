// The host loop (orbit's Controller): steps in loops of steps_per_loop, a loop also ending
// where an evaluation is due (so evaluations keep their interval when steps_per_loop does not
// divide it), hooks around every step and loop, and a requested stop honoured between steps.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "orchard/engine/hook.h"
#include "orchard/engine/interrupted.h"

namespace orchard::engine {

struct LoopOptions {
  int64_t steps_per_loop = 1;
  int64_t eval_every = 0;  // > 0: a loop also ends at each multiple of this
};

// The longest loop that ends at every multiple of each positive cadence (logging every N
// steps, checkpoints every M, ...): their greatest common divisor; 1 when none is positive.
int64_t steps_per_loop_for(std::initializer_list<int64_t> cadences);

// One training step at state.step (the step function sets lr, terms and applied).
using StepFn = std::function<void(TrainState&)>;
// Whether to stop after the current step; returns the signal number, 0 to go on. Every
// process of a group must get the same answer (see signals.h).
using StopFn = std::function<int()>;

// Runs from state.step to state.total_steps: before_train, the loops, after_train.
void run_loop(const LoopOptions& options, TrainState& state, const StepFn& step,
              const std::vector<std::shared_ptr<Hook>>& hooks, const StopFn& stop = {});

}  // namespace orchard::engine
