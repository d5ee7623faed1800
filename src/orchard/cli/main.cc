// orchard: one binary, one subcommand per task. Errors are caught here once and printed
// as a single line with a non-zero exit.
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "orchard/cli/absl_args.h"
#include "orchard/cli/commands.h"
#include "orchard/core/error.h"
#include "orchard/core/log.h"
#include "orchard/core/spelling.h"
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

// The command the arguments select (`orchard detect train` -> the `train` app under `detect`):
// the deepest subcommand named before anything else.
CLI::App* selected_command(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* command = &app;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("-", 0) == 0) continue;
    CLI::App* sub = nullptr;
    try {
      sub = command->get_subcommand(args[i]);
    } catch (const CLI::OptionNotFound&) {
      break;
    }
    if (!sub) break;
    command = sub;
  }
  return command;
}

std::string command_path(const CLI::App* command) {
  std::string path;
  for (; command != nullptr; command = command->get_parent())
    path = command->get_parent() ? " " + command->get_name() + path : "orchard" + path;
  return path;
}

// CLI11 says "The following arguments were not expected: 64 --train_batch_size" (values first,
// no hint). Instead: the first flag the command does not have, and the flag it most likely
// meant (or that TensorFlow's tools have it with no meaning here).
std::string unknown_flag_message(CLI::App* command, const std::vector<std::string>& args, const std::string& fallback) {
  std::vector<std::string> known;
  for (const CLI::Option* option : command->get_options())
    for (const auto& name : option->get_lnames()) known.push_back(name);
  for (const auto& name : orchard::cli::tensorflow_only_flags()) known.push_back(name);
  const std::string path = command_path(command);
  for (const auto& arg : args) {
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) continue;
    const std::string name = arg.substr(2, arg.find('=') - 2);
    const bool has = command->get_option_no_throw("--" + name) != nullptr ||
                     (name.rfind("no", 0) == 0 && command->get_option_no_throw("--" + name.substr(2)) != nullptr);
    if (has) continue;
    const std::string guess = orchard::closest_name(name, known);
    return path + ": unknown flag --" + name + (guess.empty() ? "" : " (did you mean --" + guess + "?)") + "; `" +
           path + " --help` lists its flags";
  }
  return path + ": " + fallback;
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"Orchard: train, evaluate and run vision models on TFRecord data (TF Model Garden compatible)"};
  app.require_subcommand(1);
  orchard::init_logging();
  app.add_flag_callback(
      "-v,--verbose", [] { spdlog::set_level(spdlog::level::debug); }, "Debug logging");
  orchard::cli::add_data_command(app);
  orchard::cli::add_task_commands(app);
  orchard::cli::add_task_tool_commands(app);
  orchard::cli::add_launch_command(app);
  orchard::cli::add_checkpoint_command(app);
  std::vector<std::string> args;
  CLI::App* command = &app;
  try {
    // --flagfile expanded, TensorFlow-only flags taken out unless the command declares them
    // (cli/absl_args.h).
    args = orchard::cli::expand_flagfiles(argc, argv);
    command = selected_command(app, args);
    args = orchard::cli::drop_tensorflow_only_flags(
        args, [command](const std::string& name) { return command->get_option_no_throw("--" + name) != nullptr; });
    std::vector<char*> c_args;
    for (const auto& a : args) c_args.push_back(const_cast<char*>(a.c_str()));
    app.parse(static_cast<int>(c_args.size()), c_args.data());
  } catch (const CLI::ExtrasError& e) {
    spdlog::error("{}", unknown_flag_message(command, args, e.what()));
    return e.get_exit_code();
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
