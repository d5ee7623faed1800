#include "orchard/train/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "orchard/core/error.h"
#include "orchard/core/event_writer.h"
#include "orchard/core/files.h"
#include "orchard/core/log.h"
#include "orchard/train/checkpoint.h"
#include "orchard/train/loss_scale.h"
#include "orchard/train/moving_average.h"
#include "orchard/train/runtime.h"

namespace fs = std::filesystem;

namespace orchard::train {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void reset() { start_ = Clock::now(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
};

}  // namespace

struct Trainer::Impl {
  TrainerOptions opt;
  tasks::Task& task;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  Schedule schedule;
  CheckpointManager checkpoints;
  torch::Device device;
  std::unique_ptr<EventWriter> train_events, eval_events;
  std::unique_ptr<LossScaler> scaler;  // fp16 only
  std::unique_ptr<MovingAverage> average;  // with moving_average_decay > 0

  Impl(TrainerOptions o, tasks::Task& t, std::unique_ptr<torch::optim::Optimizer> optim, Schedule s)
      : opt(std::move(o)),
        task(t),
        optimizer(std::move(optim)),
        schedule(std::move(s)),
        checkpoints(opt.model_dir, opt.max_to_keep),
        device(opt.device) {
    if (opt.dtype == "fp16" || opt.dtype == "float16") scaler = std::make_unique<LossScaler>(opt.loss_scale);
  }

  bool chief() const { return !opt.distributed || opt.distributed->is_chief(); }
  int world() const { return opt.distributed ? opt.distributed->world_size() : 1; }

  // Sums the metric state over all ranks (every rank holds the same names) and concatenates
  // the rows in rank order: an all-gather as two sums (the row counts, then each rank's rows
  // written at its offset into zeros).
  void reduce(tasks::MetricSums& sums) {
    if (world() == 1) return;
    std::vector<at::Tensor> tensors;
    for (auto& [name, t] : sums.mutable_sums()) tensors.push_back(t);
    auto& rows = sums.mutable_rows();
    const int rank = opt.distributed->rank();
    auto counts = torch::zeros({static_cast<int64_t>(rows.size()), world()}, torch::kDouble);
    int64_t i = 0;
    for (auto& [name, r] : rows) counts[i++][rank] = static_cast<double>(r.size(0));
    if (!rows.empty()) tensors.push_back(counts);
    opt.distributed->allreduce_sum(tensors);
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
    opt.distributed->allreduce_sum(gathered);
    i = 0;
    for (auto& [name, r] : rows) r = gathered[static_cast<size_t>(i++)];
  }

  EventWriter* events(bool train) {
    if (!opt.enable_tensorboard || !chief()) return nullptr;
    auto& w = train ? train_events : eval_events;
    if (!w) w = std::make_unique<EventWriter>((fs::path(opt.model_dir) / (train ? "train" : "eval")).string());
    return w.get();
  }

  void set_lr(double lr) {
    for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
  }

  Meta meta(int64_t step) const {
    Meta m = task.signature();
    m["epoch"] = std::to_string(step / std::max<int64_t>(1, opt.steps_per_epoch));
    m["batch_in_epoch"] = std::to_string(step % std::max<int64_t>(1, opt.steps_per_epoch));
    m["global_batch_size"] = std::to_string(opt.global_batch_size);
    if (scaler) m["loss_scale"] = std::to_string(scaler->scale());
    return m;
  }

  // One pass over the evaluation data with the module's current weights; logs the metrics.
  std::map<std::string, double> run_eval(const EvalInputFactory& eval_input, int64_t step, const char* what) {
    auto module = task.module();
    module->eval();
    torch::NoGradGuard no_grad;
    tasks::MetricSums sums;
    BatchSource source = eval_input();
    data::Batch batch;
    Stopwatch sw;
    int64_t n = 0;
    while (source(&batch)) {
      auto images = batch.images.to(device, /*non_blocking=*/true);
      torch::Tensor outputs;
      {
        AutocastGuard autocast(opt.dtype, device.is_cuda());
        outputs = task.forward(images);
      }
      batch.labels = batch.labels.to(device, true);
      if (batch.targets.defined()) batch.targets = batch.targets.to(device, true);
      auto terms = task.loss(outputs, batch, opt.global_batch_size);
      task.update_metrics(outputs.to(torch::kFloat), batch, terms, /*training=*/false, &sums);
      n += batch.size;
    }
    module->train();
    if (world() > 1) {
      std::vector<at::Tensor> count = {torch::scalar_tensor(static_cast<double>(n), torch::kDouble)};
      opt.distributed->allreduce_sum(count);
      n = static_cast<int64_t>(count[0].item<double>());
      if (sums.empty() && n > 0)
        throw Error("rank " + std::to_string(opt.distributed->rank()) + " has no evaluation data of its own");
      reduce(sums);
    }
    if (n == 0) throw Error("evaluation data is empty");
    auto metrics = task.compute_metrics(sums, /*training=*/false);
    std::string line;
    for (const auto& [k, v] : metrics) line += fmt::format(" {}={:.4f}", k, v);
    spdlog::info("{} at step {} over {} examples ({:.1f}s):{}", what, step, n, sw.seconds(), line);
    return metrics;
  }

