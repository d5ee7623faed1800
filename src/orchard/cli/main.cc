// orchard: one binary, one subcommand per task. Errors are caught here once and printed
// as a single line with a non-zero exit.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <malloc.h>

#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "orchard/cli/absl_args.h"
#include "orchard/cli/commands.h"
#include "orchard/core/error.h"
#include "orchard/core/log.h"
#include "orchard/engine/interrupted.h"

namespace {

// libtorch allocates each activation and gradient with malloc. glibc serves large blocks
// with mmap and returns freed memory to the OS, so every training step page-faults its
// whole working set in again: measured here, 2.5-10x slower steps for a small ResNet.
// Keep freed memory in the heap instead (peak memory is unchanged: it is reused).
// An explicit MALLOC_*_ environment setting wins.
void keep_freed_memory() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"Orchard: train, evaluate and run vision models on TFRecord data (TF Model Garden compatible)"};
  app.require_subcommand(1);
  orchard::init_logging();
  app.add_flag_callback("-v,--verbose", [] { spdlog::set_level(spdlog::level::debug); }, "Debug logging");
  orchard::cli::add_data_command(app);
  orchard::cli::add_task_commands(app);
  orchard::cli::add_task_tool_commands(app);
  orchard::cli::add_launch_command(app);
  orchard::cli::add_checkpoint_command(app);
  try {
    // --flagfile expanded, TensorFlow-only flags taken out (cli/absl_args.h).
    const std::vector<std::string> args = orchard::cli::absl_arguments(argc, argv);
    std::vector<char*> c_args;
    for (const auto& a : args) c_args.push_back(const_cast<char*>(a.c_str()));
    app.parse(static_cast<int>(c_args.size()), c_args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const orchard::engine::Interrupted& e) {
    spdlog::warn("{}", e.what());
    return 128 + e.signal();  // as the shell reports a process killed by the signal
  } catch (const orchard::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 2;
  }
  return 0;
}
