// The one training recipe every task's `train` verb runs (as Detectron2's DefaultTrainer and
// the Model Garden's train_lib): a task derives from TrainDriver and supplies the parts, the
// driver puts them together in a fixed order.
//
//   setup()            flags checked, before anything is written; how to start
//   start_training     the runtime: device, cluster, threads, model_dir (command_support.h)
//   prepare()          the task config resolved and the data checked, before a model is built
//   torch::manual_seed(setup().seed)
//   build_task()       the model (its initialisers draw from the seeded generator)
//   configure()        the trainer options (cadence, steps), on top of trainer_options()
//   build_optimizer()  the optimizer over the task's parameters and the learning-rate schedule
//   build_inputs()     the training and evaluation pipelines
//   on start:          step 0 (a fresh run): fine_tune(); the chief: write_run_files()
//   log_start()        the run's one-line summary
//   engine::Trainer, train_on_pipelines (train, evaluate, stats file)
//   finish()           what follows a finished run (final metrics, an export)
//
// The order is part of Orchard's behaviour: the seed is set right before the model is built and
// nothing between draws random numbers, so runs are bit-identical to the recorded golden runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "orchard/data/pipeline.h"
#include "orchard/engine/trainer.h"
#include "orchard/tasks/command_support.h"
#include "orchard/train/schedule.h"
#include "orchard/train/stats.h"

namespace orchard::tasks {

class Task;

// The inputs of a run: the training pipeline (this replica's share, as training_input gives it),
// the evaluation pipeline, and what replaces or limits them.
struct TrainInputs {
  data::PipelineOptions train;
  data::PipelineOptions eval;
  bool skip_eval = false;
  int64_t eval_limit = 0;               // > 0: examples per worker in each evaluation
  engine::TrainInputFactory synthetic;  // when set, replaces the training pipeline
};

class TrainDriver {
 public:
  virtual ~TrainDriver() = default;

  // Runs the recipe above once; throws Error for bad flags, config or data.
  void run();

 protected:
  // What the driver needs of the flags to start.
  struct Setup {
    const RuntimeFlags* runtime = nullptr;  // the task's flags: --dtype, --num_gpus, ...
    std::string model_dir;
    int64_t global_batch_size = 0;
    bool clean = false;              // --clean: remove Orchard's files from model_dir first
    uint64_t seed = 0;               // torch's generator, set right before build_task
    engine::TrainerOptions options;  // the task's cadence flags (checkpoints, logging, summaries)
    std::string stats_file;          // the run's stats as JSON ("": none)
  };
  struct Optimization {
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    train::Schedule schedule;
  };

  virtual Setup setup() = 0;
  virtual void prepare() = 0;
  // The task object belongs to the derived driver (its hooks use its own type); the driver holds
  // a reference for the run.
  virtual Task& build_task() = 0;
  // `o` holds trainer_options(setup().options, ...): model_dir, the global batch, --dtype, device
  // and cluster.
  virtual void configure(engine::TrainerOptions& o) = 0;
  virtual Optimization build_optimizer() = 0;
  // `o`: the configured trainer options.
  virtual TrainInputs build_inputs(const engine::TrainerOptions& o) = 0;
  // At the start of training, once the newest checkpoint (if any) is restored, on every replica of
  // a fresh run (step 0): restore pretrained weights. Default: none.
  virtual void fine_tune() {}
  // On the chief at the start of training (after fine_tune): the configuration and what belongs
  // beside it (labels, vocabulary, label map), saved into model_dir. Saving it once the newest
  // checkpoint has been restored means a mismatched restart overwrites nothing.
  virtual void write_run_files() = 0;
  virtual void log_start(const engine::TrainerOptions& o) = 0;
  virtual void finish(const train::RunStats& stats) { (void)stats; }

  // The runtime start_training gave; valid from prepare() on.
  const TrainRuntime& runtime() const { return runtime_; }

 private:
  TrainRuntime runtime_;
};

}  // namespace orchard::tasks
