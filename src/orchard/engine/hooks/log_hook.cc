#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cstdio>

#include "orchard/core/event_writer.h"
#include "orchard/core/log.h"
#include "orchard/engine/clock.h"
#include "orchard/engine/hooks/hooks.h"
#include "orchard/train/distributed.h"

namespace orchard::engine {

struct LogHook::Impl {
  int64_t log_steps;
  train::Distributed* dist;
  bool interactive = false;
  Stopwatch window, progress_clock, since_start;
  int64_t window_start_step = 0;
  double last_progress = -1;
  std::string data_loss_name;
  torch::Tensor last_loss;
  double last_data_loss = 0;
  double train_seconds = 0;
  int64_t timed_examples = 0;
  double progress_secs = 30;
  Stopwatch since_line;  // since the last line in the log
};

LogHook::LogHook(int64_t log_steps, train::Distributed* distributed, std::string data_loss_name, double progress_secs)
    : impl_(std::make_unique<Impl>()) {
  impl_->progress_secs = progress_secs;
  impl_->data_loss_name = std::move(data_loss_name);
  impl_->log_steps = std::max<int64_t>(1, log_steps);
  impl_->dist = distributed;
}

LogHook::~LogHook() = default;

void LogHook::before_train(TrainState& s) {
  auto& m = *impl_;
  m.interactive = stderr_is_terminal();
  m.window.reset();
  m.progress_clock.reset();
  m.since_start.reset();
  m.since_line.reset();
  m.window_start_step = s.step;
  if (s.step < s.total_steps)
    spdlog::info("training from step {} to {} ({} steps per epoch, global batch {})", s.step, s.total_steps,
                 s.steps_per_epoch, s.global_batch_size);
  else spdlog::info("model_dir already holds step {} (>= {} steps to train): nothing to train", s.step, s.total_steps);
}

void LogHook::after_step(TrainState& s) {
  auto& m = *impl_;
  const int64_t done = s.step;
  m.last_loss = s.loss.total();
  if (done % m.log_steps == 0 || done == s.total_steps) {  // the last step too: a short run has its line
    // The seed logs the cross entropy beside the loss. With replicas, both are the global
    // batch's: the data-loss shares summed over replicas, the regulariser counted once.
    const auto reg =
        s.loss.regularizer.defined() ? s.loss.regularizer.to(torch::kDouble) : torch::zeros({}, torch::kDouble);
    std::vector<at::Tensor> data = {s.loss.data.to(torch::kDouble).reshape({1})};
    if (s.world_size > 1) m.dist->allreduce_sum(data);
    m.last_data_loss = data[0][0].item<double>();
    m.last_loss = data[0][0] + reg;

    const double secs = m.window.seconds();
    const double eps = static_cast<double>((done - m.window_start_step) * s.global_batch_size) / secs;
    s.stats.step_timestamp_log.emplace_back(done, unix_seconds());
    if (!m.interactive) {
      spdlog::info("step {}/{}: loss {:.4f} ({} {:.4f}), lr {:.5f}, {:.1f} examples/s, ETA {}", done, s.total_steps,
                   m.last_loss.item<double>(), m.data_loss_name, m.last_data_loss, s.lr, eps,
                   format_duration((s.total_steps - done) * secs / (done - m.window_start_step)));
      m.since_line.reset();
    }
    if (s.train_events) s.train_events->scalar("examples_per_second", eps, done);
    // The first window includes start-up costs: leave it out of the average.
    if (m.window_start_step != s.first_step || done == s.total_steps) {
      m.train_seconds += secs;
      m.timed_examples += (done - m.window_start_step) * s.global_batch_size;
    }
    m.window.reset();
    m.window_start_step = done;
  } else if (!m.interactive && (done == s.first_step + 1 || m.since_line.seconds() >= m.progress_secs)) {
    // Progress between log lines: this worker's loss (no collective between log steps).
    const double per_step = m.since_start.seconds() / static_cast<double>(done - s.first_step);
    spdlog::info("step {}/{}: {:.2f} s/step so far, loss {:.4f}{}, ETA {}", done, s.total_steps, per_step,
                 m.last_loss.item<double>(), s.world_size > 1 ? " (this worker's)" : "",
                 format_duration(static_cast<double>(s.total_steps - done) * per_step));
    m.since_line.reset();
  }
  if (m.interactive && (m.progress_clock.seconds() - m.last_progress > 0.5 || done == s.total_steps)) {
    m.last_progress = m.progress_clock.seconds();
    const double rate = static_cast<double>((done - s.first_step) * s.global_batch_size) / m.since_start.seconds();
    std::fprintf(stderr, "\rstep %lld/%lld  %.1f examples/s  loss %.4f  lr %.5f  ETA %s   ",
                 static_cast<long long>(done), static_cast<long long>(s.total_steps), rate, m.last_loss.item<double>(),
                 s.lr, format_duration((s.total_steps - done) * s.global_batch_size / rate).c_str());
    std::fflush(stderr);
  }
}

void LogHook::after_loop(TrainState&) {
  if (impl_->interactive) std::fprintf(stderr, "\n");
}

void LogHook::after_train(TrainState& s) {
  auto& m = *impl_;
  if (s.step > s.first_step && m.train_seconds == 0 && m.since_start.seconds() > 0) {  // too short for two windows
    m.train_seconds = m.since_start.seconds();
    m.timed_examples = (s.step - s.first_step) * s.global_batch_size;
  }
  s.stats.avg_exp_per_second = m.train_seconds > 0 ? static_cast<double>(m.timed_examples) / m.train_seconds : 0;
}

}  // namespace orchard::engine