  void save(int64_t step) {
    if (!chief()) return;
    const std::string path = checkpoints.save(step, *task.module(), optimizer.get(), meta(step), average.get());
    spdlog::info("saved checkpoint {}", path);
  }
};

Trainer::Trainer(TrainerOptions options, tasks::Task& task, std::unique_ptr<torch::optim::Optimizer> optimizer,
                 Schedule schedule)
    : impl_(std::make_unique<Impl>(std::move(options), task, std::move(optimizer), std::move(schedule))) {
  ensure_writable_dir(impl_->opt.model_dir);
  task.module()->to(impl_->device);
  if (impl_->opt.moving_average_decay > 0)
    impl_->average = std::make_unique<MovingAverage>(*task.module(), impl_->opt.moving_average_decay);
}

Trainer::~Trainer() = default;

int64_t Trainer::restore_latest() {
  if (impl_->chief()) {  // only the writer may clean up after a killed writer
    if (int n = impl_->checkpoints.remove_stale_temporaries())
      spdlog::info("removed {} temporary files left by an interrupted run", n);
  }
  const std::string latest = impl_->checkpoints.latest();
  if (latest.empty()) return step_ = 0;
  RestoreOptions ro;
  ro.expect = impl_->task.signature();
  ro.training_weights = true;
  ro.average = impl_->average.get();
  auto [step, meta] = restore_checkpoint(latest, *impl_->task.module(), impl_->optimizer.get(), ro);
  auto it = meta.find("global_batch_size");
  if (it != meta.end() && it->second != std::to_string(impl_->opt.global_batch_size))
    spdlog::warn("{} was trained with batch size {}; continuing with {} (the data position is re-derived from the step)",
                 latest, it->second, impl_->opt.global_batch_size);
  if (auto ls = meta.find("loss_scale"); ls != meta.end() && impl_->scaler && impl_->scaler->dynamic())
    impl_->scaler->set_scale(std::stod(ls->second));
  spdlog::info("resumed from {} at step {}", latest, step);
  return step_ = step;
}

std::map<std::string, double> Trainer::evaluate(const EvalInputFactory& eval_input, int64_t step, bool summaries) {
  auto& m = *impl_;
  std::map<std::string, double> metrics;
  {
    AveragedWeightsGuard averaged(m.average.get());
    metrics = m.run_eval(eval_input, step, m.average ? "eval (moving average of the weights)" : "eval");
  }
  auto images = m.task.take_summary_images();
  EventWriter* w = summaries ? m.events(false) : nullptr;
  if (w) {
    for (const auto& [k, v] : metrics) w->scalar(k, v, step);
    for (const auto& im : images) w->image(im.tag, im.png, im.height, im.width, step);
  }
  if (m.average && m.opt.eval_training_weights) {
    const auto trained = m.run_eval(eval_input, step, "eval (training weights)");
    m.task.take_summary_images();
    if (w)
      for (const auto& [k, v] : trained) w->scalar("training_weights/" + k, v, step);
  }
  if (w) w->flush();
  return metrics;
}

RunStats Trainer::train_and_evaluate(const TrainInputFactory& train_input, const EvalInputFactory& eval_input) {
  auto& m = *impl_;
  auto module = m.task.module();
  module->train();
  const int64_t spe = std::max<int64_t>(1, m.opt.steps_per_epoch);
  int64_t step = restore_latest();
  if (m.opt.on_start) m.opt.on_start(step);
  std::unique_ptr<GradientReducer> reducer;
  if (m.world() > 1) {
    m.opt.distributed->broadcast(*module);  // every replica starts from rank 0's variables
    std::vector<at::Tensor> params;
    for (auto& p : module->parameters())
      if (p.requires_grad()) params.push_back(p);
    reducer = m.opt.distributed->gradient_reducer(params);
  }
  if (auto* w = m.events(true)) w->session_start(step);

  RunStats stats;
  const bool interactive = stderr_is_terminal();
  int64_t last_saved = step > 0 ? step : -1;
  int64_t last_eval = -1;
  double train_seconds = 0;
  int64_t timed_examples = 0;
  tasks::MetricSums loop_metrics;
  std::map<std::string, double> last_train_metrics;

  if (step < m.opt.total_steps) {
    BatchSource source = train_input(step / spe, step % spe);
    std::unique_ptr<torch::autograd::profiler::RecordProfile> profiler;
    Stopwatch window, progress_clock, since_start, save_clock;
    int64_t window_start_step = step;
    const int64_t first_step = step;
    double last_progress = -1;
    torch::Tensor last_loss;
    double last_cross_entropy = 0;
    bool position_warned = false;
    spdlog::info("training from step {} to {} ({} steps per epoch, global batch {})", step, m.opt.total_steps, spe,
                 m.opt.global_batch_size);
    while (step < m.opt.total_steps) {
      int64_t loop_end = std::min(m.opt.total_steps, (step / m.opt.steps_per_loop + 1) * m.opt.steps_per_loop);
      // As orbit's Controller: a loop also ends where an evaluation is due, so evaluations
      // keep their interval when steps_per_loop does not divide it.
      if (m.opt.eval_every > 0 && !m.opt.skip_eval)
        loop_end = std::min(loop_end, (step / m.opt.eval_every + 1) * m.opt.eval_every);
      loop_metrics.reset();
      Stopwatch loop_clock;
      const int64_t loop_first = step;
      for (; step < loop_end; ++step) {
        if (step == m.opt.profile_start) {
          const std::string trace = (fs::path(m.opt.model_dir) / "train" /
                                     ("profile-steps-" + std::to_string(m.opt.profile_start) + "-" +
                                      std::to_string(m.opt.profile_end) + ".trace.json"))
                                        .string();
          ensure_writable_dir((fs::path(m.opt.model_dir) / "train").string());
          profiler = std::make_unique<torch::autograd::profiler::RecordProfile>(trace);
          spdlog::info("profiling steps {}-{} into {} (open in chrome://tracing or Perfetto)", m.opt.profile_start,
                       m.opt.profile_end, trace);
        }
        data::Batch batch;
        if (!source(&batch)) throw Error("training input ended at step " + std::to_string(step));
        if ((batch.index_in_epoch != step % spe || batch.epoch != step / spe) && !position_warned) {
          // Only skipped corrupt records shorten an epoch; a resume then re-derives the
          // position from the step and may see a few records twice or not at all.
          spdlog::warn("input position (epoch {}, batch {}) differs from step {} (epoch {}, batch {}): an epoch "
                       "held fewer batches than counted (skipped records?)",
                       batch.epoch, batch.index_in_epoch, step, step / spe, step % spe);
          position_warned = true;
        }
        const double lr = m.schedule(step);
        m.set_lr(lr);
        auto images = batch.images.to(m.device, /*non_blocking=*/true);
        batch.labels = batch.labels.to(m.device, true);
        if (batch.targets.defined()) batch.targets = batch.targets.to(m.device, true);
        torch::Tensor outputs;
        {
          AutocastGuard autocast(m.opt.dtype, m.device.is_cuda());
          outputs = m.task.forward(images);
        }
        auto terms = m.task.loss(outputs, batch, m.opt.global_batch_size);
        m.optimizer->zero_grad();
        // Each replica's data loss is its share of the global batch; the reducer averages the
        // gradients, so scaling that share by the number of replicas makes the result their sum.
        // The L2 term is the whole model's on every replica: it stays as it is, so the average
        // counts it once (the seed adds l2_loss / num_replicas before a summing all-reduce).
        auto objective = terms.at("total");
        if (m.world() > 1) {
          const double w = static_cast<double>(m.world());
          objective = terms.count("l2_loss") ? (objective - terms.at("l2_loss")) * w + terms.at("l2_loss")
                                             : objective * w;
        }
        if (m.scaler) objective = m.scaler->scale_loss(objective);
        if (reducer) reducer->start();
        objective.backward();
        if (reducer) reducer->finish();
        if (!m.scaler || m.scaler->unscale(module->parameters())) {
          if (m.opt.clip_gradient_norm > 0) torch::nn::utils::clip_grad_norm_(module->parameters(), m.opt.clip_gradient_norm);
          m.optimizer->step();
          if (m.average) m.average->update(step + 1);
        }
        else
          spdlog::info("step {}: non-finite gradients; skipped, loss scale lowered to {}", step + 1, m.scaler->scale());
        m.task.update_metrics(outputs.detach().to(torch::kFloat), batch, terms, /*training=*/true, &loop_metrics);
        last_loss = terms.at("total").detach();
        if ((step + 1) % m.opt.log_steps == 0) {
          // The seed logs the cross entropy beside the loss. With replicas, both are the global
          // batch's: the cross-entropy shares summed over replicas, L2 counted once.
          const auto l2 = terms.count("l2_loss") ? terms.at("l2_loss").detach().to(torch::kDouble) : torch::zeros({});
          std::vector<at::Tensor> ce = {(last_loss.to(torch::kDouble) - l2).reshape({1})};
          if (m.world() > 1) m.opt.distributed->allreduce_sum(ce);
          last_cross_entropy = ce[0][0].item<double>();
          last_loss = ce[0][0] + l2;
        }
        if (profiler && step == m.opt.profile_end) profiler.reset();

        const int64_t done = step + 1;
        if (done % m.opt.log_steps == 0) {
          const double secs = window.seconds();
          const double eps = static_cast<double>((done - window_start_step) * m.opt.global_batch_size) / secs;
          stats.step_timestamp_log.emplace_back(done, unix_now());
          if (!interactive)
            spdlog::info("step {}/{}: loss {:.4f} (cross_entropy {:.4f}), lr {:.5f}, {:.1f} examples/s, ETA {}", done,
                         m.opt.total_steps, last_loss.item<double>(), last_cross_entropy, lr, eps,
                         format_duration((m.opt.total_steps - done) * secs / (done - window_start_step)));
          if (auto* w = m.events(true)) w->scalar("examples_per_second", eps, done);
          // The first window includes start-up costs: leave it out of the average.
          if (window_start_step != first_step || done == m.opt.total_steps) {
            train_seconds += secs;
            timed_examples += (done - window_start_step) * m.opt.global_batch_size;
          }
          window.reset();
          window_start_step = done;
        }
        if (interactive && (progress_clock.seconds() - last_progress > 0.5 || done == m.opt.total_steps)) {
          last_progress = progress_clock.seconds();
          const double rate = static_cast<double>((done - first_step) * m.opt.global_batch_size) / since_start.seconds();
          std::fprintf(stderr, "\rstep %lld/%lld  %.1f examples/s  loss %.4f  lr %.5f  ETA %s   ",
                       static_cast<long long>(done), static_cast<long long>(m.opt.total_steps), rate,
                       last_loss.item<double>(), lr,
                       format_duration((m.opt.total_steps - done) * m.opt.global_batch_size / rate).c_str());
          std::fflush(stderr);
        }
      }
      if (interactive) std::fprintf(stderr, "\n");
      // End of a host loop: summaries, checkpoint, evaluation.
      loop_metrics.add("replicas", 1.0);
      m.reduce(loop_metrics);
      last_train_metrics = m.task.compute_metrics(loop_metrics, /*training=*/true);
      if (auto* w = m.events(true)) {
        for (const auto& [k, v] : last_train_metrics) w->scalar(k, v, step);
        w->scalar("learning_rate", m.schedule(step - 1), step);
        w->scalar("steps_per_second", (step - loop_first) / loop_clock.seconds(), step);
        w->flush();
      }
      bool time_due = m.opt.checkpoint_every_secs > 0 && save_clock.seconds() >= m.opt.checkpoint_every_secs;
      if (m.world() > 1 && m.opt.checkpoint_every_secs > 0) {
        // The chief's clock decides, so every rank takes part in the evaluation that follows.
        std::vector<at::Tensor> due = {torch::scalar_tensor(m.chief() && time_due ? 1.0 : 0.0, torch::kDouble)};
        m.opt.distributed->allreduce_sum(due);
        time_due = due[0].item<double>() > 0;
      }
      bool saved = false;
      if (m.opt.enable_checkpoints && ((m.opt.checkpoint_every > 0 && step % m.opt.checkpoint_every == 0) ||
                                       time_due || step == m.opt.total_steps)) {
        m.save(step);
        last_saved = step;
        save_clock.reset();
        saved = true;
      }
      const bool eval_due = (m.opt.eval_every > 0 && step % m.opt.eval_every == 0) || (m.opt.eval_on_checkpoint && saved);
      if (!m.opt.skip_eval && eval_input && eval_due && step < m.opt.total_steps) {
        stats.eval = evaluate(eval_input, step, true);
        last_eval = step;
      }
    }
    if (reducer && reducer->steps() > 0)
      spdlog::info("gradient all-reduce: {} buckets, {:.2f} ms per step not hidden by the backward pass ({:.1f}% of "
                   "the step)",
                   reducer->num_buckets(), 1000 * reducer->finish_seconds() / reducer->steps(),
                   100 * reducer->finish_seconds() / std::max(1e-9, since_start.seconds()));
    if (train_seconds == 0 && since_start.seconds() > 0)  // too short for two log windows
      train_seconds = since_start.seconds(), timed_examples = (step - first_step) * m.opt.global_batch_size;
  } else {
    spdlog::info("model_dir already holds step {} (>= {} steps to train): nothing to train", step,
                 m.opt.total_steps);
  }
  if (m.opt.enable_checkpoints && last_saved != step) m.save(step);
  if (!m.opt.skip_eval && eval_input && last_eval != step) stats.eval = evaluate(eval_input, step, true);

  stats.train = last_train_metrics;
  stats.avg_exp_per_second = train_seconds > 0 ? timed_examples / train_seconds : 0;
  stats.train_finish_time = unix_now();
  stats.global_step = step;
  step_ = step;
  return stats;
}

}  // namespace orchard::train
