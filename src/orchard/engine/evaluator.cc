#include "orchard/engine/evaluator.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "orchard/core/error.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"
#include "orchard/engine/clock.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/distributed.h"
#include "orchard/train/moving_average.h"
#include "orchard/train/runtime.h"

namespace orchard::engine {

// An all-gather of the rows as two sums: the row counts, then each rank's rows written at its
// offset into zeros.
void reduce_metrics(tasks::MetricSums& sums, train::Distributed* dist) {
  if (!dist || dist->world_size() == 1) return;
  const int world = dist->world_size();
  std::vector<at::Tensor> tensors;
  for (auto& [name, t] : sums.mutable_sums()) tensors.push_back(t);
  auto& rows = sums.mutable_rows();
  const int rank = dist->rank();
  auto counts = torch::zeros({static_cast<int64_t>(rows.size()), world}, torch::kDouble);
  int64_t i = 0;
  for (auto& [name, r] : rows) counts[i++][rank] = static_cast<double>(r.size(0));
  if (!rows.empty()) tensors.push_back(counts);
  dist->allreduce_sum(tensors);
  if (rows.empty()) return;
  std::vector<at::Tensor> gathered;
  i = 0;
  for (auto& [name, r] : rows) {
    const auto c = counts[i++];
    const auto total = static_cast<int64_t>(c.sum().item<double>());
    const auto offset = static_cast<int64_t>(c.slice(0, 0, rank).sum().item<double>());
    auto all = torch::zeros({total, r.size(1)}, torch::kDouble);
    all.narrow(0, offset, r.size(0)).copy_(r);
    gathered.push_back(all);
  }
  dist->allreduce_sum(gathered);
  i = 0;
  for (auto& [name, r] : rows) r = gathered[static_cast<size_t>(i++)];
}

Evaluator::Evaluator(EvaluatorOptions options, tasks::Task& task) : opt_(std::move(options)), task_(task) {}

Evaluator::~Evaluator() = default;

EventWriter* Evaluator::events() {
  const bool chief = !opt_.distributed || opt_.distributed->is_chief();
  if (!opt_.enable_tensorboard || !chief) return nullptr;
  if (!events_) events_ = std::make_unique<EventWriter>(join_path(opt_.model_dir, "eval"));
  return events_.get();
}

std::map<std::string, double> Evaluator::run(const EvalInputFactory& input, int64_t step, const char* what) {
  const torch::Device device(opt_.device);
  auto module = task_.module();
  module->eval();
  torch::NoGradGuard no_grad;
  tasks::MetricSums sums;
  task_.begin_evaluation();
  BatchSource source = input();
  data::Batch batch;
  const Stopwatch clock;  // after the input's start-up
  int64_t n = 0;
  while (source(&batch)) {
    batch.to(device);
    task_.prepare_batch(&batch);
    std::unique_ptr<tasks::Outputs> outputs;
    {
      train::AutocastGuard autocast(opt_.dtype, device.is_cuda());
      outputs = task_.forward(batch, tasks::Pass::kEval);
    }
    const auto loss = task_.loss(*outputs, batch, opt_.global_batch_size);
    task_.eval_step(*outputs, batch, loss, &sums);
    n += batch.size;
  }
  module->train();
  auto* dist = opt_.distributed.get();
  if (dist && dist->world_size() > 1) {
    std::vector<at::Tensor> count = {torch::scalar_tensor(static_cast<double>(n), torch::kDouble)};
    dist->allreduce_sum(count);
    n = static_cast<int64_t>(count[0].item<double>());
    if (sums.empty() && n > 0)
      throw Error("rank " + std::to_string(dist->rank()) + " has no evaluation data of its own");
    reduce_metrics(sums, dist);
  }
  if (n == 0) throw Error("evaluation data is empty");
  auto metrics = task_.compute_metrics(sums, /*training=*/false);
  std::string line;
  for (const auto& [k, v] : metrics) line += fmt::format(" {}={:.4f}", k, v);
  spdlog::info("{} at step {} over {} examples ({:.1f}s):{}", what, step, n, clock.seconds(), line);
  return metrics;
}

std::map<std::string, double> Evaluator::evaluate(const EvalInputFactory& input, int64_t step, bool summaries) {
  std::map<std::string, double> metrics;
  {
    train::AveragedWeightsGuard averaged(opt_.average);
    metrics = run(input, step, opt_.average ? "eval (moving average of the weights)" : "eval");
  }
  auto images = task_.take_summary_images();
  EventWriter* w = summaries ? events() : nullptr;
  if (w) {
    for (const auto& [k, v] : metrics) w->scalar(k, v, step);
    for (const auto& im : images) w->image(im.tag, im.png, im.height, im.width, step);
  }
  if (opt_.average && opt_.eval_training_weights) {
    const auto trained = run(input, step, "eval (training weights)");
    task_.take_summary_images();
    if (w)
      for (const auto& [k, v] : trained) w->scalar("training_weights/" + k, v, step);
  }
  if (w) w->flush();
  return metrics;
}

int64_t watch_checkpoints(const CheckpointWatch& w,
                          const std::function<void(const std::string& checkpoint, int64_t step)>& evaluate) {
  int64_t last_step = -1;
  int retries = 0;
  Stopwatch waiting;
  bool announced = false;  // this wait was logged
  while (true) {
    const std::string latest = train::CheckpointManager(w.checkpoint_dir).latest();
    const int64_t step = latest.empty() ? -1 : train::checkpoint_step(latest);
    if (latest.empty() || step == last_step || step < w.min_global_step) {
      if (w.run_once && latest.empty()) throw Error(w.checkpoint_dir + ": no checkpoint to evaluate");
      if (w.run_once && step < w.min_global_step)
        throw Error(latest + " is at step " + std::to_string(step) + ", before --min_global_step " +
                    std::to_string(w.min_global_step));
      if (!announced) {
        // Which step the job waits for, so that a silent evaluator is seen to be waiting.
        std::string next =
            last_step >= 0 ? "a checkpoint newer than step " + std::to_string(last_step) : "the first checkpoint";
        if (w.min_global_step > 0 && last_step < w.min_global_step)
          next = "a checkpoint at step " + std::to_string(w.min_global_step) + " or later";
        spdlog::info("waiting for {} in {}{} (polling every {}s, giving up after {}s without one)", next,
                     w.checkpoint_dir,
                     w.final_step > 0 ? " (the last is step " + std::to_string(w.final_step) + ")" : "", w.poll_secs,
                     w.timeout_secs);
        announced = true;
      }
      const double waited = waiting.seconds();
      if (waited > w.timeout_secs) {
        spdlog::info("no new checkpoint in {} for {:.0f}s; stopping", w.checkpoint_dir, waited);
        break;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(w.poll_secs));
      continue;
    }
    try {
      evaluate(latest, step);
    } catch (const std::exception& e) {
      if (!file_exists(latest)) {
        spdlog::warn("{} was removed before it could be evaluated (max_to_keep); moving on to a newer one", latest);
        continue;
      }
      if (w.max_eval_retries >= 0 && retries >= w.max_eval_retries) throw;
      ++retries;
      spdlog::warn("evaluation of {} failed ({}); retry {}{}", latest, e.what(), retries,
                   w.max_eval_retries < 0 ? "" : " of " + std::to_string(w.max_eval_retries));
      std::this_thread::sleep_for(std::chrono::duration<double>(w.poll_secs));
      continue;
    }
    last_step = step;
    retries = 0;
    waiting.reset();
    announced = false;
    if (w.run_once) break;
    if (w.final_step > 0 && step >= w.final_step) {
      spdlog::info("evaluated the checkpoint of the final step {}; done", step);
      break;
    }
  }
  return last_step;
}

int64_t restore_for_inference(tasks::Task& task, const std::string& model_dir, const std::string& checkpoint) {
  train::CheckpointManager manager(model_dir);
  const std::string path = checkpoint.empty() ? manager.latest() : checkpoint;
  if (path.empty()) throw Error(model_dir + ": no checkpoint to restore (did training write checkpoints?)");
  train::RestoreOptions ro;
  ro.load_optimizer = false;
  ro.load_rng = false;
  ro.expect = task.signature();
  auto [step, meta] = train::restore_checkpoint(path, *task.module(), nullptr, ro);
  spdlog::info("restored {} (step {})", path, step);
  return step;
}

CheckpointsEvaluated evaluate_checkpoints(const CheckpointWatch& watch, Evaluator& evaluator, tasks::Task& task,
                                          const EvalInputFactory& input) {
  CheckpointsEvaluated result;
  result.last_step = watch_checkpoints(watch, [&](const std::string& checkpoint, int64_t step) {
    restore_for_inference(task, watch.checkpoint_dir, checkpoint);
    result.metrics = evaluator.evaluate(input, step, /*summaries=*/true);
  });
  return result;
}

}  // namespace orchard::engine
