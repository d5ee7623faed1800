// The task registry: each task registers its name and its verbs (`orchard <task> <verb>`),
// each verb with its flags (the seed's names and defaults live with the task) and what it
// runs. The CLI builds its commands from this list and knows no task by name.
//
// Registration is explicit (register_builtin_tasks, one line per task): static libraries
// drop self-registering static initialisers.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "orchard/core/flags.h"

namespace orchard::tasks {

struct Verb {
  std::string name;
  std::string help;
  // Declares the verb's flags and returns what runs once they are parsed (the closure owns
  // the variables the flags set).
  std::function<std::function<void()>(FlagSet* flags)> define;
};

// A verb whose flags fill one struct (declared by `add_flags`) and whose action takes it.
template <class Flags>
Verb make_verb(std::string name, std::string help, void (*add_flags)(FlagSet*, Flags&), void (*run)(Flags)) {
  return {std::move(name), std::move(help), [add_flags, run](FlagSet* flags) -> std::function<void()> {
            auto f = std::make_shared<Flags>();
            add_flags(flags, *f);
            return [f, run] { run(*f); };
          }};
}

struct TaskCommands {
  std::string name;
  std::string help;
  std::vector<Verb> verbs;
};

void register_task(TaskCommands task);
const std::vector<TaskCommands>& registered_tasks();

// Commands of their own (`orchard <name>`) that a task brings, e.g. classify's import-weights.
void register_command(Verb command);
const std::vector<Verb>& registered_commands();

// Registers the tasks Orchard ships (tasks/builtin.cc); calling it again does nothing.
void register_builtin_tasks();

}  // namespace orchard::tasks
