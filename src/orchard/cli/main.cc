// orchard: one binary, one subcommand per task. Errors are caught here once and printed
// as a single line with a non-zero exit.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <exception>

#include "orchard/cli/commands.h"
#include "orchard/core/error.h"
#include "orchard/core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"Orchard: train, evaluate and run vision models on TFRecord data (TF Model Garden compatible)"};
  app.require_subcommand(1);
  orchard::init_logging();
  app.add_flag_callback("-v,--verbose", [] { spdlog::set_level(spdlog::level::debug); }, "Debug logging");
  orchard::cli::add_data_command(app);
  orchard::cli::add_classify_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const orchard::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 2;
  }
  return 0;
}
