#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <cstdio>

#include "orchard/core/files.h"
#include "orchard/engine/hooks/hooks.h"

namespace orchard::engine {

struct ProfilerHook::Impl {
  std::string model_dir;
  int64_t first, last;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
  std::string trace;        // where the trace goes
  std::string local_trace;  // the file the profiler writes: trace, or a temporary one to upload
};

ProfilerHook::ProfilerHook(std::string model_dir, int64_t first, int64_t last)
    : impl_(std::make_unique<Impl>(Impl{std::move(model_dir), first, last, nullptr, "", ""})) {}

ProfilerHook::~ProfilerHook() = default;

void ProfilerHook::before_step(TrainState& state) {
  auto& m = *impl_;
  if (state.step != m.first) return;
  const std::string dir = join_path(m.model_dir, "train");
  m.trace = join_path(dir, "profile-steps-" + std::to_string(m.first) + "-" + std::to_string(m.last) + ".trace.json");
  ensure_writable_dir(dir);
  m.local_trace = is_local_path(m.trace) ? local_path(m.trace) : make_temporary_file("trace");
  m.profile = std::make_unique<torch::autograd::profiler::RecordProfile>(m.local_trace);
  spdlog::info("profiling steps {}-{} into {} (open in chrome://tracing or Perfetto)", m.first, m.last, m.trace);
}

void ProfilerHook::after_step(TrainState& state) {
  auto& m = *impl_;
  if (!m.profile || state.step - 1 != m.last) return;
  m.profile.reset();  // writes the trace
  if (m.local_trace != local_path(m.trace)) {
    atomic_write_file(m.trace, read_file(m.local_trace));
    std::remove(m.local_trace.c_str());
  }
}

}  // namespace orchard::engine
