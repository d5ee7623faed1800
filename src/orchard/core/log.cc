#include "orchard/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace orchard {

void init_logging(bool verbose) {
  auto logger = spdlog::stderr_color_mt("orchard");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S %^%L%$ %v");
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
}

bool stderr_is_terminal() { return ::isatty(2) == 1; }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

}  // namespace orchard
