// The engine's standard hooks, one source file each. The trainer (trainer.h) composes them;
// a run may add its own. Order matters where noted.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "orchard/engine/evaluator.h"
#include "orchard/engine/hook.h"
#include "orchard/train/checkpoint.h"

namespace torch::optim {
class Optimizer;
}
namespace orchard::train {
class Distributed;
class GradientReducer;
class LossScaler;
class MovingAverage;
}  // namespace orchard::train

namespace orchard::engine {

// Writes checkpoints at the end of a loop where a multiple of `every_steps` was passed, or every
// `every_secs` seconds (the clock is read after every step, and the loop ends early when it is
// due, as the Estimator's CheckpointSaverHook checks its timer each step; the chief's clock
// decides for all), at the end of training, and when a stop signal arrives.
struct CheckpointHookOptions {
  std::string model_dir;
  int max_to_keep = 10;
  int64_t every_steps = 0;  // 0: only at the end
  double every_secs = 0;    // 0: never by time
};
class CheckpointHook : public Hook {
 public:
  // `meta(step)`: what the checkpoint records beside the weights (signature, data position).
  CheckpointHook(CheckpointHookOptions options, tasks::Task& task, torch::optim::Optimizer* optimizer,
                 train::MovingAverage* average, std::function<train::Meta(int64_t)> meta,
                 train::Distributed* distributed);
  void before_train(TrainState& state) override;
  void after_step(TrainState& state) override;
  void after_loop(TrainState& state) override;
  void after_train(TrainState& state) override;
  void on_signal(TrainState& state, int signal) override;

 private:
  void save(TrainState& state);
  CheckpointHookOptions opt_;
  tasks::Task& task_;
  torch::optim::Optimizer* optimizer_;
  train::MovingAverage* average_;
  std::function<train::Meta(int64_t)> meta_;
  train::Distributed* dist_;
  train::CheckpointManager manager_;
  double last_save_time_ = 0;
};

// Evaluates every `every_steps` steps and after each checkpoint when `on_checkpoint` (at the
// end of a loop, before the last step), and once at the end of training. Put it after the
// CheckpointHook.
class EvalHook : public Hook {
 public:
  EvalHook(Evaluator& evaluator, EvalInputFactory input, int64_t every_steps, bool on_checkpoint);
  void after_loop(TrainState& state) override;
  void after_train(TrainState& state) override;

 private:
  Evaluator& evaluator_;
  EvalInputFactory input_;
  int64_t every_steps_;
  bool on_checkpoint_;
};

// The log lines every `log_steps` steps (loss, cross entropy, lr, examples/s, ETA), the
// progress line on a terminal, examples_per_second summaries, and the run's throughput and
// step timestamps for the stats JSON.
class LogHook : public Hook {
 public:
  // `data_loss_name`: what the progress line calls the data loss (the task's).
  // Besides the line every log_steps: on a terminal a live progress line; in a log a progress
  // line after the run's first step and whenever `progress_secs` passed without a line, so that
  // slow steps (a large detector on a CPU) never leave a log silent for minutes.
  LogHook(int64_t log_steps, train::Distributed* distributed, std::string data_loss_name, double progress_secs = 30);
  ~LogHook() override;
  void before_train(TrainState& state) override;
  void after_step(TrainState& state) override;
  void after_loop(TrainState& state) override;
  void after_train(TrainState& state) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// At the end of each loop: the training metrics of the loop (reduced over workers) into
// state.train_metrics, and with TensorBoard the train summaries (metrics, learning_rate,
// steps_per_second). Put it before the CheckpointHook.
class TrainSummaryHook : public Hook {
 public:
  TrainSummaryHook(tasks::Task& task, std::function<double(int64_t)> schedule, train::Distributed* distributed);
  void before_train(TrainState& state) override;
  void before_loop(TrainState& state) override;
  void after_loop(TrainState& state) override;

 private:
  tasks::Task& task_;
  std::function<double(int64_t)> schedule_;
  train::Distributed* dist_;
  double loop_start_ = 0;
};

// A Chrome trace of steps [first, last] (inclusive, 0-based global steps) into model_dir/train.
class ProfilerHook : public Hook {
 public:
  ProfilerHook(std::string model_dir, int64_t first, int64_t last);
  ~ProfilerHook() override;
  void before_step(TrainState& state) override;
  void after_step(TrainState& state) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Shared CPUs (issue 57): every `window_secs` of steps, the share of time the compute threads
// waited for a CPU another process held (core/cpu_contention.h) sets the intra-op threads between
// 1 and `max_threads` (ThreadGovernor). Only for a thread count Orchard chose (the CPU budget): a
// user's --num_threads or OMP_NUM_THREADS stays as given.
class ThreadGovernorHook : public Hook {
 public:
  ThreadGovernorHook(int max_threads, double window_secs = 1.0);
  ~ThreadGovernorHook() override;
  void before_train(TrainState& state) override;
  void after_step(TrainState& state) override;
  void after_train(TrainState& state) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Updates an exponential moving average of the weights after each applied step.
class MovingAverageHook : public Hook {
 public:
  explicit MovingAverageHook(train::MovingAverage& average) : average_(average) {}
  void after_step(TrainState& state) override;

 private:
  train::MovingAverage& average_;
};

// fp16 loss scaling: scales the objective, unscales the gradients and skips the optimizer
// step where they are not finite (the dynamic scale then falls).
class LossScaleHook : public Hook {
 public:
  LossScaleHook(train::LossScaler& scaler, std::function<std::vector<at::Tensor>()> parameters);
  void before_backward(TrainState& state, at::Tensor& objective) override;
  bool after_backward(TrainState& state) override;

 private:
  train::LossScaler& scaler_;
  std::function<std::vector<at::Tensor>()> parameters_;
};

// Data parallelism: every replica starts from rank 0's variables; the gradients are averaged
// over the group while the backward pass runs (bucketed all-reduces). Put it after the
// LossScaleHook: after_backward runs in reverse order, so gradients are averaged before they
// are unscaled.
class DataParallelHook : public Hook {
 public:
  DataParallelHook(train::Distributed& distributed, tasks::Task& task);
  ~DataParallelHook() override;
  void before_train(TrainState& state) override;
  void before_backward(TrainState& state, at::Tensor& objective) override;
  bool after_backward(TrainState& state) override;
  void after_train(TrainState& state) override;

 private:
  train::Distributed& dist_;
  tasks::Task& task_;
  std::unique_ptr<train::GradientReducer> reducer_;
  double started_ = 0;
};

}  // namespace orchard::engine
