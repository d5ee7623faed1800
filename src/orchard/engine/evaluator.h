// Evaluation without an optimizer (orbit's Evaluator): one pass of a task's model over an
// input, metric state reduced over the workers, summaries at a step; and the continuous
// evaluation of new checkpoints (TF's checkpoints_iterator) that `eval` commands and
// model_main's evaluation job use.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "orchard/data/pipeline.h"
#include "orchard/engine/task.h"

namespace orchard {
class EventWriter;
}
namespace orchard::train {
class Distributed;
class MovingAverage;
}  // namespace orchard::train

namespace orchard::engine {

// Yields batches; false at the end of the data.
using BatchSource = std::function<bool(data::Batch*)>;
using EvalInputFactory = std::function<BatchSource()>;

struct EvaluatorOptions {
  std::string model_dir;           // summaries go to model_dir/eval
  int64_t global_batch_size = 32;  // the loss's normaliser
  std::string device = "cpu";
  std::string dtype = "fp32";
  bool enable_tensorboard = false;
  // Null: one process. Otherwise every rank evaluates its shard and the metrics are merged.
  std::shared_ptr<train::Distributed> distributed;
  // With a moving average: evaluate the averages, and the trained weights too when
  // eval_training_weights (summaries under "training_weights/").
  train::MovingAverage* average = nullptr;
  bool eval_training_weights = false;
};

// Sums the metric state over all ranks (every rank holds the same names) and concatenates
// the rows in rank order. No-op for a single process.
void reduce_metrics(tasks::MetricSums& sums, train::Distributed* distributed);

class Evaluator {
 public:
  Evaluator(EvaluatorOptions options, tasks::Task& task);
  ~Evaluator();

  // Evaluates the model as it is now, logs the metrics, and writes eval summaries (and the
  // task's summary images) at `step` when `summaries`.
  std::map<std::string, double> evaluate(const EvalInputFactory& input, int64_t step, bool summaries);

 private:
  std::map<std::string, double> run(const EvalInputFactory& input, int64_t step, const char* what);
  EventWriter* events();

  EvaluatorOptions opt_;
  tasks::Task& task_;
  std::unique_ptr<EventWriter> events_;
};

// Continuous evaluation (TF's checkpoints_iterator, as model_lib.continuous_eval and im2txt's
// evaluate.py use it): evaluate the newest checkpoint of checkpoint_dir, then each newer one,
// until the one of final_step (or once with run_once, or after timeout_secs without a new
// one). A checkpoint deleted by keep-N before it is read is skipped; a failed evaluation is
// retried max_eval_retries times (negative: always). Returns the last evaluated step (-1: none).
struct CheckpointWatch {
  std::string checkpoint_dir;
  bool run_once = false;
  int max_eval_retries = 0;
  double timeout_secs = 3600;
  double poll_secs = 2;
  int64_t final_step = 0;       // > 0: stop after evaluating this step
  int64_t min_global_step = 0;  // checkpoints before this step are not evaluated (im2txt)
};
int64_t watch_checkpoints(const CheckpointWatch& watch,
                          const std::function<void(const std::string& checkpoint, int64_t step)>& evaluate);

// Restores the model weights of `checkpoint` (default: the newest in model_dir) for eval or
// inference; the checkpoint must match the task's signature. Returns its global step.
int64_t restore_for_inference(tasks::Task& task, const std::string& model_dir, const std::string& checkpoint);

// The continuous evaluation job: each checkpoint `watch` yields, restored into the task's
// model and evaluated with summaries at its step. Returns the last step (-1: none) and its
// metrics.
struct CheckpointsEvaluated {
  int64_t last_step = -1;
  std::map<std::string, double> metrics;
};
CheckpointsEvaluated evaluate_checkpoints(const CheckpointWatch& watch, Evaluator& evaluator, tasks::Task& task,
                                          const EvalInputFactory& input);

}  // namespace orchard::engine
