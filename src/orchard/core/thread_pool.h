// A fixed-size pool of worker threads running queued tasks in FIFO order.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace orchard {

class ThreadPool {
 public:
  // nice_increment > 0 lowers the workers' scheduling priority (Linux per-thread nice), so
  // background work (input decoding) yields the CPU to compute threads when both are runnable.
  explicit ThreadPool(int num_threads, int nice_increment = 0);
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void submit(std::function<void()> task);
  int size() const { return static_cast<int>(workers_.size()); }

 private:
  std::vector<std::thread> workers_;
  std::queue<std::function<void()>> tasks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// Number of CPU cores this process may use.
int available_cores();

}  // namespace orchard
