// Shared CPUs (issue 57): the compute threads' scheduler statistics read from a task directory
// laid out as /proc/self/task, and the thread governor's decisions window by window.
#include "orchard/core/cpu_contention.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "core/test_util.h"

namespace orchard {
namespace {

namespace fs = std::filesystem;

// One thread's files: stat with the command name (spaces and a parenthesis in it, as the kernel
// allows) and nice value at field 19, schedstat "run_ns wait_ns timeslices".
void put_thread(const std::string& dir, int tid, int nice, int64_t run, int64_t wait) {
  const std::string t = dir + "/" + std::to_string(tid);
  fs::create_directories(t);
  std::string stat = std::to_string(tid) + " (pt_main) thread) R";
  for (int field = 4; field <= 18; ++field) stat += " " + std::to_string(field * 10);
  stat += " " + std::to_string(nice) + " 1 0 0\n";
  test::write_bytes(t + "/stat", stat);
  test::write_bytes(t + "/schedstat", std::to_string(run) + " " + std::to_string(wait) + " 7\n");
}

TEST(CpuContention, SumsTheThreadsAtTheProcessesOwnNiceValue) {
  test::TempDir tmp;
  const int own = ::getpriority(PRIO_PROCESS, 0);
  put_thread(tmp.file("task"), 100, own, 1000, 200);
  put_thread(tmp.file("task"), 101, own, 3000, 600);
  put_thread(tmp.file("task"), 102, own + 5, 9000, 9000);  // an input-pipeline thread: left out
  const auto t = compute_thread_times(tmp.file("task"));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->run_ns, 4000);
  EXPECT_EQ(t->wait_ns, 800);
  EXPECT_FALSE(compute_thread_times(tmp.file("no_such_dir")));
  fs::create_directories(tmp.file("empty"));
  EXPECT_FALSE(compute_thread_times(tmp.file("empty")));
}

TEST(CpuContention, TheShareOfRunnableTimeSpentWaiting) {
  EXPECT_DOUBLE_EQ(ThreadTimes::waited({1000, 100}, {3000, 1100}), 1000.0 / 3000.0);
  EXPECT_DOUBLE_EQ(ThreadTimes::waited({1000, 100}, {2000, 100}), 0.0);
  EXPECT_DOUBLE_EQ(ThreadTimes::waited({1000, 100}, {1000, 100}), 0.0);  // nothing ran
  EXPECT_DOUBLE_EQ(ThreadTimes::waited({5000, 900}, {1000, 100}), 0.0);  // threads ended in between
}

// This process's own threads, read from the real /proc: two spinning threads beside this one
// run, and their time shows.
TEST(CpuContention, ReadsThisProcessesThreads) {
  const auto before = compute_thread_times();
  if (!before) GTEST_SKIP() << "this kernel keeps no per-thread scheduler statistics";
  std::atomic<bool> stop{false};
  std::thread a([&] {
    while (!stop) {
    }
  }),
      b([&] {
        while (!stop) {
        }
      });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto during = compute_thread_times();
  stop = true;
  a.join();
  b.join();
  ASSERT_TRUE(during);
  EXPECT_GT(during->run_ns - before->run_ns, 50'000'000) << "two threads spun for 0.1 s";
}

TEST(ThreadGovernor, KeepsTheCoresTheThreadsReallyGot) {
  ThreadGovernor g(2);
  EXPECT_EQ(g.threads(), 2);
  EXPECT_EQ(g.observe(0.02), 2);  // alone: noise
  EXPECT_EQ(g.observe(0.24), 2);  // 2 x 0.76 rounds to 2
  EXPECT_EQ(g.observe(0.33), 1);  // beside one busy loop on two cores: 2 x 2/3 -> 1
  ThreadGovernor big(16);
  EXPECT_EQ(big.observe(1.0 / 17), 15);  // 16 threads beside one busy loop on 16 cores
  EXPECT_EQ(big.observe(0.5), 8);        // then beside a second 8-thread job
  EXPECT_EQ(big.observe(0.99), 1);       // never below one
}

TEST(ThreadGovernor, TriesOneMoreAfterCalmWindowsAndBacksOffWhileTheCompetitorStays) {
  ThreadGovernor g(2);
  ASSERT_EQ(g.observe(0.33), 1);
  // A lasting competitor: each try of 2 threads waits again, and the next try comes after twice
  // as many calm windows, up to kMaxProbe.
  int calm = ThreadGovernor::kFirstProbe;
  for (int round = 0; round < 5; ++round) {
    for (int i = 1; i < calm; ++i) ASSERT_EQ(g.observe(0.01), 1) << "round " << round << " window " << i;
    ASSERT_EQ(g.observe(0.01), 2) << "round " << round;  // the try
    ASSERT_EQ(g.observe(0.33), 1) << "round " << round;  // it waited: back
    calm = std::min(calm * 2, ThreadGovernor::kMaxProbe);
  }
  // The competitor leaves: the next try keeps the thread, and the back-off starts again.
  for (int i = 1; i < calm; ++i) ASSERT_EQ(g.observe(0.0), 1);
  EXPECT_EQ(g.observe(0.0), 2);
  EXPECT_EQ(g.observe(0.01), 2);
  EXPECT_EQ(g.observe(0.4), 1);  // a new competitor
  for (int i = 1; i < ThreadGovernor::kFirstProbe; ++i) EXPECT_EQ(g.observe(0.0), 1);
  EXPECT_EQ(g.observe(0.0), 2);
}

TEST(ThreadGovernor, AtItsMaximumNeverTriesMore) {
  ThreadGovernor g(1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(g.observe(0.0), 1);
  ThreadGovernor zero(0);
  EXPECT_EQ(zero.threads(), 1);
}

}  // namespace
}  // namespace orchard
