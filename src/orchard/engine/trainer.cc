#include "orchard/engine/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <csignal>
#include <filesystem>
#include <tuple>

#include "orchard/core/error.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"
#include "orchard/engine/clock.h"
#include "orchard/engine/hooks/hooks.h"
#include "orchard/engine/loop.h"
#include "orchard/engine/signals.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/loss_scale.h"
#include "orchard/train/moving_average.h"
#include "orchard/train/runtime.h"

namespace orchard::engine {

struct Trainer::Impl {
  TrainerOptions opt;
  tasks::Task& task;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  train::Schedule schedule;
  torch::Device device;
  std::unique_ptr<train::LossScaler> scaler;      // fp16 only
  std::unique_ptr<train::MovingAverage> average;  // with moving_average_decay > 0
  std::unique_ptr<Evaluator> evaluator;
  std::vector<std::shared_ptr<Hook>> extra_hooks;

  Impl(TrainerOptions o, tasks::Task& t, std::unique_ptr<torch::optim::Optimizer> optim, train::Schedule s)
      : opt(std::move(o)), task(t), optimizer(std::move(optim)), schedule(std::move(s)), device(opt.device) {
    if (opt.dtype == "fp16" || opt.dtype == "float16") scaler = std::make_unique<train::LossScaler>(opt.loss_scale);
  }

  bool chief() const { return !opt.distributed || opt.distributed->is_chief(); }
  int world() const { return opt.distributed ? opt.distributed->world_size() : 1; }

  train::Meta meta(int64_t step) const {
    train::Meta m = task.signature();
    m["epoch"] = std::to_string(step / std::max<int64_t>(1, opt.steps_per_epoch));
    m["batch_in_epoch"] = std::to_string(step % std::max<int64_t>(1, opt.steps_per_epoch));
    m["global_batch_size"] = std::to_string(opt.global_batch_size);
    if (scaler) m["loss_scale"] = std::to_string(scaler->scale());
    return m;
  }

  // Every process stops after the same step: with several, the signal flags are summed, and in
  // the same all-reduce the chief's time-based checkpoint flag reaches every rank.
  int stop_requested(TrainState& s) {
    if (world() == 1) return stop_signal();
    const auto flags =
        torch::tensor({static_cast<double>(stop_signal()), s.clock_checkpoint_due ? 1.0 : 0.0}, torch::kDouble);
    std::vector<at::Tensor> reduced = {flags};
    opt.distributed->allreduce_sum(reduced);
    if (reduced[0][1].item<double>() > 0) {
      s.clock_checkpoint_due = true;
      s.end_loop = true;
    }
    const int sum = static_cast<int>(reduced[0][0].item<double>());
    return sum == 0 ? 0 : (stop_signal() != 0 ? stop_signal() : SIGTERM);
  }

