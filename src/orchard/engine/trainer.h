// The trainer: a task, an optimizer and a schedule run by the engine's loop (loop.h) with the
// standard hooks (hooks/hooks.h) chosen from TrainerOptions: host loops of steps_per_loop
// steps (cut short where an evaluation is due), logging every log_steps, train summaries per
// loop, checkpoints every checkpoint_every steps and at the end, evaluation every eval_every
// steps and at the end, resume from the newest checkpoint (model, optimizer, step, RNG and
// data position), and a checkpoint on SIGTERM/SIGINT.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orchard/data/pipeline.h"
#include "orchard/engine/evaluator.h"
#include "orchard/engine/hook.h"
#include "orchard/engine/task.h"
#include "orchard/train/distributed.h"
#include "orchard/train/schedule.h"
#include "orchard/train/stats.h"

namespace orchard::engine {

// Training input positioned at (epoch, batch within epoch), for exact resume.
using TrainInputFactory = std::function<BatchSource(int64_t start_epoch, int64_t start_batch)>;

struct TrainerOptions {
  std::string model_dir;
  int64_t global_batch_size = 32;
  int64_t steps_per_epoch = 1;
  int64_t total_steps = 1;
  int64_t steps_per_loop = 1;
  int64_t eval_every = 0;  // steps; 0 = only at the end
  bool skip_eval = false;
  bool enable_checkpoints = false;
  int64_t checkpoint_every = 0;      // steps; 0 = only at the end
  double checkpoint_every_secs = 0;  // also when this much time passed since the last one (0: never)
  bool eval_on_checkpoint = false;   // evaluate each time a checkpoint is written (TF Estimator)
  double clip_gradient_norm = 0;     // > 0: clip the global gradient norm (after the all-reduce)
  // > 0: keep an exponential moving average of the weights (see moving_average.h); evaluation
  // and checkpoints' "model" use the averages.
  double moving_average_decay = 0;
  // With a moving average: evaluate the trained weights too (logged, and summaries under
  // "training_weights/"), as torchvision's reference does beside its EMA model.
  bool eval_training_weights = false;
  int max_to_keep = 10;
  bool enable_tensorboard = true;
  int64_t log_steps = 100;
  int64_t profile_start = -1, profile_end = -1;  // inclusive global steps; Chrome trace in model_dir/train
  std::string dtype = "fp32";
  std::string loss_scale = "dynamic";  // fp16 only: "dynamic" or a fixed number
  std::string device = "cpu";
  // > 0: the intra-op threads follow the CPU this process gets, between 1 and this many
  // (ThreadGovernorHook); 0: they stay as configured.
  int adaptive_threads = 0;
  // Called once after restore, before training (e.g. to log the configuration).
  std::function<void(int64_t step)> on_start;
  // Data parallelism: gradients averaged over the group, metrics summed over it; only rank 0
  // writes checkpoints and summaries. Null: one process.
  std::shared_ptr<train::Distributed> distributed;
};

class Trainer {
 public:
  Trainer(TrainerOptions options, tasks::Task& task, std::unique_ptr<torch::optim::Optimizer> optimizer,
          train::Schedule schedule);
  ~Trainer();

  // Restores the newest checkpoint in model_dir if there is one; returns the step (0 if none).
  int64_t restore_latest();
  // Throws engine::Interrupted after a SIGTERM/SIGINT (a checkpoint written first when
  // checkpoints are enabled).
  train::RunStats train_and_evaluate(const TrainInputFactory& train_input, const EvalInputFactory& eval_input);
  // Evaluates the model as it is now; writes eval summaries at `step` when `summaries`.
  std::map<std::string, double> evaluate(const EvalInputFactory& eval_input, int64_t step, bool summaries);
  int64_t step() const { return step_; }
  const TrainerOptions& options() const;
  // Hooks of the run's own, called after the standard ones (Detectron2's register_hooks).
  void register_hooks(std::vector<std::shared_ptr<Hook>> hooks);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t step_ = 0;
};

}  // namespace orchard::engine
