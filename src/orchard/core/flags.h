// A command's flags as a task declares them: names, the variable each one sets, the help
// text, and whether it was given. Tasks declare their flags here and never see the
// command-line parser; the CLI implements FlagSet over its parser (cli/task_cmd.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace orchard {

// One declared flag; the modifiers return the flag so they chain.
class Flag {
 public:
  virtual ~Flag() = default;
  virtual Flag* capture_default_str() = 0;  // --help shows the default
  virtual Flag* required() = 0;
  virtual Flag* group(const std::string& name) = 0;  // listed under this heading in --help
  virtual Flag* check_member(const std::vector<std::string>& allowed) = 0;
};

// `names` is as CLI11 takes it: "--long,--alias" for flags, a bare word for positionals.
class FlagSet {
 public:
  virtual ~FlagSet() = default;
  virtual Flag* add_option(const std::string& names, std::string& value, const std::string& help) = 0;
  virtual Flag* add_option(const std::string& names, int& value, const std::string& help) = 0;
  virtual Flag* add_option(const std::string& names, int64_t& value, const std::string& help) = 0;
  virtual Flag* add_option(const std::string& names, uint64_t& value, const std::string& help) = 0;
  virtual Flag* add_option(const std::string& names, double& value, const std::string& help) = 0;
  virtual Flag* add_option(const std::string& names, std::vector<std::string>& value, const std::string& help) = 0;
  virtual Flag* add_option(const std::string& names, bool& value, const std::string& help) = 0;  // --x=true|false
  virtual Flag* add_flag(const std::string& names, bool& value, const std::string& help) = 0;
  // Whether `name` (a long name such as "--data_dir") was given on the command line; false for
  // a name this command does not have. Valid once the command line is parsed.
  virtual bool given(const std::string& name) const = 0;
};

// Whether a flag was given (never decided by comparing with its default: an explicit value
// equal to the default still wins over a saved configuration).
using FlagGiven = std::function<bool(const std::string& flag)>;
inline FlagGiven flags_given_to(const FlagSet& flags) {
  return [&flags](const std::string& name) { return flags.given(name); };
}
inline bool no_flag_given(const std::string&) { return false; }

}  // namespace orchard
