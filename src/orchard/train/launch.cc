#include "orchard/train/launch.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "orchard/core/cpu_quota.h"
#include "orchard/core/error.h"
#include "orchard/core/thread_pool.h"

namespace orchard::train {
namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "orchard";
}

pid_t start_child(const LaunchOptions& f, int local_rank, int threads) {
  const int world = f.nproc_per_node * f.nnodes;
  const int rank = f.node_rank * f.nproc_per_node + local_rank;
  const pid_t pid = fork();
  if (pid < 0) throw Error("orchard launch: fork failed");
  if (pid > 0) return pid;
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(f.nproc_per_node).c_str(), 1);
  setenv("MASTER_ADDR", f.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(f.master_port).c_str(), 1);
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 0);
  std::vector<std::string> args = f.command;
  // `orchard launch -- classify train ...` runs this binary; `-- /path/prog ...` runs that.
  std::string program = args[0];
  if (program.find('/') == std::string::npos && program != "orchard") args.insert(args.begin(), self_path());
  else if (program == "orchard") args[0] = self_path();
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "orchard launch: cannot run %s\n", argv[0]);
  _exit(127);
}

}  // namespace

int launch_workers(const LaunchOptions& f) {
  if (f.command.empty())
    throw Error("orchard launch: give the command after --, e.g. orchard launch -- classify train");
  if (f.nproc_per_node < 1 || f.nnodes < 1 || f.node_rank < 0 || f.node_rank >= f.nnodes)
    throw Error("orchard launch: need --nproc_per_node >= 1 and 0 <= --node_rank < --nnodes");
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int threads = omp ? std::max(1, std::atoi(omp)) : std::max(1, cpu_budget().threads / f.nproc_per_node);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::map<pid_t, int> children;  // pid -> local rank
  for (int i = 0; i < f.nproc_per_node; ++i) children[start_child(f, i, threads)] = i;
  spdlog::info("launched {} processes (ranks {}-{} of {}), {} threads each, rendezvous {}:{}", f.nproc_per_node,
               f.node_rank * f.nproc_per_node, (f.node_rank + 1) * f.nproc_per_node - 1, f.nproc_per_node * f.nnodes,
               threads, f.master_addr, f.master_port);
  int result = 0;
  bool stopping = false;
  auto stop_at = std::chrono::steady_clock::time_point::max();
  auto stop_all = [&](int sig) {
    for (const auto& [pid, _] : children) kill(pid, sig);
    if (!stopping) stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(f.grace_seconds);
    stopping = true;
  };
  while (!children.empty()) {
    if (g_signal != 0) {
      spdlog::warn("orchard launch: forwarding signal {} to the workers", static_cast<int>(g_signal));
      if (result == 0) result = 128 + g_signal;
      stop_all(g_signal);
      g_signal = 0;
    }
    if (stopping && std::chrono::steady_clock::now() > stop_at) {
      spdlog::warn("orchard launch: workers still running {}s after being stopped; killing them", f.grace_seconds);
      for (const auto& [pid, _] : children) kill(pid, SIGKILL);
      stop_at = std::chrono::steady_clock::time_point::max();
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    auto it = children.find(pid);
    if (it == children.end()) continue;
    const int local_rank = it->second;
    children.erase(it);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && !stopping) {
      spdlog::error("orchard launch: rank {} exited with status {}; stopping the other workers",
                    f.node_rank * f.nproc_per_node + local_rank, code);
      result = code;
      stop_all(SIGTERM);
    }
  }
  return result;
}

}  // namespace orchard::train
