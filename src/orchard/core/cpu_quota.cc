#include "orchard/core/cpu_quota.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "orchard/core/thread_pool.h"

namespace orchard {
namespace {

// The first line of a small file; nullopt when it cannot be read.
std::optional<std::string> first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// mountinfo escapes spaces, tabs, newlines and backslashes in paths as \ooo (octal).
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 2])) && std::isdigit(static_cast<unsigned char>(s[i + 3]))) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Mount {
  std::string root, point, fstype;
  std::vector<std::string> options;  // the super options (v1: the controllers)
};

std::vector<Mount> cgroup_mounts(const std::string& mountinfo) {
  std::vector<Mount> mounts;
  std::ifstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string x;
    while (fields >> x) f.push_back(x);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || dash + 3 > f.end()) continue;
    Mount m{unescape(f[3]), unescape(f[4]), *(dash + 1),
            dash + 3 < f.end() ? split(*(dash + 3), ',') : std::vector<std::string>{}};
    if (m.fstype == "cgroup" || m.fstype == "cgroup2") mounts.push_back(std::move(m));
  }
  return mounts;
}

// The directory of cgroup `path` under mount `m`, or "" when the mount does not show it.
std::string cgroup_dir(const Mount& m, const std::string& path) {
  std::string rel;
  if (m.root == "/") {
    rel = path;
  } else if (path == m.root || path.rfind(m.root + "/", 0) == 0) {
    rel = path.substr(m.root.size());
  } else {
    return "";
  }
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  return m.point + rel;
}

// The smallest quota from `dir` up to `top` (inclusive).
template <typename Read>
std::optional<CpuQuota> smallest_up_to(std::string dir, const std::string& top, Read read) {
  std::optional<CpuQuota> best;
  while (true) {
    if (auto q = read(dir); q && (!best || q->cpus < best->cpus)) best = q;
    if (dir.size() <= top.size()) break;
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos || slash < top.size()) {
      dir = top;
    } else {
      dir.resize(slash);
    }
  }
  return best;
}

}  // namespace

std::optional<CpuQuota> cgroup_v2_quota(const std::string& dir) {
  const std::string path = dir + "/cpu.max";
  const auto line = first_line(path);
  if (!line) return std::nullopt;
  std::istringstream in(*line);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  if (end == quota.c_str() || q <= 0) return std::nullopt;
  return CpuQuota{q / period, path + " " + quota + " " + std::to_string(static_cast<long long>(period))};
}

std::optional<CpuQuota> cgroup_v1_quota(const std::string& dir) {
  const auto quota = first_line(dir + "/cpu.cfs_quota_us");
  const auto period = first_line(dir + "/cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  const double q = std::strtod(quota->c_str(), nullptr), p = std::strtod(period->c_str(), nullptr);
  if (q <= 0 || p <= 0) return std::nullopt;  // -1: no quota
  return CpuQuota{q / p, dir + "/cpu.cfs_quota_us " + *quota + " / cpu.cfs_period_us " + *period};
}

std::optional<CpuQuota> process_cpu_quota(const std::string& proc_self_cgroup, const std::string& proc_self_mountinfo) {
  std::ifstream in(proc_self_cgroup);
  if (!in) return std::nullopt;
  std::string v2_path, v1_path;
  bool v2 = false, v1 = false;
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-ID:controller-list:cgroup-path (the path may itself contain ':').
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {
      v2 = true;
      v2_path = path;
    } else if (contains(split(controllers, ','), "cpu")) {
      v1 = true;
      v1_path = path;
    }
  }
  const auto mounts = cgroup_mounts(proc_self_mountinfo);
  std::optional<CpuQuota> best;
  const auto consider = [&](const std::optional<CpuQuota>& q) {
    if (q && (!best || q->cpus < best->cpus)) best = q;
  };
  for (const auto& m : mounts) {
    if (v2 && m.fstype == "cgroup2") {
      const std::string dir = cgroup_dir(m, v2_path);
      if (!dir.empty()) consider(smallest_up_to(dir, m.point, cgroup_v2_quota));
    } else if (v1 && m.fstype == "cgroup" && contains(m.options, "cpu")) {
      const std::string dir = cgroup_dir(m, v1_path);
      if (!dir.empty()) consider(smallest_up_to(dir, m.point, cgroup_v1_quota));
    }
  }
  return best;
}

int quota_threads(double cpus) { return std::max(1, static_cast<int>(std::floor(cpus))); }

const CpuBudget& cpu_budget() {
  static const CpuBudget budget = [] {
    CpuBudget b;
    const int cores = available_cores();
    const auto quota = process_cpu_quota();
    if (quota && quota_threads(quota->cpus) < cores) {
      b.threads = quota_threads(quota->cpus);
      std::ostringstream reason;
      reason.precision(3);
      reason << "the cgroup CPU quota, " << quota->cpus << " CPUs rounded down (" << quota->source
             << "); the affinity mask has " << cores;
      b.reason = reason.str();
    } else {
      b.threads = cores;
      b.reason = quota ? "the affinity mask; the cgroup CPU quota (" + quota->source + ") allows as many"
                       : "the affinity mask; no cgroup CPU quota";
    }
    return b;
  }();
  return budget;
}

}  // namespace orchard
