#include "orchard/core/cpu_contention.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace orchard {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The nice value of /proc/.../task/<tid>/stat (field 19; the command name, field 2, is in
// parentheses and may hold spaces, so fields are counted after its closing one).
std::optional<int> thread_nice(const std::string& stat) {
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 19 && fields >> field; ++i)
    if (i == 19) return std::atoi(field.c_str());
  return std::nullopt;
}

}  // namespace

double ThreadTimes::waited(const ThreadTimes& before, const ThreadTimes& after) {
  const double run = static_cast<double>(after.run_ns - before.run_ns);
  const double wait = static_cast<double>(after.wait_ns - before.wait_ns);
  if (run < 0 || wait < 0 || run + wait <= 0) return 0;  // threads ended between the readings
  return wait / (run + wait);
}

std::optional<ThreadTimes> compute_thread_times(const std::string& task_dir) {
  DIR* dir = ::opendir(task_dir.c_str());
  if (dir == nullptr) return std::nullopt;
  errno = 0;
  const int own_nice = ::getpriority(PRIO_PROCESS, 0);
  ThreadTimes total;
  bool any = false;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string thread = task_dir + "/" + e->d_name;
    const auto nice = thread_nice(read_file(thread + "/stat"));
    if (!nice || *nice != own_nice) continue;
    std::istringstream stat(read_file(thread + "/schedstat"));
    int64_t run = 0, wait = 0;
    if (!(stat >> run >> wait)) continue;
    total.run_ns += run;
    total.wait_ns += wait;
    any = true;
  }
  ::closedir(dir);
  if (!any) return std::nullopt;
  return total;
}

ThreadGovernor::ThreadGovernor(int max_threads) : max_(std::max(1, max_threads)), n_(max_) {}

int ThreadGovernor::observe(double waited) {
  waited = std::clamp(waited, 0.0, 1.0);
  const int got = std::clamp(static_cast<int>(std::lround(n_ * (1.0 - waited))), 1, n_);
  if (probing_) {
    probing_ = false;
    calm_ = 0;
    if (got < n_) {  // the extra thread waited: back, and wait longer before the next try
      --n_;
      probe_after_ = std::min(probe_after_ * 2, kMaxProbe);
    } else {
      probe_after_ = kFirstProbe;
    }
    return n_;
  }
  if (got < n_) {
    n_ = got;
    calm_ = 0;
    return n_;
  }
  if (n_ < max_ && ++calm_ >= probe_after_) {
    calm_ = 0;
    probing_ = true;
    ++n_;
  }
  return n_;
}

}  // namespace orchard
