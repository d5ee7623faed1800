// Each top-level subcommand registers itself on the root CLI11 app.
#pragma once

namespace CLI {
class App;
}

namespace orchard::cli {

void add_data_command(CLI::App& app);
void add_classify_command(CLI::App& app);
void add_multilabel_command(CLI::App& app);
void add_detect_command(CLI::App& app);
void add_caption_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_import_command(CLI::App& app);

}  // namespace orchard::cli
