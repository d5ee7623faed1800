#include "orchard/tasks/registry.h"

#include <utility>

#include "orchard/core/error.h"

namespace orchard::tasks {
namespace {

std::vector<TaskCommands>& tasks() {
  static std::vector<TaskCommands> list;
  return list;
}

std::vector<Verb>& commands() {
  static std::vector<Verb> list;
  return list;
}

}  // namespace

void register_task(TaskCommands task) {
  for (const auto& t : tasks())
    if (t.name == task.name) throw Error("task '" + task.name + "' is registered twice");
  tasks().push_back(std::move(task));
}

const std::vector<TaskCommands>& registered_tasks() { return tasks(); }

void register_command(Verb command) {
  for (const auto& c : commands())
    if (c.name == command.name) throw Error("command '" + command.name + "' is registered twice");
  commands().push_back(std::move(command));
}

const std::vector<Verb>& registered_commands() { return commands(); }

}  // namespace orchard::tasks
