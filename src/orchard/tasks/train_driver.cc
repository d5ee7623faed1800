#include "orchard/tasks/train_driver.h"

#include <torch/torch.h>

#include <utility>

#include "orchard/engine/task.h"

namespace orchard::tasks {

void TrainDriver::run() {
  const Setup s = setup();
  runtime_ = start_training(*s.runtime, s.global_batch_size, s.model_dir, s.clean);
  prepare();
  torch::manual_seed(s.seed);
  Task& task = build_task();

  engine::TrainerOptions options = trainer_options(s.options, *s.runtime, runtime_, s.model_dir, s.global_batch_size);
  configure(options);
  Optimization optimization = build_optimizer();
  const TrainInputs inputs = build_inputs(options);
  options.on_start = [this](int64_t step) {
    if (step == 0) fine_tune();
    if (runtime_.chief) write_run_files();
  };
  log_start(options);
  engine::Trainer trainer(options, task, std::move(optimization.optimizer), std::move(optimization.schedule));
  const train::RunStats stats = train_on_pipelines(trainer, task, inputs.train, inputs.eval, inputs.skip_eval,
                                                   s.stats_file, inputs.synthetic, inputs.eval_limit);
  finish(stats);
}

}  // namespace orchard::tasks
