// The engine's extension points (Detectron2's HookBase, orbit's Controller actions): the loop
// calls every hook, in the order they were given, at each of these points. A hook sees the
// shared TrainState and keeps its own state; it knows nothing of the task.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "orchard/engine/task.h"
#include "orchard/train/stats.h"

namespace orchard {
class EventWriter;
}

namespace orchard::engine {

// What the loop and its hooks share for one run.
struct TrainState {
  int64_t step = 0;        // steps done (after_step: including the one just taken)
  int64_t first_step = 0;  // where this run started (> 0 after a resume)
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 1;
  int64_t global_batch_size = 1;
  int64_t loop_first = 0;  // first step of the current host loop
  int world_size = 1;
  bool chief = true;

  // The last step's outputs: learning rate, the task's loss (detached; its total was
  // back-propagated), and whether the optimizer applied it (false: skipped by loss scaling).
  double lr = 0;
  tasks::Loss loss;
  bool applied = true;

  tasks::MetricSums loop_metrics;               // this host loop's training metric state
  std::map<std::string, double> train_metrics;  // computed from it at the end of each loop
  bool saved_this_loop = false;                 // a checkpoint was written at this loop's end
  // Set by a hook's after_step to end the host loop after this step (a time-based checkpoint is
  // due); the loop's end-of-loop work (summaries, checkpoint, evaluation) then runs early.
  bool end_loop = false;
  // A time-based checkpoint is due: set in after_step by the rank whose clock decides (the chief);
  // with several processes the trainer's per-step stop check (one all-reduce) gives every rank the
  // chief's value and ends the loop on all of them.
  bool clock_checkpoint_due = false;
  int64_t last_saved = -1, last_evaluated = -1;  // steps
  EventWriter* train_events = nullptr;           // null: no TensorBoard, or not the chief
  train::RunStats stats;
};

class Hook {
 public:
  virtual ~Hook() = default;
  virtual void before_train(TrainState&) {}
  virtual void before_loop(TrainState&) {}
  virtual void before_step(TrainState&) {}
  // Inside the step, around the backward pass: a hook may rewrite the objective (loss
  // scaling) and veto the optimizer step (non-finite gradients).
  virtual void before_backward(TrainState&, at::Tensor& /*objective*/) {}
  virtual bool after_backward(TrainState&) { return true; }
  virtual void after_step(TrainState&) {}
  virtual void after_loop(TrainState&) {}
  virtual void after_train(TrainState&) {}
  // A stop was requested (SIGTERM/SIGINT) and the step in progress has finished; the loop
  // ends after these calls with engine::Interrupted.
  virtual void on_signal(TrainState&, int /*signal*/) {}
};

}  // namespace orchard::engine
