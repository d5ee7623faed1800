// The CPU quota arithmetic (issue 57): cgroup v1 and v2 files given by path, in a temporary
// directory laid out as /proc/self/cgroup, /proc/self/mountinfo and the cgroup file systems.
#include "orchard/core/cpu_quota.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/test_util.h"
#include "orchard/core/thread_pool.h"

namespace orchard {
namespace {

namespace fs = std::filesystem;

// Writes `text` to `dir`/`name`, creating `dir`.
void put(const std::string& dir, const std::string& name, const std::string& text) {
  fs::create_directories(dir);
  test::write_bytes(dir + "/" + name, text + "\n");
}

TEST(CpuQuota, RoundsDownAsAutomaxprocsAtLeastOne) {
  EXPECT_EQ(quota_threads(0.5), 1);
  EXPECT_EQ(quota_threads(1.0), 1);
  EXPECT_EQ(quota_threads(1.5), 1);
  EXPECT_EQ(quota_threads(2.0), 2);
  EXPECT_EQ(quota_threads(3.99), 3);
}

TEST(CpuQuota, ReadsOneDirectoryOfEitherVersion) {
  test::TempDir tmp;
  put(tmp.file("v2"), "cpu.max", "150000 100000");
  auto q = cgroup_v2_quota(tmp.file("v2"));
  ASSERT_TRUE(q);
  EXPECT_DOUBLE_EQ(q->cpus, 1.5);
  EXPECT_NE(q->source.find("cpu.max 150000 100000"), std::string::npos) << q->source;
  put(tmp.file("v2max"), "cpu.max", "max 100000");
  EXPECT_FALSE(cgroup_v2_quota(tmp.file("v2max")));
  EXPECT_FALSE(cgroup_v2_quota(tmp.file("absent")));

  put(tmp.file("v1"), "cpu.cfs_quota_us", "50000");
  put(tmp.file("v1"), "cpu.cfs_period_us", "100000");
  q = cgroup_v1_quota(tmp.file("v1"));
  ASSERT_TRUE(q);
  EXPECT_DOUBLE_EQ(q->cpus, 0.5);
  put(tmp.file("v1none"), "cpu.cfs_quota_us", "-1");
  put(tmp.file("v1none"), "cpu.cfs_period_us", "100000");
  EXPECT_FALSE(cgroup_v1_quota(tmp.file("v1none")));
}

// cgroup v2: the process's cgroup has no limit of its own, its parent 2.5 CPUs and the
// grandparent 4: the smallest on the way up counts.
TEST(CpuQuota, V2TakesTheSmallestLimitUpTheTree) {
  test::TempDir tmp;
  const std::string mount = tmp.file("sys fs cgroup");  // a space: mountinfo writes it as \040
  put(mount + "/kubepods", "cpu.max", "400000 100000");
  put(mount + "/kubepods/pod1", "cpu.max", "250000 100000");
  put(mount + "/kubepods/pod1/ctr", "cpu.max", "max 100000");
  put(tmp.file("proc"), "cgroup", "0::/kubepods/pod1/ctr");
  std::string escaped = mount;
  escaped.replace(escaped.find(' '), 1, "\\040");
  escaped.replace(escaped.find(' '), 1, "\\040");
  put(tmp.file("proc"), "mountinfo",
      "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
      "30 22 0:26 / " +
          escaped + " rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate");
  const auto q = process_cpu_quota(tmp.file("proc/cgroup"), tmp.file("proc/mountinfo"));
  ASSERT_TRUE(q);
  EXPECT_DOUBLE_EQ(q->cpus, 2.5);
  EXPECT_NE(q->source.find("/kubepods/pod1/cpu.max"), std::string::npos) << q->source;
  EXPECT_EQ(quota_threads(q->cpus), 2);
}

// cgroup v1 inside a container: the mount shows the container's own cgroup (root /docker/abc) at
// the mount point, and /proc/self/cgroup names the full path.
TEST(CpuQuota, V1CpuControllerInsideAContainer) {
  test::TempDir tmp;
  const std::string mount = tmp.file("cpu,cpuacct");
  put(mount, "cpu.cfs_quota_us", "150000");
  put(mount, "cpu.cfs_period_us", "100000");
  put(tmp.file("proc"), "cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/");
  put(tmp.file("proc"), "mountinfo",
      "40 30 0:35 /docker/abc " + mount +
          " ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
          "41 30 0:36 /docker/abc " +
          tmp.file("memory") + " ro,nosuid - cgroup cgroup rw,memory");
  const auto q = process_cpu_quota(tmp.file("proc/cgroup"), tmp.file("proc/mountinfo"));
  ASSERT_TRUE(q);
  EXPECT_DOUBLE_EQ(q->cpus, 1.5);
  EXPECT_EQ(quota_threads(q->cpus), 1);
}

TEST(CpuQuota, NoLimitAnywhere) {
  test::TempDir tmp;
  const std::string mount = tmp.file("cpu");
  put(mount + "/job", "cpu.cfs_quota_us", "-1");
  put(mount + "/job", "cpu.cfs_period_us", "100000");
  put(tmp.file("proc"), "cgroup", "1:cpu:/job");
  put(tmp.file("proc"), "mountinfo", "40 30 0:35 / " + mount + " rw - cgroup cgroup rw,cpu");
  EXPECT_FALSE(process_cpu_quota(tmp.file("proc/cgroup"), tmp.file("proc/mountinfo")));
  // No such files at all (not Linux, or /proc not mounted).
  EXPECT_FALSE(process_cpu_quota(tmp.file("nope/cgroup"), tmp.file("nope/mountinfo")));
}

TEST(CpuQuota, TheBudgetIsAtMostTheAffinityMask) {
  const auto& b = cpu_budget();
  EXPECT_GE(b.threads, 1);
  EXPECT_LE(b.threads, available_cores());
  EXPECT_FALSE(b.reason.empty());
}

}  // namespace
}  // namespace orchard
