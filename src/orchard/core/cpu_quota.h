// How many CPUs this process may use: its affinity mask and its container's CPU quota (cgroup v2
// cpu.max, cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us), as Go's automaxprocs and the JVM size
// themselves. A quota of 1.5 CPUs on a 64-core node gives 1 thread, not 64 throttled ones.
#pragma once

#include <optional>
#include <string>

namespace orchard {

// A CFS bandwidth limit: `cpus` = quota / period, and where it was read (for the log).
struct CpuQuota {
  double cpus = 0;
  std::string source;  // e.g. "/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us 150000 / cpu.cfs_period_us 100000"
};

// The quota of one cgroup directory: cgroup v2's `cpu.max` ("max 100000": none; "150000 100000")
// or cgroup v1's `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`. nullopt: no limit there,
// or the files are absent or unreadable.
std::optional<CpuQuota> cgroup_v2_quota(const std::string& dir);
std::optional<CpuQuota> cgroup_v1_quota(const std::string& dir);

// The smallest quota on the way from the process's cgroup up to its hierarchy's mount point,
// found from `proc_self_cgroup` (/proc/self/cgroup: "0::/path" for v2, "N:cpu,cpuacct:/path"
// for v1) and `proc_self_mountinfo` (/proc/self/mountinfo: where each hierarchy is mounted and
// which of its paths the mount shows, as inside a container). v2 first, then v1's cpu
// controller. nullopt: no quota (or no cgroup file system).
std::optional<CpuQuota> process_cpu_quota(const std::string& proc_self_cgroup = "/proc/self/cgroup",
                                          const std::string& proc_self_mountinfo = "/proc/self/mountinfo");

// Threads for a quota, as automaxprocs rounds it: down, at least 1 (1.5 CPUs -> 1, 2.0 -> 2).
int quota_threads(double cpus);

// The default number of compute threads: the smaller of the affinity mask's cores and the
// quota's threads, with the reason for the log ("2 (the affinity mask; no CPU quota)",
// "1 (cgroup CPU quota 1.50 CPUs: /sys/fs/...; the affinity mask has 2)"). Read once.
struct CpuBudget {
  int threads = 1;
  std::string reason;
};
const CpuBudget& cpu_budget();

}  // namespace orchard
