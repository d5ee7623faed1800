// Helpers shared by the fuzz targets (issue 31): a per-process scratch file for the APIs that
// read paths, quiet logging, and the guard that keeps a known, reported finding (decoders
// without a pixel limit) from ending every run before it explores anything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "orchard/core/error.h"

namespace orchard::fuzz {

// A path under $TMPDIR (default /tmp) unique to this process and `name` (a file or a directory
// the caller creates); removed, with anything in it, at exit.
// Targets rewrite the same file for every input instead of creating one per input.
const std::string& scratch_path(const std::string& name);

// Replaces the file's contents with [data, data + size). Aborts on an I/O error: that is a
// broken fuzzing environment, not a finding.
void write_scratch(const std::string& path, const uint8_t* data, size_t size);

// Turns spdlog and protobuf's logging off: warnings about odd configs and invalid UTF-8 would
// otherwise be printed for every input.
void quiet_logging();

// Runs fn; an orchard::Error (DataError included) is how bad input is meant to fail, anything
// else escapes to libFuzzer as a finding.
template <typename Fn>
void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

}  // namespace orchard::fuzz
