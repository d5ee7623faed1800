// SIGTERM / SIGINT while training (cloud preemption, Ctrl-C): the first one asks the loop to
// stop after the step in progress (the hooks write a checkpoint, the process exits 128 +
// signal); a second one exits at once.
#pragma once

namespace orchard::engine {

// Installs the handlers (idempotent). Until then the default actions apply.
void install_stop_handlers();
// The signal received since the handlers were installed (0: none).
int stop_signal();
// Forgets a received signal (tests).
void clear_stop_signal();

}  // namespace orchard::engine
