// How a run stopped by SIGTERM/SIGINT ends (signals.h): an exception that `main` turns into
// exit status 128 + signal, after the hooks have saved what they save.
#pragma once

#include <stdexcept>
#include <string>

namespace orchard::engine {

class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, const std::string& what) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace orchard::engine
