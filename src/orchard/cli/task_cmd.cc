// `orchard <task> <verb>` for every registered task: the task's FlagSet declarations become
// CLI11 options, and the verb's action runs once the command line is parsed.
#include <CLI/CLI.hpp>

#include <memory>
#include <sstream>
#include <utility>

#include "orchard/cli/commands.h"
#include "orchard/tasks/registry.h"

namespace orchard::cli {
namespace {

class CliFlag : public Flag {
 public:
  explicit CliFlag(CLI::Option* option) : option_(option) {}
  Flag* capture_default_str() override {
    option_->capture_default_str();
    return this;
  }
  Flag* required() override {
    option_->required();
    return this;
  }
  Flag* group(const std::string& name) override {
    option_->group(name);
    return this;
  }
  Flag* check_member(const std::vector<std::string>& allowed) override {
    option_->check(CLI::IsMember(allowed));
    return this;
  }

 private:
  CLI::Option* option_;
};

class CliFlagSet : public FlagSet {
 public:
  explicit CliFlagSet(CLI::App* command) : command_(command) {}
  Flag* add_option(const std::string& names, std::string& value, const std::string& help) override {
    return wrap(command_->add_option(names, value, help));
  }
  Flag* add_option(const std::string& names, int& value, const std::string& help) override {
    return wrap(command_->add_option(names, value, help));
  }
  Flag* add_option(const std::string& names, int64_t& value, const std::string& help) override {
    return wrap(command_->add_option(names, value, help));
  }
  Flag* add_option(const std::string& names, uint64_t& value, const std::string& help) override {
    return wrap(command_->add_option(names, value, help));
  }
  Flag* add_option(const std::string& names, double& value, const std::string& help) override {
    return wrap(command_->add_option(names, value, help));
  }
  Flag* add_option(const std::string& names, std::vector<std::string>& value, const std::string& help) override {
    return wrap(command_->add_option(names, value, help), /*last_wins=*/false);
  }
  Flag* add_option(const std::string& names, bool& value, const std::string& help) override {
    return wrap(command_->add_option(names, value, help));
  }
  // absl's --nofoo beside each --foo.
  Flag* add_flag(const std::string& names, bool& value, const std::string& help) override {
    std::string all = names;
    std::stringstream split(names);
    for (std::string name; std::getline(split, name, ',');)
      if (name.rfind("--", 0) == 0) all += ",!--no" + name.substr(2);
    return wrap(command_->add_flag(all, value, help));
  }
  bool given(const std::string& name) const override {
    const CLI::Option* option = command_->get_option_no_throw(name);  // null: not a flag of this command
    return option != nullptr && option->count() > 0;
  }

 private:
  // As absl: a flag given twice keeps its last value (a list flag keeps every value).
  Flag* wrap(CLI::Option* option, bool last_wins = true) {
    if (last_wins) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    flags_.push_back(std::make_unique<CliFlag>(option));
    return flags_.back().get();
  }
  CLI::App* command_;
  std::vector<std::unique_ptr<CliFlag>> flags_;
};

void add_verb(CLI::App& parent, const tasks::Verb& verb) {
  auto* command = parent.add_subcommand(verb.name, verb.help);
  auto flags = std::make_shared<CliFlagSet>(command);  // lives as long as the callback
  command->callback([flags, run = verb.define(flags.get())] { run(); });
}

}  // namespace

void add_task_commands(CLI::App& app) {
  tasks::register_builtin_tasks();
  for (const auto& task : tasks::registered_tasks()) {
    auto* command = app.add_subcommand(task.name, task.help);
    command->require_subcommand(1);
    for (const auto& verb : task.verbs) add_verb(*command, verb);
  }
}

void add_task_tool_commands(CLI::App& app) {
  for (const auto& command : tasks::registered_commands()) add_verb(app, command);
}

}  // namespace orchard::cli
