// The tasks Orchard ships: one line each. A new task adds its folder under tasks/ and its
// line here (docs/ARCHITECTURE.md, "Adding a task").
#include "orchard/tasks/registry.h"

namespace orchard::tasks {

TaskCommands classify_commands();    // tasks/classify/commands.cc
TaskCommands multilabel_commands();  // tasks/multilabel/commands.cc
TaskCommands detect_commands();      // tasks/detect/commands.cc
TaskCommands caption_commands();     // tasks/caption/commands.cc
Verb import_weights_command();       // tasks/classify/import_weights.cc

void register_builtin_tasks() {
  static bool done = false;
  if (done) return;
  done = true;
  register_task(classify_commands());
  register_task(multilabel_commands());
  register_task(detect_commands());
  register_task(caption_commands());
  register_command(import_weights_command());
}

}  // namespace orchard::tasks