  std::vector<std::shared_ptr<Hook>> hooks(const EvalInputFactory& eval_input) {
    std::vector<std::shared_ptr<Hook>> h;
    auto module = task.module();
    if (scaler) h.push_back(std::make_shared<LossScaleHook>(*scaler, [module] { return module->parameters(); }));
    if (world() > 1) h.push_back(std::make_shared<DataParallelHook>(*opt.distributed, task));
    if (average) h.push_back(std::make_shared<MovingAverageHook>(*average));
    if (opt.profile_start >= 0)
      h.push_back(std::make_shared<ProfilerHook>(opt.model_dir, opt.profile_start, opt.profile_end));
    if (opt.adaptive_threads > 0) h.push_back(std::make_shared<ThreadGovernorHook>(opt.adaptive_threads));
    h.push_back(std::make_shared<LogHook>(opt.log_steps, opt.distributed.get(), task.data_loss_name()));
    h.push_back(std::make_shared<TrainSummaryHook>(task, schedule, opt.distributed.get()));
    if (opt.enable_checkpoints) {
      CheckpointHookOptions c;
      c.model_dir = opt.model_dir;
      c.max_to_keep = opt.max_to_keep;
      c.every_steps = opt.checkpoint_every;
      c.every_secs = opt.checkpoint_every_secs;
      h.push_back(std::make_shared<CheckpointHook>(
          c, task, optimizer.get(), average.get(), [this](int64_t step) { return meta(step); }, opt.distributed.get()));
    }
    if (!opt.skip_eval && eval_input)
      h.push_back(std::make_shared<EvalHook>(*evaluator, eval_input, opt.eval_every, opt.eval_on_checkpoint));
    h.insert(h.end(), extra_hooks.begin(), extra_hooks.end());
    return h;
  }
};

Trainer::Trainer(TrainerOptions options, tasks::Task& task, std::unique_ptr<torch::optim::Optimizer> optimizer,
                 train::Schedule schedule)
    : impl_(std::make_unique<Impl>(std::move(options), task, std::move(optimizer), std::move(schedule))) {
  auto& m = *impl_;
  ensure_writable_dir(m.opt.model_dir);
  task.module()->to(m.device);
  if (m.opt.moving_average_decay > 0)
    m.average = std::make_unique<train::MovingAverage>(*task.module(), m.opt.moving_average_decay);
  EvaluatorOptions e;
  e.model_dir = m.opt.model_dir;
  e.global_batch_size = m.opt.global_batch_size;
  e.device = m.opt.device;
  e.dtype = m.opt.dtype;
  e.enable_tensorboard = m.opt.enable_tensorboard;
  e.distributed = m.opt.distributed;
  e.average = m.average.get();
  e.eval_training_weights = m.opt.eval_training_weights;
  m.evaluator = std::make_unique<Evaluator>(e, task);
}

Trainer::~Trainer() = default;

int64_t Trainer::restore_latest() {
  auto& m = *impl_;
  train::CheckpointManager checkpoints(m.opt.model_dir, m.opt.max_to_keep);
  if (m.chief()) {  // only the writer may clean up after a killed writer
    if (int n = checkpoints.remove_stale_temporaries())
      spdlog::info("removed {} temporary files left by an interrupted run", n);
  }
  // Newest first: the index's choice, then the others by step. A damaged one (a machine that
  // died mid-write on a filesystem without atomic rename, a bad disk) is reported and the one
  // before it used; a checkpoint of another model is still an error.
  std::vector<std::string> candidates;
  if (const std::string latest = checkpoints.latest(); !latest.empty()) candidates.push_back(latest);
  const auto all = checkpoints.list();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (candidates.empty() || it->second != candidates.front()) candidates.push_back(it->second);
  train::RestoreOptions ro;
  ro.expect = m.task.signature();
  ro.training_weights = true;
  ro.average = m.average.get();
  std::string latest;
  int64_t step = 0;
  train::Meta meta;
  for (const auto& path : candidates) {
    try {
      std::tie(step, meta) = train::restore_checkpoint(path, *m.task.module(), m.optimizer.get(), ro);
      latest = path;
      break;
    } catch (const train::UnreadableCheckpoint& e) {
      spdlog::error("{}; resuming from the checkpoint before it", e.what());
    }
  }
  if (latest.empty()) {
    if (candidates.empty()) return step_ = 0;
    throw Error(m.opt.model_dir + ": none of its " + std::to_string(candidates.size()) +
                " checkpoints can be read (see above); remove them, or start over with --clean");
  }
  auto it = meta.find("global_batch_size");
  if (it != meta.end() && it->second != std::to_string(m.opt.global_batch_size))
    spdlog::warn(
        "{} was trained with batch size {}; continuing with {} (the data position is re-derived from the step)", latest,
        it->second, m.opt.global_batch_size);
  if (auto ls = meta.find("loss_scale"); ls != meta.end() && m.scaler && m.scaler->dynamic())
    m.scaler->set_scale(std::stod(ls->second));
  spdlog::info("resumed from {} at step {}", latest, step);
  return step_ = step;
}

const TrainerOptions& Trainer::options() const { return impl_->opt; }

void Trainer::register_hooks(std::vector<std::shared_ptr<Hook>> hooks) {
  impl_->extra_hooks.insert(impl_->extra_hooks.end(), hooks.begin(), hooks.end());
}

std::map<std::string, double> Trainer::evaluate(const EvalInputFactory& eval_input, int64_t step, bool summaries) {
  return impl_->evaluator->evaluate(eval_input, step, summaries);
}

train::RunStats Trainer::train_and_evaluate(const TrainInputFactory& train_input, const EvalInputFactory& eval_input) {
  auto& m = *impl_;
  auto module = m.task.module();
  module->train();
  install_stop_handlers();
  const int64_t spe = std::max<int64_t>(1, m.opt.steps_per_epoch);

  TrainState state;
  state.step = state.first_step = restore_latest();
  if (m.opt.on_start) m.opt.on_start(state.step);
  state.total_steps = m.opt.total_steps;
  state.steps_per_epoch = spe;
  state.global_batch_size = m.opt.global_batch_size;
  state.world_size = m.world();
  state.chief = m.chief();
  std::unique_ptr<EventWriter> train_events;
  if (m.opt.enable_tensorboard && m.chief()) {
    train_events = std::make_unique<EventWriter>(join_path(m.opt.model_dir, "train"));
    state.train_events = train_events.get();
  }
  const auto hooks = m.hooks(eval_input);

  BatchSource source;
  if (state.step < state.total_steps) source = train_input(state.step / spe, state.step % spe);
  bool position_warned = false;
  // The task's training step: forward, loss, backward (hooks around it), optimizer step.
  auto train_step = [&](TrainState& s) {
    data::Batch batch;
    if (!source(&batch)) throw Error("training input ended at step " + std::to_string(s.step));
    if ((batch.index_in_epoch != s.step % spe || batch.epoch != s.step / spe) && !position_warned) {
      // Only skipped corrupt records shorten an epoch; a resume then re-derives the
      // position from the step and may see a few records twice or not at all.
      spdlog::warn(
          "input position (epoch {}, batch {}) differs from step {} (epoch {}, batch {}): an epoch "
          "held fewer batches than counted (skipped records?)",
          batch.epoch, batch.index_in_epoch, s.step, s.step / spe, s.step % spe);
      position_warned = true;
    }
    s.lr = m.schedule(s.step);
    for (auto& group : m.optimizer->param_groups()) group.options().set_lr(s.lr);
    batch.to(m.device);
    m.task.prepare_batch(&batch);
    std::unique_ptr<tasks::Outputs> outputs;
    {
      train::AutocastGuard autocast(m.opt.dtype, m.device.is_cuda());
      outputs = m.task.forward(batch, tasks::Pass::kTrain);
    }
    const auto loss = m.task.loss(*outputs, batch, m.opt.global_batch_size);
    m.optimizer->zero_grad();
    // Each replica's data loss is its share of the global batch; the reducer averages the
    // gradients, so scaling that share by the number of replicas makes the result their sum.
    // The L2 term is the whole model's on every replica: it stays as it is, so the average
    // counts it once (the seed adds l2_loss / num_replicas before a summing all-reduce).
    auto objective = loss.total();
    if (s.world_size > 1) {
      const auto data = loss.data * static_cast<double>(s.world_size);
      objective = loss.regularizer.defined() ? data + loss.regularizer : data;
    }
    for (auto& h : hooks) h->before_backward(s, objective);
    objective.backward();
    bool apply = true;
    for (auto it = hooks.rbegin(); it != hooks.rend(); ++it) apply = (*it)->after_backward(s) && apply;
    if (apply) {
      if (m.opt.clip_gradient_norm > 0)
        torch::nn::utils::clip_grad_norm_(module->parameters(), m.opt.clip_gradient_norm);
      m.optimizer->step();
    }
    s.applied = apply;
    m.task.train_metrics(*outputs, batch, loss, &s.loop_metrics);
    // Hooks read values only: keep no autograd graph alive until the next step.
    s.loss.data = loss.data.detach();
    s.loss.regularizer = loss.regularizer.defined() ? loss.regularizer.detach() : torch::Tensor();
    s.loss.terms.clear();
    for (const auto& [name, value] : loss.terms) s.loss.terms[name] = value.detach();
  };

  LoopOptions lo;
  lo.steps_per_loop = m.opt.steps_per_loop;
  lo.eval_every = m.opt.skip_eval ? 0 : m.opt.eval_every;
  try {
    run_loop(lo, state, train_step, hooks, [&] { return m.stop_requested(state); });
  } catch (const Interrupted&) {
    if (!m.opt.enable_checkpoints)
      spdlog::warn("checkpoints are off for this run: nothing was saved at step {}", state.step);
    step_ = state.step;
    throw;
  }

  train::RunStats stats = state.stats;
  stats.train = state.train_metrics;
  stats.train_finish_time = unix_seconds();
  stats.global_step = state.step;
  step_ = state.step;
  return stats;
}

}  // namespace orchard::engine
