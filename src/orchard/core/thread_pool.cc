#include "orchard/core/thread_pool.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace orchard {

ThreadPool::ThreadPool(int num_threads, int nice_increment) {
  if (num_threads < 1) num_threads = 1;
  for (int i = 0; i < num_threads; ++i)
    workers_.emplace_back([this, nice_increment] {
      if (nice_increment > 0) {
        // On Linux, nice applies to the calling thread only; failure is harmless.
        const int tid = static_cast<int>(::syscall(SYS_gettid));
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), ::getpriority(PRIO_PROCESS, 0) + nice_increment);
      }
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
          if (tasks_.empty()) return;
          task = std::move(tasks_.front());
          tasks_.pop();
        }
        task();
      }
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push(std::move(task));
  }
  cv_.notify_one();
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

}  // namespace orchard
