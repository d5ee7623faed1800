// Each top-level subcommand registers itself on the root CLI11 app.
#pragma once

namespace CLI {
class App;
}

namespace orchard::cli {

void add_data_command(CLI::App& app);
// `orchard <task> <verb>` for each task of the registry (tasks/registry.h).
void add_task_commands(CLI::App& app);
// The commands of their own that tasks bring (import-weights); after add_task_commands.
void add_task_tool_commands(CLI::App& app);
void add_launch_command(CLI::App& app);
// `orchard checkpoint inspect|export`: TensorFlow checkpoints.
void add_checkpoint_command(CLI::App& app);

}  // namespace orchard::cli
