// OpenMP's waiting policy, chosen before the OpenMP runtime starts (issue 57).
//
// libtorch, oneDNN and OpenBLAS all run their parallel regions on libgomp, whose idle threads
// spin for GOMP_SPINCOUNT iterations (300000 by default, milliseconds) before they sleep. Alone
// that is free; beside another process it is a collapse: the threads spin at every barrier while
// the thread they wait for is descheduled (bench/README.md "Shared CPUs"). OMP_WAIT_POLICY=PASSIVE
// (no spinning) is no answer either: alone it is 2x slower. A bounded spin is fast in both cases.
//
// libgomp reads its environment once, in its own constructor, before main. Ways that do not work:
// setenv() from the executable's .preinit_array (it runs before libc's constructor, which then
// resets `environ` to the kernel's array), and re-executing the process with the variable added
// (correct, but 0.2 s on every command). So the executable defines getenv(): the dynamic loader
// binds every shared library's getenv to the executable's first, and this one answers as libc's
// does, from `environ`, except that when neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY is set it
// answers GOMP_SPINCOUNT with Orchard's default, and ORCHARD_GOMP_SPINCOUNT (which says the value
// is Orchard's, for the start-up log: train/runtime.h omp_wait_policy()) with the same. A user's
// OMP_WAIT_POLICY or GOMP_SPINCOUNT is never overridden. libgomp's own OMP_DISPLAY_ENV=VERBOSE
// report shows the value it took (tests/cli/classify_cli_test.cc).
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace {

char kDefaultSpinCount[] = "1000";  // libgomp's own when threads outnumber cores; bench/README.md "Shared CPUs"

char* environment_value(const char* name) {
  if (environ == nullptr) return nullptr;
  const size_t n = std::strlen(name);
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return nullptr;
}

}  // namespace

extern "C" char* getenv(const char* name) noexcept {
  char* value = environment_value(name);
  if (value != nullptr) return value;
  if (std::strcmp(name, "GOMP_SPINCOUNT") != 0 && std::strcmp(name, "ORCHARD_GOMP_SPINCOUNT") != 0) return nullptr;
  if (environment_value("GOMP_SPINCOUNT") != nullptr || environment_value("OMP_WAIT_POLICY") != nullptr) return nullptr;
  return kDefaultSpinCount;
}
