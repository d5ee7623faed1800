// Running the `orchard` binary (ORCHARD_BIN) from tests as a user runs it.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/test_util.h"

extern char** environ;

namespace orchard::cli {

struct RunResult {
  int rc = -1;  // exit status, or 128 + signal
  bool signaled = false;
  std::string out, err;
};

// This process's environment with the variables named in `unset` (by name) taken out and the
// "NAME=value" entries of `set` added, for spawn().
inline std::vector<std::string> environment_with(const std::vector<std::string>& set,
                                                 const std::vector<std::string>& unset = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e, name = entry.substr(0, entry.find('='));
    const auto named = [&](const std::string& v) { return v == name || v.substr(0, v.find('=')) == name; };
    if (std::none_of(unset.begin(), unset.end(), named) && std::none_of(set.begin(), set.end(), named))
      env.push_back(entry);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// Starts ORCHARD_BIN with `args`, stdout/stderr to files; returns the pid. `env`: the child's
// environment (environment_with()), this process's when empty.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path,
                   std::vector<std::string> env_s = {}) {
  std::vector<char*> env;
  for (auto& e : env_s) env.push_back(e.data());
  env.push_back(nullptr);
  std::vector<std::string> argv_s = {ORCHARD_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), env_s.empty() ? environ : env.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "cannot start " << ORCHARD_BIN;
  return pid;
}

inline RunResult wait_for(pid_t pid, const std::string& out_path, const std::string& err_path) {
  int status = 0;
  RunResult r;
  if (waitpid(pid, &status, 0) == pid) {
    r.signaled = WIFSIGNALED(status);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  r.out = test::read_bytes(out_path);
  r.err = test::read_bytes(err_path);
  return r;
}

// Runs orchard to completion. Logs go to files in `scratch`.
inline RunResult run(const std::vector<std::string>& args, const test::TempDir& scratch,
                     std::vector<std::string> env = {}) {
  static int n = 0;
  const std::string out = scratch.file("run" + std::to_string(n) + ".out");
  const std::string err = scratch.file("run" + std::to_string(n++) + ".err");
  return wait_for(spawn(args, out, err, std::move(env)), out, err);
}

inline std::string joined(const std::vector<std::string>& args) {
  std::string s = "orchard";
  for (const auto& a : args) s += " " + a;
  return s;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The files of a directory whose names contain `part`.
inline std::vector<std::string> files_with(const std::string& dir, const std::string& part) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (contains(e.path().filename().string(), part)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace orchard::cli
