// Logging set-up (spdlog) and progress helpers shared by all commands.
#pragma once

#include <string>

namespace orchard {

void init_logging(bool verbose = false);
bool stderr_is_terminal();
std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace orchard
