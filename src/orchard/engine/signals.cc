#include "orchard/engine/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace orchard::engine {
namespace {

std::atomic<int> g_signal{0};

void on_stop_signal(int signal) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, signal)) _exit(128 + signal);  // the second one
  static const char kMessage[] = "\norchard: stopping after the current step (again to exit at once)\n";
  [[maybe_unused]] const auto n = write(2, kMessage, sizeof(kMessage) - 1);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int stop_signal() { return g_signal.load(); }

void clear_stop_signal() { g_signal.store(0); }

}  // namespace orchard::engine
