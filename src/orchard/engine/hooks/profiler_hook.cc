#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <filesystem>

#include "orchard/core/files.h"
#include "orchard/engine/hooks/hooks.h"

namespace fs = std::filesystem;

namespace orchard::engine {

struct ProfilerHook::Impl {
  std::string model_dir;
  int64_t first, last;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
};

ProfilerHook::ProfilerHook(std::string model_dir, int64_t first, int64_t last)
    : impl_(std::make_unique<Impl>(Impl{std::move(model_dir), first, last, nullptr})) {}

ProfilerHook::~ProfilerHook() = default;

void ProfilerHook::before_step(TrainState& state) {
  auto& m = *impl_;
  if (state.step != m.first) return;
  const std::string dir = (fs::path(m.model_dir) / "train").string();
  const std::string trace =
      (fs::path(dir) / ("profile-steps-" + std::to_string(m.first) + "-" + std::to_string(m.last) + ".trace.json"))
          .string();
  ensure_writable_dir(dir);
  m.profile = std::make_unique<torch::autograd::profiler::RecordProfile>(trace);
  spdlog::info("profiling steps {}-{} into {} (open in chrome://tracing or Perfetto)", m.first, m.last, trace);
}

void ProfilerHook::after_step(TrainState& state) {
  if (impl_->profile && state.step - 1 == impl_->last) impl_->profile.reset();  // writes the trace
}

}  // namespace orchard::engine
