#include "orchard/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>

namespace orchard {
namespace {

TEST(ThreadPool, RunsEveryTaskBeforeDestructionReturns) {
  std::atomic<int> sum{0};
  {
    ThreadPool pool(3);
    EXPECT_EQ(pool.size(), 3);
    for (int i = 1; i <= 1000; ++i) pool.submit([&sum, i] { sum += i; });
  }  // destructor finishes the queue
  EXPECT_EQ(sum.load(), 1000 * 1001 / 2);
}

TEST(ThreadPool, UsesSeveralThreads) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  {
    ThreadPool pool(2);
    // Two tasks that wait for each other can only finish on two different threads.
    for (int i = 0; i < 2; ++i)
      pool.submit([&] {
        ++arrived;
        while (arrived.load() < 2) std::this_thread::yield();
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      });
  }
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPool, AvailableCoresIsPositive) { EXPECT_GE(available_cores(), 1); }

}  // namespace
}  // namespace orchard
